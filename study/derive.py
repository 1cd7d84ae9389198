"""
A summary's numbers from its per-seed numbers: each arm's outcomes under the pre-registered rule (fit, steps
to fit, area and range, extrapolates or not) and the tests against its control, every paired test, its Holm
family and its label. summarize (study/outcomes.py) lays out the per-seed numbers and ends in rederive; a
committed summary is checked against rederive of its own per-seed numbers.
"""

import copy
import statistics

from study.evals import MISMATCH
from study.settings import parse_term
from study.stats import (DELTA, TESTS, at_point, by_arm_and_point, fisher_exact, fixed_steps, holm, label_rule,
                         leave_one_out, mean_ci, mean_std, named_changes, permutation_test, point_text,
                         second_analysis, seeds_for_power, seeds_for_shift, sign_flip, smallest_fisher_p, verdict,
                         wilson)


# -----------------------------------------------------------------------------
# each arm: its outcomes and the tests that count its runs

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


def mismatch_spread(per_seed):
    """An arm's mismatch over its seeds ({seed: its mismatch}): {'mismatch': means, 'mismatch_sd': sds}."""
    values = {k: [m[k] for m in per_seed.values() if m.get(k) is not None] for k in MISMATCH}
    return {'mismatch': {k: mean_std(v)[0] if v else None for k, v in values.items()},
            'mismatch_sd': {k: mean_std(v)[1] if v else None for k, v in values.items()}}


def count_tests(arm, ctrl, paired):
    """The tests of one arm against its control that count its runs, over fit runs (at fixed steps, every run
    measured; recount applies Holm across the arms after): Fisher's exact test of extrapolates / fit but not, with
    its smallest possible p and the runs per arm that 80% power needs; the permutation test of the accuracy at
    extrap_multiple, and where both arms continue the same runs (paired) its sign flip over the seeds fit in both."""
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
    return out


def recount(arms, rule, delta):
    """Each arm's outcomes again from its per-seed numbers, as summarize counted them (arm_outcomes: from the
    accuracies of its primary task, each fit run's step, its runs never fit), the spreads of its mismatch, its
    accuracy per task and multiple and its areas and ranges under each variant, and the tests that count its runs
    against its control's (count_tests; Holm over Fisher's p within each family at each point), and the deterioration
    rule's Fisher p. In place."""
    for arm in arms.values():
        task = arm['accuracy_at_extrap'].get('task')
        by_seed = {}
        for s in arm['seeds']:
            curve = {int(m): p['per_seed'][str(s)] for m, p in arm['tasks'].get(task, {}).items()
                     if str(s) in p['per_seed']}
            by_seed[s] = (arm['steps_to_fit']['per_seed'].get(str(s)), curve.get(rule['extrap_multiple']), curve)
        arm.update(arm_outcomes(by_seed, rule, arm.get('fixed_steps')))
        arm['accuracy_at_extrap']['task'] = task
        if arm.get('mismatch_per_seed'):
            arm.update(mismatch_spread(arm['mismatch_per_seed']))
        for point in (p for by_m in arm['tasks'].values() for p in by_m.values()):
            point['mean'], point['std'] = mean_std(list(point['per_seed'].values()))
        second = second_analysis(arm.get('fixed_steps'))
        for v in (arm.get('variants') or {}).values():    # (variant_outcomes: its per-seed areas and ranges)
            v['area'].update(spread(list(v['area']['per_seed'].values())))
            v['area'][second].update(spread(list(v['area'][second]['per_seed'].values())))
            ranges = list(v['range']['per_seed'].values())
            v['range']['median'] = statistics.median(ranges) if ranges else None
    families = {}
    for arm in arms.values():
        v, d = arm.get('vs_control') or {}, arm.get('deterioration') or {}
        ctrl = arms.get(v.get('control', rule['control']))
        if 'fisher' in v:
            v.update(count_tests(arm, ctrl, v['paired'] is not None))
            if v['fisher']:
                families.setdefault((ctrl.get('point'), v.get('family')), []).append(v['fisher'])
        if 'fisher_p' in d:
            k = ctrl['deterioration']
            d['fisher_p'] = fisher_exact(d['count'], d['of'] - d['count'], k['count'], k['of'] - k['count'])
    for tests in families.values():
        adjust(tests, delta)


# -----------------------------------------------------------------------------
# the paired tests: each from the per-seed areas it is built from

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


def adjust(tests, delta, robust=False, count=()):
    """Holm over one family's tests, then each one's label; count: tests whose p counts here but whose Holm p
    is written in another analysis; robust: also each one's leave-one-out robustness. In place."""
    for t, p in zip(tests, holm([t['p'] for t in [*tests, *count]])):
        t['p_holm'] = p
        if 'ci90' in t:
            t['label'] = verdict(t, delta)
    if robust and all('per_seed' in t for t in tests):
        leave_one_out(tests, delta)


def rederive(results):
    """Every number of a summary that its per-seed numbers give, under the current wording of the rule:
    summarize's last step, and a committed results.json's (publish/report.py checks each one). Each arm's
    outcomes and the tests that count its runs (recount), its spreads, and every paired test with its Holm family
    and label (relabel); a declared change of the rule's labels under the old rule (change_labels). In place;
    -> results."""
    rule = results['rule']
    recount(results['arms'], rule, rule.get('delta', DELTA))
    relabel(results)
    change_labels(results)
    return results


def relabel(results):
    """Each paired test again from the per-seed areas it is built from (its differences, mean, sd, p, intervals, the
    mean areas that decide "at the ceiling"); the Holm families: each arm against its control within its family at
    its point, in a study of snapshots each arm's change against the control's within its family's changes or,
    where its family names it ("arm's change"), with the family's tests at the late point; the comparisons and
    the variants within theirs; every label (stats.verdict) and leave-one-out robustness. In place; -> results."""
    arms, rule = results['arms'], results['rule']
    delta, c = rule.get('delta', DELTA), rule['control']
    rule['label'] = label_rule(delta)
    at = by_arm_and_point(arms)
    fixed = fixed_steps(results)
    analyses = ('left_out', second_analysis(fixed))     # the primary and the analysis beside it

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


RELABELLED = {'control', 'delta', 'families'}   # the rule's keys relabel reads: a change of them it relabels


def change_labels(results):
    """A declared change of the rule (results['rule_change']): each primary test's label under the old rule and
    under this one, from the summary's own numbers where the change is of keys rederive reads (else as the summary
    was written). In place."""
    change = results.get('rule_change')
    if not change or not set(change['keys']) <= RELABELLED:
        return
    old = copy.deepcopy({k: v for k, v in results.items() if k != 'rule_change'})
    old['rule'].update({k: before for k, (before, _) in change['keys'].items()})
    before, now = labels(relabel(old)), labels(results)
    change['labels'] = {k: [v, now.get(k)] for k, v in before.items()}
