"""
A study's outcomes, its results.json: per arm its per-seed accuracies, its outcomes under the pre-registered
rule (per run: fit, steps to fit, area and range, extrapolates or not) and its tests against the control.
"""

import shlex

from base import rundir
from study.derive import area_test, arm_outcomes, fold, mismatch_spread, per_seed_area, rederive, token_shifts
from study.runs import SCHEDULING, fit_by_then, provenance_of
from study.stats import (TESTS, deteriorates, early_late, family_arms, fisher_exact, label_rule, mean_ci, pearson,
                         point_text, second_analysis)


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
        arm = out.setdefault(point_name(run.arm, run.point, run.cfg, run.fixed_steps), {'count': 0, 'of': 0, 'seeds': []})
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


def point_name(arm, point, cfg, fixed):
    """The name a run is summarized under: its arm, or its arm at its point: 'vpad +1000' (cooled from fit +
    1000), 'vpad +10000 uncooled' (the trunk), 'vpad at 6000' (from step 6000). cfg: its settings."""
    if point is None:
        return arm
    k = cfg['max_iters' if fixed else 'steps_after_fit'] if point == 'trunk' else point
    return f"{arm} {point_text(k, fixed)}" + (' uncooled' if point == 'trunk' else '')


def test_groups(arms_out, cfg):
    """-> [(family, [arm names], control's name)] at each point (families {}: every other arm, one family)."""
    families = cfg['families'] or {'': [a for a in cfg['arms'] if a != cfg['control']]}
    named = {(a['arm'], a['point']): n for n, a in arms_out.items()}
    return [(family, [named[a, point] for a in family_arms(arms) if (a, point) in named],
             named[cfg['control'], point])
            for point in dict.fromkeys(a['point'] for a in arms_out.values()) if (cfg['control'], point) in named
            for family, arms in families.items()]


def add_outcomes(arms_out, per_run, cfg, study_argv):
    """Per arm its outcomes; per tested arm its tests against the control: the paired tests of its area here,
    those that count its runs left to recount (rederive, which also adjusts and labels every test in its family);
    'paired': {} where both arms continue the same runs, so that the accuracy at extrap_multiple is paired too."""
    for name, arm in arms_out.items():
        arm.update(arm_outcomes(per_run.get(name, {}), cfg, arm.get('fixed_steps')))
    if not cfg['control']:
        return
    paired_on = init_template(cfg, cfg['control'], study_argv)
    for family, names, control in test_groups(arms_out, cfg):
        for name in names:
            arm, ctrl = arms_out[name], arms_out[control]
            template, second = init_template(cfg, arm['arm'], study_argv), second_analysis(arm.get('fixed_steps'))
            area = {'left_out': area_test(arm['area']['per_seed'], ctrl['area']['per_seed'], cfg['delta']),
                    second: area_test(arm['area'][second]['per_seed'], ctrl['area'][second]['per_seed'], cfg['delta'])}
            arm['vs_control'] = {'fisher': None, 'permutation': None,
                                 'paired': {} if '{seed}' in template and template == paired_on else None,
                                 'power': None, 'area': area,
                                 'control': control, 'family': family}


def long_training(arms_out, cfg):
    """A study of trunks with cooled snapshots: per run its change, the area cooled late minus early (does it
    deteriorate?), against 0 and against the control's; the cooldown's effect (cooled late minus the trunk's own,
    uncooled); the mismatch's growth and its correlation with the change. Holm and labels are rederive's."""
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


def summarize(runs, cfg, lists, study_argv):
    """results.json: per arm, its overrides, per task and multiple the per-seed accuracies, and its
    outcomes under the pre-registered rule with the tests against the control. lists: the study's list
    settings, parsed (study.settings.Lists)."""
    arms_out, per_run, primary, by_variant = {}, {}, {}, {}
    for run in runs:
        name = point_name(run.arm, run.point, run.cfg, run.fixed_steps)
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
            arm.update(mismatch_spread(arm['mismatch_per_seed']))
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
                        **({'eval_samples_long': cfg['eval_samples_long']} if cfg.get('eval_samples_long') else {}),
                        'seed': 0,
                        'std': 'sample standard deviation over seeds',
                        **({'variants': list(lists.variants)} if lists.variants else {})},
               'rule': rule, 'arms': arms_out, **({'long': long_training(arms_out, cfg)} if snapshots else {}),
               **({'comparisons': comparisons(arms_out, cfg, lists.comparisons)} if lists.comparisons else {}),
               'machines': {m: {a: sorted(s) for a, s in by_arm.items()} for m, by_arm in sorted(machines.items())},
               'provenance': rundir.provenance()}
    return rederive(results)             # every number its per-seed numbers give, as a committed one is checked
