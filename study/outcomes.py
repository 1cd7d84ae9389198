"""
A study's outcomes, its results.json: per arm its per-seed accuracies, its outcomes under the pre-registered
rule (per run: fit, steps to fit, area and range, extrapolates or not) and its tests against the control.
"""

import copy
import shlex
import statistics

from base import rundir
from study.evals import MISMATCH, provenance_of
from study.runs import SCHEDULING, fit_by_then
from study.settings import parse_term
from study.stats import (DELTA, TESTS, at_point, deteriorates, early_late, family_arms, fisher_exact, fixed_steps, holm,
                         label_rule, leave_one_out, mean_ci, mean_std, named_changes, pearson, permutation_test,
                         point_text, second_analysis, seeds_for_power, seeds_for_shift, sign_flip, smallest_fisher_p,
                         verdict, wilson)

def find_fit(runs):
    """run.fit_iter of every finished run (None: never fit, or not by the fixed step it is read at)."""
    for run in runs:
        if run.state == 'done':
            run.fit_iter = fit_by_then(run)


def deterioration(runs, cfg):
    """{arm: {'count', 'of', 'seeds'}} under the study's rule (deteriorate_multiple > 0), over fit runs."""
    m = f"{cfg['deteriorate_multiple']}x"
    out = {}
    for run in runs:
        if run.fit_iter is None or run.eval is None:
            continue
        task = primary_task(run, cfg)
        accs = [r['length_eval'][task][m] for r in run.records          # its quick evals from the fit on
                if r['fit_iter'] is not None and not r.get('final')
                and r['length_eval'].get(task, {}).get(m) is not None]
        arm = out.setdefault(point_name(run), {'count': 0, 'of': 0, 'seeds': []})
        arm['of'] += 1
        if deteriorates(accs, cfg['deteriorate_drop'], cfg['deteriorate_evals']):
            arm['count'] += 1
            arm['seeds'].append(run.seed)
    return out


def init_template(cfg, arm, study_argv):
    """The init_from of an arm's runs with '{seed}' unfilled, as plan() builds it (later overrides win)."""
    template = {**cfg['common'], **cfg['arms'][arm]}.get('init_from', '')
    for a in study_argv:
        if a.startswith('--init_from='):
            template = a.split('=', 1)[1]
    return template


def area_and_range(curve, threshold):
    """curve: {multiple: accuracy} of one run's final eval. -> (area: the mean accuracy over the evaluated
    multiples, the area under the step curve in log2(multiple) normalized to [0, 1]; range: the largest
    multiple with accuracy >= threshold there and at every shorter one, 0 if none)."""
    points = sorted((m, a) for m, a in curve.items() if a is not None)
    area = sum(a for _, a in points) / len(points) if points else None
    reach = 0
    for m, a in points:
        if a < threshold:
            break
        reach = m
    return area, reach


def spread(values):
    """mean with its t interval, sd, median of a list of numbers (all None when empty)."""
    mean, ci = mean_ci(values)
    return {'mean': mean, 'ci95': ci, 'sd': mean_std(values)[1] if values else None,
            'median': statistics.median(values) if values else None}


def arm_outcomes(per_seed, cfg, fixed=False):
    """per_seed: {seed: (fit_iter, accuracy at extrap_multiple or None, {multiple: accuracy})} of an arm's
    finished runs -> its outcome counts and intervals. A never-fit run (it says nothing of length) is counted
    apart, and as area 0 beside; at fixed steps every run counts, one not fit by then marked so, and the fit
    runs' area is given beside."""
    fit = {s: o for s, o in per_seed.items() if o[0] is not None}
    counted = per_seed if fixed else fit
    steps = {str(s): o[0] for s, o in fit.items()}
    accs = {s: o[1] for s, o in counted.items() if o[1] is not None}
    extrap = [s for s, a in accs.items() if a >= cfg['extrap_threshold']]
    mean, ci = mean_ci(list(accs.values()))
    shape = {s: area_and_range(o[2], cfg['range_threshold']) for s, o in counted.items()}
    areas = {str(s): a for s, (a, _) in shape.items() if a is not None}
    second = ({str(s): areas[str(s)] for s in fit if str(s) in areas} if fixed else
              {str(s): areas[str(s)] if s in fit else 0.0 for s in per_seed if s not in fit or str(s) in areas})
    over = 'every run measured' if fixed else 'fit runs'
    unfit = [s for s, o in per_seed.items() if o[0] is None]
    return {'runs': len(per_seed), 'fit': len(fit), 'never_fit': [] if fixed else unfit,
            **({'not_fit_by_then': unfit} if fixed else {}),
            'steps_to_fit': {'per_seed': steps, 'median': statistics.median(steps.values()) if steps else None,
                             'min': min(steps.values(), default=None), 'max': max(steps.values(), default=None)},
            'extrapolates': {'count': len(extrap), 'of': len(accs), 'seeds': extrap,
                             'not_measured': [s for s in fit if s not in accs],   # the final eval skipped the point
                             'share': len(extrap) / len(accs) if accs else None, 'ci95': wilson(len(extrap), len(accs)),
                             'interval': 'Wilson score'},
            'accuracy_at_extrap': {'multiple': cfg['extrap_multiple'], 'per_seed': {str(s): a for s, a in accs.items()},
                                   'mean': mean, 'ci95': ci, 'interval': f'Student t over {over}, clipped to [0, 1]'},
            'area': {'per_seed': areas, **spread(list(areas.values())),
                     second_analysis(fixed): {'per_seed': second, **spread(list(second.values()))},
                     'interval': f'Student t over {over}, clipped to [0, 1]'},
            'range': {'per_seed': {str(s): m for s, (_, m) in shape.items()}, 'threshold': cfg['range_threshold'],
                      'median': statistics.median(m for _, m in shape.values()) if shape else None}}


def versus_control(arm, ctrl, paired, delta):
    """The tests of one arm against the control, over fit runs (at fixed steps, every run measured; Holm
    is applied across arms after)."""
    e1, e0 = arm['extrapolates'], ctrl['extrapolates']
    out = {'fisher': None, 'permutation': None, 'paired': None, 'power': None}
    if e1['of'] and e0['of']:
        table = [[e1['count'], e1['of'] - e1['count']], [e0['count'], e0['of'] - e0['count']]]
        out['fisher'] = {'table': table, 'rows': ['arm', 'control'], 'columns': ['extrapolates', 'fit but not'],
                         'p': fisher_exact(*table[0], *table[1]),
                         'smallest_possible_p': smallest_fisher_p(e1['of'], e0['of'])}
        n = seeds_for_power(e1['share'], e0['share'])
        out['power'] = {'rates': [e1['share'], e0['share']], 'seeds_per_arm': n,
                        'note': 'the observed rates are equal: the effect is zero, no n suffices' if n is None else
                                f"fit runs per arm for {TESTS['power']:.0%} power, two-sided Fisher at alpha "
                                f"{TESTS['alpha']}"}
    x, y = arm['accuracy_at_extrap']['per_seed'], ctrl['accuracy_at_extrap']['per_seed']
    if x and y:
        p, method = permutation_test(list(x.values()), list(y.values()))
        out['permutation'] = {'p': p, 'method': method,
                              'difference': arm['accuracy_at_extrap']['mean'] - ctrl['accuracy_at_extrap']['mean']}
    if paired:
        both = [s for s in x if s in y]
        test = sign_flip([x[s] - y[s] for s in both]) if both else {'p': None, 'method': 'no seed fit in both arms'}
        out['paired'] = {'p': test['p'], 'method': test['method'], 'seeds': [int(s) for s in both],
                         'difference': sum(x[s] - y[s] for s in both) / len(both) if both else None}
    second = second_analysis(arm.get('fixed_steps'))
    out['area'] = {'left_out': area_test(arm['area']['per_seed'], ctrl['area']['per_seed'], delta),
                   second: area_test(arm['area'][second]['per_seed'], ctrl['area'][second]['per_seed'], delta)}
    return out


def area_test(x, y, shift=DELTA, unpaired=True):
    """An area against another, paired by seed (a seed fixes the initial weights and batches in every arm):
    the sign flip over the per-seed differences with its intervals, the seeds 80% power needs for `shift`,
    and the unpaired permutation test (unpaired=False: not)."""
    both = [s for s in x if s in y]
    d = [x[s] - y[s] for s in both]
    if not d:
        return None
    test, (mean, sd) = sign_flip(d), mean_std(d)
    return {'seeds': [int(s) for s in both], 'per_seed': {str(s): v for s, v in zip(both, d)}, 'difference': mean,
            'ci95': test['ci95'], 'ci90': test['ci90'],
            'sd': sd, 'p': test['p'], 'method': test['method'], 'seeds_for_power': seeds_for_shift(sd, shift),
            'shift': shift,
            **({'unpaired_p': permutation_test(list(x.values()), list(y.values()))[0] if len(x) and len(y) else None}
               if unpaired else {})}


def point_name(run):
    """The name a run is summarized under: its arm, or its arm at its point: 'vpad +1000' (cooled from fit +
    1000), 'vpad +10000 uncooled' (the trunk), 'vpad at 6000' (from step 6000)."""
    point = run.point
    if point is None:
        return run.arm
    k = run.cfg['max_iters' if run.fixed_steps else 'steps_after_fit'] if point == 'trunk' else point
    return f"{run.arm} {point_text(k, run.fixed_steps)}" + (' uncooled' if point == 'trunk' else '')


def test_groups(arms_out, cfg):
    """-> [(family, [arm names], control's name)] at each point (families {}: every other arm, one family)."""
    families = cfg['families'] or {'': [a for a in cfg['arms'] if a != cfg['control']]}
    named = {(a['arm'], a['point']): n for n, a in arms_out.items()}
    return [(family, [named[a, point] for a in family_arms(arms) if (a, point) in named],
             named[cfg['control'], point])
            for point in dict.fromkeys(a['point'] for a in arms_out.values()) if (cfg['control'], point) in named
            for family, arms in families.items()]


def adjust(tests, delta, robust=False, count=()):
    """Holm over one family's tests, then each one's label; count: tests whose p counts here but whose Holm p
    is written in another analysis; robust: also each one's leave-one-out robustness. In place."""
    for t, p in zip(tests, holm([t['p'] for t in [*tests, *count]])):
        t['p_holm'] = p
        if 'ci90' in t:
            t['label'] = verdict(t, delta)
    if robust and all('per_seed' in t for t in tests):
        leave_one_out(tests, delta)


def add_outcomes(arms_out, per_run, cfg, study_argv):
    """Per arm its outcomes; per tested arm its tests against the control: the Fisher p Holm-adjusted within
    its family (the area's paired tests are adjusted and labelled by rederive, with the rest of the family)."""
    for name, arm in arms_out.items():
        arm.update(arm_outcomes(per_run.get(name, {}), cfg, arm.get('fixed_steps')))
    if not cfg['control']:
        return
    paired_on = init_template(cfg, cfg['control'], study_argv)
    for family, names, control in test_groups(arms_out, cfg):
        for name in names:
            template = init_template(cfg, arms_out[name]['arm'], study_argv)
            v = arms_out[name]['vs_control'] = versus_control(
                arms_out[name], arms_out[control], '{seed}' in template and template == paired_on, cfg['delta'])
            v.update(control=control, family=family)
        tested = [arms_out[n]['vs_control'] for n in names]
        adjust([v['fisher'] for v in tested if v['fisher']], cfg['delta'])


def long_training(arms_out, cfg):
    """A study of trunks with cooled snapshots: per run its change, the area cooled late minus early (claim 1),
    against 0 and against the control's; the cooldown's effect (cooled late minus the trunk's own, uncooled);
    the mismatch's growth and its correlation with the change. Holm and labels are rederive's."""
    at = {(a['arm'], a['point']): a for a in arms_out.values()}
    points = sorted(p for _, p in at if isinstance(p, int))
    early, late = early_late(points, cfg['early_snapshot'], cfg['late_snapshot'])
    delta = cfg['delta']

    def per_seed(arm, point, key='left_out'):     # its areas in an analysis (per_seed_area), or its token shifts
        return token_shifts(at, arm, point) if key == 'token_shift' else per_seed_area(at, arm, point, key)

    def change(arm, key='left_out'):
        x, y = per_seed(arm, late, key), per_seed(arm, early, key)
        return {s: x[s] - y[s] for s in x if s in y}

    out = {'early': early, 'late': late, 'delta': delta, 'change': {}, 'cooldown': {}, 'mismatch': {},
           **({'fixed_steps': True} if any(a.get('fixed_steps') for a in arms_out.values()) else {})}
    area_change = {arm: change(arm) for arm in cfg['arms']}
    shift_change = {arm: change(arm, 'token_shift') for arm in cfg['arms']}
    for arm in cfg['arms']:
        out['change'][arm] = area_test(per_seed(arm, late), per_seed(arm, early), delta)
        out['cooldown'][arm] = area_test(per_seed(arm, late), per_seed(arm, 'trunk'), delta)
        shift = {p: per_seed(arm, p, 'token_shift') for p in (early, late)}
        if shift[early] or shift[late]:
            out['mismatch'][arm] = {'token_shift': {str(p): mean_ci(list(v.values()))[0] if v else None
                                                    for p, v in shift.items()},
                                    'growth': area_test(shift[late], shift[early], delta)}
    out['change_vs_control'] = against_control(area_change, cfg)
    if out.get('fixed_steps'):     # beside every test at fixed steps: the runs fit by the early point (so by the late)
        fit_change = {arm: change(arm, 'fit_runs_only') for arm in cfg['arms']}
        out['fit_runs_only'] = {'change': {arm: area_test(per_seed(arm, late, 'fit_runs_only'),
                                                          per_seed(arm, early, 'fit_runs_only'), delta)
                                           for arm in cfg['arms']},
                                'change_vs_control': against_control(fit_change, cfg)}
    if out.get('fixed_steps') and cfg['fit_plus_reading']:
        out['fit_plus'] = fit_plus(at, points, cfg)
    runs = {a: [(shift_change[a][s], area_change[a][s]) for s in shift_change[a] if s in area_change[a]]
            for a in cfg['arms']}

    def correlation(pairs):
        return dict(zip(('r', 'ci95', 'runs'), pearson([m for m, _ in pairs], [d for _, d in pairs])))
    # pooled over the arms, r also follows the arms' different means (a site whose shift grows most
    # may gain most on average); within an arm only the runs' own variation is left
    out['mismatch_vs_change'] = {**correlation([x for pairs in runs.values() for x in pairs]),
                                 'by_arm': {a: correlation(pairs) for a, pairs in runs.items() if pairs},
                                 'interval': "Fisher's z",
                                 'what': 'per run: the change of the per-token shift (cooled, late minus early) '
                                         'against the change of its area, over the runs with dropout, and within '
                                         'each arm'}
    return out


def fit_plus(at, points, cfg):
    """A study at fixed steps read as a fit-relative one: each run at its cooled point nearest its trunk's fit +
    fit_plus_reading, where one lies within +-fit_plus_window (fit by then), each arm against the control."""
    k, window = cfg['fit_plus_reading'], cfg['fit_plus_window']
    out = {'offset': k, 'window': window, 'points': {}, 'area': {}, 'vs_control': {}}
    for arm in cfg['arms']:
        fits = at.get((arm, 'trunk'), {}).get('steps_to_fit', {}).get('per_seed', {})
        for seed, fit in fits.items():
            point = min(points, key=lambda p: (abs(p - fit - k), p))
            area = at.get((arm, point), {}).get('area', {}).get('per_seed', {}).get(seed)
            if abs(point - fit - k) <= window and area is not None:
                out['points'].setdefault(arm, {})[seed] = point
                out['area'].setdefault(arm, {})[seed] = area
    out['vs_control'] = against_control(out['area'], cfg)
    return out


def against_control(per_arm, cfg):
    """Each arm of each family against the control over {arm: {seed: value}}; {} without a control."""
    families = cfg['families'] or {'': [a for a in cfg['arms'] if a != cfg['control']]}
    return {a: dict(t, family=family) for family, arms in (families if cfg['control'] else {}).items()
            for a in family_arms(arms)
            for t in [area_test(per_arm.get(a, {}), per_arm.get(cfg['control'], {}), cfg['delta'])] if t}


def comparisons(arms_out, cfg, pairs_of):
    """The study's own comparisons a - b paired by seed at each cooled point, each side an arm's area, plain or
    under a variant, or a difference of such (an interaction); pairs_of: {family: [(a, b, a's terms, b's
    terms)]} (study.settings.Lists). -> [{'point', 'family', 'a', 'b', 'left_out', the second analysis}]; Holm
    within each family at each point, and the labels, are rederive's"""
    at = {(a['arm'], a['point']): a for a in arms_out.values()}
    points = [p for p in dict.fromkeys(a['point'] for a in arms_out.values()) if p != 'trunk']
    analyses = ('left_out', second_analysis(any(a.get('fixed_steps') for a in arms_out.values())))
    out = []

    def values(terms, point, which):
        return fold([(sign, arm, per_seed_area(at, arm, point, which, v)) for sign, arm, v in terms])
    for point in points:
        for family, pairs in pairs_of.items():
            for a, b, a_terms, b_terms in pairs:
                t = {'point': point, 'family': family, 'a': a, 'b': b}
                for which in analyses:
                    t[which] = area_test(values(a_terms, point, which), values(b_terms, point, which), cfg['delta'])
                out.append(t)
    return out


def variant_tests(arms_out, cfg):
    """Secondary: under each variant, each arm's area against its control's at the same point, paired by
    seed, never-fit runs left out and as 0 (Holm within the family at each point and variant: rederive's)."""
    for family, names, control in test_groups(arms_out, cfg):
        analyses = ('left_out', second_analysis(arms_out[control].get('fixed_steps')))
        for variant in arms_out[control].get('variants', {}):
            for name in names:
                mine, ctrl = arms_out[name].get('variants', {}).get(variant), arms_out[control]['variants'][variant]
                if mine:
                    mine['vs_control'] = {'control': control, 'family': family, **{
                        which: area_test(*(x['area']['per_seed'] if which == 'left_out' else
                                           x['area'][which]['per_seed'] for x in (mine, ctrl)),
                                         cfg['delta']) for which in analyses}}


def machine_of(provenance):
    """The machine a run trained on, from its provenance: 'CPU model, torch X' ('unknown' when not
    recorded); several joined with ' + ' where a resume moved it."""
    train = provenance.get('train') or []
    names = list(dict.fromkeys(f"{p.get('cpu', 'unknown')}, torch {p.get('torch', 'unknown')}" for p in train))
    if provenance.get('reconstructed'):
        names = [f"{provenance.get('cpu', 'unknown')}, torch {provenance.get('torch', 'unknown')} (reconstructed)"]
    return ' + '.join(names) or 'unknown'


def primary_task(run, cfg):
    """The one task the outcomes are judged on: extrap_task, fixed in advance, or the run's first eval task."""
    return cfg['extrap_task'] or run.tasks[0]


def curve(record, task):
    """An eval record's {multiple: accuracy} of one task."""
    return {int(m[:-1]): a for m, a in record['length_eval'].get(task, {}).items()}


def variant_outcomes(by_variant, per_run, cfg, fixed=False):
    """Per length-scaling variant, an arm's area and range as arm_outcomes gives them plain, and its mean
    accuracy per multiple (the primary task): {variant: {'area', 'range', 'accuracy'}}. A run never fit is
    never fit under every variant (at fixed steps each run is measured under every variant)."""
    out = {}
    for variant, per_seed in by_variant.items():
        never = {} if fixed else {s: o for s, o in per_run.items() if o[0] is None}
        o = arm_outcomes({**per_seed, **never}, cfg, fixed)
        means = {}
        for _, _, by_m in per_seed.values():
            for m, a in by_m.items():
                if a is not None:
                    means.setdefault(m, []).append(a)
        out[variant] = {'area': o['area'], 'range': o['range'],
                        'accuracy': {str(m): sum(v) / len(v) for m, v in sorted(means.items())}}
    return out


def per_seed_area(at, arm, point, which='left_out', variant=''):
    """{seed: area} of an arm at a point (at: {(arm, point): its summary}), plain or under a variant, in the
    primary analysis (which='left_out': never-fit runs left out; at fixed steps every run measured) or the one
    beside it (second_analysis: 'never_fit_as_0', or at fixed steps 'fit_runs_only'); {} where there is none."""
    a = at.get((arm, point), {})
    area = ((a.get('variants') or {}).get(variant) or {}).get('area') if variant else a.get('area')
    area = area or {}
    return area.get('per_seed', {}) if which == 'left_out' else area.get(which, {}).get('per_seed', {})


def token_shifts(at, arm, point):
    """{seed: its per-token shift} of an arm's runs at a point, where measured (none: no dropout)."""
    return {s: m['token_shift'] for s, m in at.get((arm, point), {}).get('mismatch_per_seed', {}).items()
            if m.get('token_shift') is not None}


def rederive(results):
    """Every number of a summary that its per-seed numbers give, under the current wording of the rule:
    summarize's last step, and a committed results.json's (study.report). Each arm's spreads; each paired test
    again from the per-seed areas it is built from (its differences, mean, sd, p, intervals, the mean areas that
    decide "at the ceiling"); the Holm families: each arm against its control within its family at its point, in
    a study of snapshots each arm's change against the control's within its family's changes or, where its
    family names it ("arm's change"), with the family's tests at the late point; the comparisons and the variants
    within theirs; every label (stats.verdict) and leave-one-out robustness. In place; -> results."""
    arms, rule = results['arms'], results['rule']
    delta, c = rule.get('delta', DELTA), rule['control']
    rule['label'] = label_rule(delta)
    at = {(a.get('arm', n), a.get('point')): a for n, a in arms.items()}   # (summaries before snapshots: no point)
    fixed = fixed_steps(results)
    analyses = ('left_out', second_analysis(fixed))     # the primary and the analysis beside it
    respread(arms, analyses[1])

    def areas(arm, point, which='left_out', variant=''):
        return per_seed_area(at, arm, point, which, variant)

    def of(name, which, variant=''):       # an arm's side of a test: [(sign, term, {seed: area})]
        a = arms[name]
        return [(1, a.get('arm', name) + (f"@{variant}" if variant else ''),
                 areas(a.get('arm', name), a.get('point'), which, variant))]

    def point(a, p, which='left_out', sign=1):
        return [(sign, f"{a} {point_text(p, fixed)}", areas(a, p, which))]

    def change(a, which='left_out'):       # a run's change, late minus early
        return point(a, late, which) + point(a, e, which, -1)
    families, counted, built = {}, {}, []       # built: (test, its sides a and b, each [(sign, term, per-seed areas)])
    for name, arm in arms.items():
        v = arm.get('vs_control') or {}
        cname = v.get('control', c)
        for which in analyses:
            t = (v.get('area') or {}).get(which)
            if t:
                families.setdefault((arms[cname].get('point'), v.get('family'), which), []).append(t)
                built.append((t, of(name, which), of(cname, which)))
        for variant, out in (arm.get('variants') or {}).items():
            vc = out.get('vs_control') or {}
            for which in analyses:
                if vc.get(which):
                    families.setdefault((arms[vc['control']].get('point'), vc.get('family'), f"{variant}, {which}"),
                                        []).append(vc[which])
                    built.append((vc[which], of(name, which, variant), of(vc['control'], which, variant)))
    L = results.get('long')
    if L:
        e, late = L['early'], L['late']
        joined = named_changes(rule.get('families'))
        for a, t in L['change_vs_control'].items():
            if a in joined:      # with its family's tests at the late point; a never-fit run has no change to count
                families.setdefault((late, joined[a], 'left_out'), []).append(t)
                if a not in (L.get('fit_runs_only') or {}).get('change_vs_control', {}):   # (fixed steps: its own)
                    counted.setdefault((late, joined[a], analyses[1]), []).append(t)
            else:
                families.setdefault(('change', t.get('family'), 'left_out'), []).append(t)
            built.append((t, change(a), change(c)))
        for a, t in L['change'].items():
            if t:
                families[('change', a, 'alone')] = [t]      # each a single test of its own: Holm over one is the raw p
                built.append((t, point(a, late), point(a, e)))
        fit = L.get('fit_runs_only') or {}      # at fixed steps: the same over the runs fit by the early point
        which = analyses[1]
        for a, t in fit.get('change_vs_control', {}).items():
            families.setdefault((late, joined[a], which) if a in joined else ('change', t.get('family'), which),
                                []).append(t)
            built.append((t, change(a, which), change(c, which)))
        for a, t in fit.get('change', {}).items():
            if t:
                families[('change', a, 'alone, ' + which)] = [t]
                built.append((t, point(a, late, which), point(a, e, which)))
        for a, t in L['cooldown'].items():
            if t:
                families[('cooldown', a, 'alone')] = [t]
                built.append((t, point(a, late), [(1, f"{a} uncooled", areas(a, 'trunk'))]))
        F = L.get('fit_plus')
        for a, t in (F or {}).get('vs_control', {}).items():     # secondary: a family of its own
            families.setdefault(('fit_plus', t.get('family'), 'secondary'), []).append(t)
            built.append((t, [(1, a, F['area'].get(a, {}))], [(1, c, F['area'].get(c, {}))]))
        for arm, m in L.get('mismatch', {}).items():      # a shift in eval sds, not area: no margin (delta 0)
            shift = {p: token_shifts(at, arm, p) for p in (e, late)}
            m['token_shift'] = {str(p): mean_ci(list(v.values()))[0] if v else None for p, v in shift.items()}
            if m.get('growth'):
                retest(m['growth'], [(1, 'late', shift[late])], [(1, 'early', shift[e])], delta, areas=False)
                adjust([m['growth']], 0.0)
    names = {a.get('arm', n) for n, a in arms.items()}
    for t in results.get('comparisons', []):
        for which in analyses:
            if t[which]:
                families.setdefault(('comparison', t['point'], t['family'], which), []).append(t[which])
                built.append((t[which], *([(sign, f"{arm}@{v}" if v else arm, areas(arm, t['point'], which, v))
                                           for sign, arm, v in parse_term(side, names, results['eval'].get(
                                               'variants', []))] for side in (t['a'], t['b']))))
    for t, a, b in built:
        retest(t, a, b, t.get('shift', delta))
    for key, tests in families.items():
        adjust(tests, delta, robust=key[-1] in ('left_out', 'alone', 'secondary') or key[-1].endswith(', left_out'),
               count=counted.get(key, ()))
    change_labels(results)
    return results


def fold(terms):
    """{seed: the signed sum of the terms' per-seed values} over the seeds all of them have: a side of a test."""
    total = None
    for sign, _, x in terms:
        total = ({s: sign * v for s, v in x.items()} if total is None else
                 {s: total[s] + sign * x[s] for s in total if s in x})
    return total


def retest(t, a, b, shift, areas=True):
    """A paired test again from the per-seed values it is built from, sides a - b (each [(sign, term, {seed:
    value})]), as area_test made it (but its unpaired p, a Monte Carlo one past 200,000 splits, kept as the
    summary drew it), with the mean of each term over its seeds ('areas': they decide "at the ceiling"; none for
    a shift in sds). In place."""
    t.update(area_test(fold(a), fold(b), shift, unpaired=False) or {})
    if areas:
        t['areas'] = {term: mean_ci([x[str(s)] for s in t['seeds'] if str(s) in x])[0] for _, term, x in a + b}


def respread(arms, second):
    """Each arm's spreads again from its per-seed numbers: its area's (plain, beside, under each variant), its
    accuracy at the extrapolation multiple, its accuracy per task and multiple. In place."""
    for arm in arms.values():
        for area in [arm['area'], *(v['area'] for v in (arm.get('variants') or {}).values())]:
            for x in (area, area.get(second)):
                if x is not None:
                    x.update(spread(list(x['per_seed'].values())))
        acc = arm.get('accuracy_at_extrap')
        if acc:
            acc['mean'], acc['ci95'] = mean_ci(list(acc['per_seed'].values()))
        for point in (p for task in arm.get('tasks', {}).values() for p in task.values()):
            point['mean'], point['std'] = mean_std(list(point['per_seed'].values()))


def labels(results):
    """{test: label} of a summary's primary tests: each arm against its control, each change against the
    control's, each of the study's comparisons."""
    out = {f"{n} vs {v['control']}": v['area']['left_out'].get('label') for n, a in results['arms'].items()
           for v in [a.get('vs_control') or {}] if (v.get('area') or {}).get('left_out')}
    out |= {f"{a}'s change vs the control's": t.get('label')
            for a, t in results.get('long', {}).get('change_vs_control', {}).items()}
    out |= {f"{t['a']} vs {t['b']}" + ('' if t['point'] is None else f" {at_point(t['point'], fixed_steps(results))}"):
            t['left_out'].get('label') for t in results.get('comparisons', []) if t['left_out']}
    return out


RELABELLED = {'control', 'delta', 'families'}   # the rule's keys rederive reads: a change of them it relabels


def change_labels(results):
    """A declared change of the rule (results['rule_change']): each primary test's label under the old rule and
    under this one, from the summary's own numbers where the change is of keys rederive reads (else as the summary
    was written). In place."""
    change = results.get('rule_change')
    if not change or not set(change['keys']) <= RELABELLED:
        return
    old = copy.deepcopy({k: v for k, v in results.items() if k != 'rule_change'})
    old['rule'].update({k: before for k, (before, _) in change['keys'].items()})
    before, now = labels(rederive(old)), labels(results)
    change['labels'] = {k: [v, now.get(k)] for k, v in before.items()}


def summarize(runs, cfg, lists, study_argv):
    """results.json: per arm, its overrides, per task and multiple the per-seed accuracies, and its
    outcomes under the pre-registered rule with the tests against the control. lists: the study's list
    settings, parsed (study.settings.Lists)."""
    arms_out, per_run, primary, by_variant = {}, {}, {}, {}
    for run in runs:
        name = point_name(run)
        arm = arms_out.setdefault(name, {'arm': run.arm, 'point': run.point, 'overrides': cfg['arms'][run.arm],
                                         **({'fixed_steps': True} if run.fixed_steps else {}),
                                         'seeds': [], 'pending_seeds': [], 'tasks': {}})
        if run.state == 'never fit':          # a branch of a trunk that never fit: never fit at its point too
            arm['seeds'].append(run.seed)
            per_run.setdefault(name, {})[run.seed] = (None, None, {})
            continue
        if run.eval is None:
            arm['pending_seeds'].append(run.seed)
            continue
        arm['seeds'].append(run.seed)
        task = primary_task(run, cfg)
        by_m = curve(run.eval, task)     # arm_outcomes' (fit_iter, accuracy at extrap_multiple or None, the curve)
        per_run.setdefault(name, {})[run.seed] = (run.fit_iter, by_m.get(cfg['extrap_multiple']), by_m)
        for variant, record in run.evals.items():
            by_variant.setdefault(name, {}).setdefault(variant, {})[run.seed] = (
                run.fit_iter, None, curve(record, task))
        primary.setdefault(name, {})[task] = None
        if run.mismatch is not None:
            arm.setdefault('mismatch_per_seed', {})[str(run.seed)] = run.mismatch
        for task, accs in run.eval['length_eval'].items():
            for m, acc in accs.items():
                if acc is not None:
                    point = arm['tasks'].setdefault(task, {}).setdefault(m[:-1], {'per_seed': {}})
                    point['per_seed'][str(run.seed)] = acc
                    point['length'] = int(m[:-1]) * run.eval['block_size']
    for arm in arms_out.values():
        if arm.get('mismatch_per_seed'):
            per_seed = list(arm['mismatch_per_seed'].values())
            values = {k: [m[k] for m in per_seed if m.get(k) is not None] for k in MISMATCH}
            arm['mismatch'] = {k: mean_std(v)[0] if v else None for k, v in values.items()}
            arm['mismatch_sd'] = {k: mean_std(v)[1] if v else None for k, v in values.items()}   # over seeds
    for name, variants in by_variant.items():
        arms_out[name]['variants'] = variant_outcomes(variants, per_run.get(name, {}), cfg,
                                                      arms_out[name].get('fixed_steps'))
    add_outcomes(arms_out, per_run, cfg, study_argv)
    if cfg['control']:
        variant_tests(arms_out, cfg)
    if cfg['deteriorate_multiple']:        # the rule on the quick evals: of whole runs or trunks, not of branches
        det = deterioration([r for r in runs if not isinstance(r.point, int)], cfg)
        for name, arm in arms_out.items():
            if isinstance(arm['point'], int):
                continue
            d = arm['deterioration'] = det.get(name, {'count': 0, 'of': 0, 'seeds': []})
            ctrl = det.get(arm.get('vs_control', {}).get('control'))
            if ctrl and d['of'] and ctrl['of']:
                d['fisher_p'] = fisher_exact(d['count'], d['of'] - d['count'],
                                             ctrl['count'], ctrl['of'] - ctrl['count'])
    for name, arm in arms_out.items():
        arm['accuracy_at_extrap']['task'] = ','.join(primary.get(name, {})) or None
    task = cfg['extrap_task'] or "the run's first eval task"
    rule = {'control': cfg['control'], 'fit_accuracy': cfg['fit_accuracy'], 'extrap_multiple': cfg['extrap_multiple'],
            'extrap_threshold': cfg['extrap_threshold'], 'extrap_task': cfg['extrap_task'],
            'range_threshold': cfg['range_threshold'], **TESTS,
            **({'deteriorates': f"a fit run deteriorates when its quick-eval accuracy at "
                                f"{cfg['deteriorate_multiple']}x falls >= {cfg['deteriorate_drop']} below its running "
                                f"maximum since the fit at {cfg['deteriorate_evals']} quick evals in a row"}
               if cfg['deteriorate_multiple'] else {}),
            'fit': f"a run fits at the first quick eval where the 1x accuracy of every task it evaluates is >= "
                   f"{cfg['fit_accuracy']}; a run that never does is counted apart and left out of the extrapolation "
                   f"statistics",
            'extrapolates': f"a fit run extrapolates when its final-eval accuracy at {cfg['extrap_multiple']}x on "
                            f"{task} is >= {cfg['extrap_threshold']}",
            'tests': f"each arm against {cfg['control']!r}: primary, the area (mean accuracy over the evaluated "
                     f"multiples) paired by seed, two-sided sign-flip test over the seeds fit in both (Holm-corrected "
                     f"over the arms; also with never-fit runs counted as area 0); secondary, two-sided Fisher exact "
                     f"test on extrapolates / fit but not (Holm-corrected over the arms), two-sided permutation test "
                     f"of the mean accuracy at {cfg['extrap_multiple']}x over fit runs, and a paired sign-flip test "
                     f"of it over seeds fit in both where both arms continue the same runs (init_from with '{{seed}}')"
                     if cfg['control'] else 'none (control is empty)'}
    # the command that regenerates these results: how the runs were scheduled does not matter
    study_argv = [a for a in study_argv if a[2:].split('=', 1)[0] not in SCHEDULING]
    rule.update(delta=cfg['delta'], families=cfg['families'], label=label_rule(cfg['delta']))
    if cfg['eval_variants']:
        rule['eval_variants'] = cfg['eval_variants']
    if cfg['comparisons']:
        rule['comparisons'] = cfg['comparisons']
    if cfg.get('every_run_counts'):
        rule['fixed_steps'] = ("every run trains the same steps (steps_after_fit=0), its learning rate decayed at its "
                               "end, and is measured there, fit or not (every_run_counts). A run not fit by its end is "
                               "marked 'not fit by then' and its measured area counts in every test, unlike the fit "
                               "runs only, tested beside it")
    elif any(a.get('fixed_steps') for a in arms_out.values()):
        rule['fixed_steps'] = ("each trunk's points are fixed steps of its own training (snapshots_at_iter), each "
                               "cooled for cooldown_iters: every run is measured there, fit or not. A run not fit by "
                               "a point (its fit came later, or never) is marked 'not fit by then' there and its "
                               "measured area counts in every test, unlike the fit runs only, tested beside it")
    snapshots = any(isinstance(a['point'], int) for a in arms_out.values())
    machines = {}
    for run in runs:
        if run.state != 'never fit' and run.eval is not None:
            seeds = machines.setdefault(machine_of(provenance_of(run)), {}).setdefault(run.arm, [])
            seeds += [run.seed] if run.seed not in seeds else []
    results = {'command': 'python ablate.py ' + shlex.join(study_argv), 'base_config': cfg['base_config'],
               'common': cfg['common'], 'grid_dir': cfg['grid_dir'],
               'eval': {'multiples': list(lists.multiples), 'eval_samples': cfg['eval_samples'],
                        **({'eval_samples_long': cfg['eval_samples_long']} if cfg.get('eval_samples_long') else {}), 'seed': 0,
                        'std': 'sample standard deviation over seeds',
                        **({'variants': list(lists.variants)} if lists.variants else {})},
               'rule': rule, 'arms': arms_out, **({'long': long_training(arms_out, cfg)} if snapshots else {}),
               **({'comparisons': comparisons(arms_out, cfg, lists.comparisons)} if lists.comparisons else {}),
               'machines': {m: {a: sorted(s) for a, s in by_arm.items()} for m, by_arm in sorted(machines.items())},
               'provenance': rundir.provenance()}
    return rederive(results)             # the Holm families and every label, as study.report gives them
