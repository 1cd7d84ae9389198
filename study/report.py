"""
A study's summary: per arm its per-seed accuracies, its outcomes under the pre-registered rule (per
run: fit, steps to fit, the area and range, extrapolates or not) and its tests against the control
(results.json), the same as markdown (results.md), and the plots (accuracy_vs_length.png,
area_by_arm.png, accuracy_vs_step.png; they need matplotlib).
"""

import os
import shlex
import statistics

import eval_lengths
import rundir
from study.evals import MISMATCH, MISMATCH_MASKS, MISMATCH_ROWS
from study.runs import SCHEDULING
from study.stats import (TESTS, deteriorates, fisher_exact, fmt_p, holm, mean_ci, mean_std, permutation_test, seeds_for_power,
                         seeds_for_shift, sign_flip_test, smallest_fisher_p, wilson)

SHIFT = 0.05    # the area shift a study should detect: the seeds its power needs are printed for it


def find_fit(runs):
    """run['fit_iter'] of every finished run (train.py notes it in each log record; None: never
    fit) and run['after_fit']: its quick evals from the fit on, [(iter, {task: {'<m>x': acc}})]."""
    for run in runs:
        if run['state'] == 'done':
            log = rundir.read_log(os.path.join(run['dir'], 'log.jsonl'), float('inf'))
            run['fit_iter'] = log[-1]['fit_iter']
            run['after_fit'] = [(r['iter'], r['length_eval']) for r in log
                                if r.get('fit_iter') is not None and not r.get('final')]


def deterioration(runs, cfg):
    """{arm: {'count', 'of', 'seeds'}} under the study's rule (deteriorate_multiple > 0), over fit runs."""
    m = f"{cfg['deteriorate_multiple']}x"
    out = {}
    for run in runs:
        if run.get('fit_iter') is None or 'eval' not in run:
            continue
        task = primary_task(run, cfg)
        accs = [e[task][m] for _, e in run['after_fit'] if e.get(task, {}).get(m) is not None]
        arm = out.setdefault(run['arm'], {'count': 0, 'of': 0, 'seeds': []})
        arm['of'] += 1
        if deteriorates(accs, cfg['deteriorate_drop'], cfg['deteriorate_evals']):
            arm['count'] += 1
            arm['seeds'].append(run['seed'])
    return out


def init_template(cfg, arm, study_argv):
    """The init_from of an arm's runs with '{seed}' unfilled, as plan() builds it (later overrides win)."""
    template = {**cfg['common'], **cfg['arms'][arm]}.get('init_from', '')
    for a in study_argv:
        if a.startswith('--init_from='):
            template = a.split('=', 1)[1]
    return template


def area_and_range(curve, threshold):
    """curve: {multiple: accuracy} of one run's final eval. -> (area, range): the area is the mean
    accuracy over the evaluated multiples 1x, 2x, ..., 64x (the area under the step curve that holds
    each multiple's accuracy for one unit of log2(multiple), normalized to [0, 1]; not a trapezoid);
    the range is the largest multiple at which accuracy is >= threshold there and at every shorter
    multiple (0: not even at the shortest)."""
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


def arm_outcomes(per_seed, cfg):
    """per_seed: {seed: (fit_iter, accuracy at extrap_multiple or None if not measured, {multiple:
    accuracy} of the primary task)} of an arm's finished runs -> its outcome counts and intervals.
    Never-fit runs are counted apart (a run that did not learn the task says nothing about
    extrapolating it) and, for the area and range, also counted as failures (0)."""
    fit = {s: o for s, o in per_seed.items() if o[0] is not None}
    steps = {str(s): o[0] for s, o in fit.items()}
    accs = {s: o[1] for s, o in fit.items() if o[1] is not None}
    extrap = [s for s, a in accs.items() if a >= cfg['extrap_threshold']]
    mean, ci = mean_ci(list(accs.values()))
    shape = {s: area_and_range(o[2], cfg['range_threshold']) for s, o in fit.items()}
    areas = {str(s): a for s, (a, _) in shape.items() if a is not None}
    failed = {str(s): areas[str(s)] if s in fit else 0.0 for s in per_seed if s not in fit or str(s) in areas}
    return {'runs': len(per_seed), 'fit': len(fit), 'never_fit': [s for s, o in per_seed.items() if o[0] is None],
            'steps_to_fit': {'per_seed': steps, 'median': statistics.median(steps.values()) if steps else None,
                             'min': min(steps.values(), default=None), 'max': max(steps.values(), default=None)},
            'extrapolates': {'count': len(extrap), 'of': len(accs), 'seeds': extrap,
                             'not_measured': [s for s in fit if s not in accs],   # the final eval skipped the point
                             'share': len(extrap) / len(accs) if accs else None, 'ci95': wilson(len(extrap), len(accs)),
                             'interval': 'Wilson score'},
            'accuracy_at_extrap': {'multiple': cfg['extrap_multiple'], 'per_seed': {str(s): a for s, a in accs.items()},
                                   'mean': mean, 'ci95': ci, 'interval': 'Student t over fit runs, clipped to [0, 1]'},
            'area': {'per_seed': areas, **spread(list(areas.values())),
                     'never_fit_as_0': {'per_seed': failed, **spread(list(failed.values()))},
                     'interval': 'Student t over fit runs, clipped to [0, 1]'},
            'range': {'per_seed': {str(s): m for s, (_, m) in shape.items()}, 'threshold': cfg['range_threshold'],
                      'median': statistics.median(m for _, m in shape.values()) if shape else None}}


def versus_control(arm, ctrl, paired):
    """The tests of one arm against the control, over fit runs (Holm is applied across arms after)."""
    e1, e0 = arm['extrapolates'], ctrl['extrapolates']
    out = {'fisher': None, 'permutation': None, 'paired': None, 'power': None}
    if e1['of'] and e0['of']:
        table = [[e1['count'], e1['of'] - e1['count']], [e0['count'], e0['of'] - e0['count']]]
        out['fisher'] = {'table': table, 'rows': ['arm', 'control'], 'columns': ['extrapolates', 'fit but not'],
                         'p': fisher_exact(*table[0], *table[1]), 'smallest_possible_p': smallest_fisher_p(e1['of'], e0['of'])}
        n = seeds_for_power(e1['share'], e0['share'], TESTS['power'], TESTS['alpha'])
        out['power'] = {'rates': [e1['share'], e0['share']], 'seeds_per_arm': n,
                        'note': 'the observed rates are equal: the effect is zero, no n suffices' if n is None else
                                f"fit runs per arm for {TESTS['power']:.0%} power, two-sided Fisher at alpha {TESTS['alpha']}"}
    x, y = arm['accuracy_at_extrap']['per_seed'], ctrl['accuracy_at_extrap']['per_seed']
    if x and y:
        p, method = permutation_test(list(x.values()), list(y.values()))
        out['permutation'] = {'p': p, 'method': method,
                              'difference': arm['accuracy_at_extrap']['mean'] - ctrl['accuracy_at_extrap']['mean']}
    if paired:
        both = [s for s in x if s in y]
        p, method = sign_flip_test([x[s] - y[s] for s in both]) if both else (None, 'no seed fit in both arms')
        out['paired'] = {'p': p, 'method': method, 'seeds': [int(s) for s in both],
                         'difference': sum(x[s] - y[s] for s in both) / len(both) if both else None}
    out['area'] = {'left_out': area_test(arm['area']['per_seed'], ctrl['area']['per_seed']),
                   'never_fit_as_0': area_test(arm['area']['never_fit_as_0']['per_seed'],
                                               ctrl['area']['never_fit_as_0']['per_seed'])}
    return out


def area_test(x, y):
    """The area of an arm against the control's, paired by seed (a seed fixes the initial weights and
    the batches in every arm): sign-flip test over the per-seed differences, their mean with a t
    interval, the seeds 80% power needs for a shift of SHIFT; and the unpaired permutation test."""
    both = [s for s in x if s in y]
    d = [x[s] - y[s] for s in both]
    if not d:
        return None
    p, method = sign_flip_test(d)
    mean, ci = mean_ci(d, clip=False)
    sd = mean_std(d)[1]
    return {'seeds': [int(s) for s in both], 'difference': mean, 'ci95': ci, 'sd': sd, 'p': p, 'method': method,
            'seeds_for_power': seeds_for_shift(sd, SHIFT), 'shift': SHIFT,
            'unpaired_p': permutation_test(list(x.values()), list(y.values()))[0] if len(x) and len(y) else None}


def add_outcomes(arms_out, per_run, cfg, study_argv):
    """Per arm its outcomes; per non-control arm its tests against the control, Fisher p Holm-corrected over those arms."""
    for name, arm in arms_out.items():
        arm.update(arm_outcomes(per_run.get(name, {}), cfg))
    ctrl = arms_out.get(cfg['control'])
    if ctrl is None:
        return
    paired_on = init_template(cfg, cfg['control'], study_argv)
    tested = []
    for name, arm in arms_out.items():
        if name != cfg['control']:
            template = init_template(cfg, name, study_argv)
            arm['vs_control'] = versus_control(arm, ctrl, '{seed}' in template and template == paired_on)
            if arm['vs_control']['fisher']:
                tested.append(arm['vs_control']['fisher'])
    for f, p in zip(tested, holm([f['p'] for f in tested])):
        f['p_holm'] = p
    primary = [a['vs_control']['area']['left_out'] for n, a in arms_out.items()
               if n != cfg['control'] and a['vs_control']['area']['left_out']]
    for t, p in zip(primary, holm([t['p'] for t in primary])):   # the primary outcome's family: every site vs control
        t['p_holm'] = p


def primary_task(run, cfg):
    """The one task the outcomes are judged on: extrap_task, fixed in advance, or the run's first eval task."""
    return cfg['extrap_task'] or run['tasks'][0]


def run_outcome(run, cfg):
    """(fit_iter, accuracy at extrap_multiple on the primary task in the final eval or None, its {multiple: accuracy})."""
    task = primary_task(run, cfg)
    by_m = run['eval']['length_eval'].get(task, {})
    return run.get('fit_iter'), by_m.get(f"{cfg['extrap_multiple']}x"), {int(m[:-1]): a for m, a in by_m.items()}


def summarize(runs, cfg, study_argv):
    """results.json: per arm, its overrides, per task and multiple the per-seed accuracies, and its
    outcomes under the pre-registered rule with the tests against the control."""
    arms_out, per_run, primary = {}, {}, {}
    for run in runs:
        arm = arms_out.setdefault(run['arm'], {'overrides': cfg['arms'][run['arm']], 'seeds': [], 'pending_seeds': [],
                                               'tasks': {}})
        if 'eval' not in run:
            arm['pending_seeds'].append(run['seed'])
            continue
        arm['seeds'].append(run['seed'])
        per_run.setdefault(run['arm'], {})[run['seed']] = run_outcome(run, cfg)
        primary.setdefault(run['arm'], {})[primary_task(run, cfg)] = None
        if 'mismatch' in run:
            arm.setdefault('mismatch_per_seed', {})[str(run['seed'])] = run['mismatch']
        for task, accs in run['eval']['length_eval'].items():
            for m, acc in accs.items():
                if acc is not None:
                    point = arm['tasks'].setdefault(task, {}).setdefault(m[:-1], {'per_seed': {}})
                    point['per_seed'][str(run['seed'])] = acc
                    point['length'] = int(m[:-1]) * run['eval']['block_size']
    for arm in arms_out.values():
        if arm.get('mismatch_per_seed'):
            per_seed = list(arm['mismatch_per_seed'].values())
            values = {k: [m[k] for m in per_seed if m.get(k) is not None] for k in MISMATCH}
            arm['mismatch'] = {k: mean_std(v)[0] if v else None for k, v in values.items()}
            arm['mismatch_sd'] = {k: mean_std(v)[1] if v else None for k, v in values.items()}   # over seeds
        for task in arm['tasks'].values():
            for point in task.values():
                point['mean'], point['std'] = mean_std(list(point['per_seed'].values()))
    add_outcomes(arms_out, per_run, cfg, study_argv)
    if cfg['deteriorate_multiple']:
        det = deterioration(runs, cfg)
        ctrl = det.get(cfg['control'])
        for name, arm in arms_out.items():
            d = arm['deterioration'] = det.get(name, {'count': 0, 'of': 0, 'seeds': []})
            if ctrl and name != cfg['control'] and d['of'] and ctrl['of']:
                d['fisher_p'] = fisher_exact(d['count'], d['of'] - d['count'], ctrl['count'], ctrl['of'] - ctrl['count'])
    for name, arm in arms_out.items():
        arm['accuracy_at_extrap']['task'] = ','.join(primary.get(name, {})) or None
    task = cfg['extrap_task'] or "the run's first eval task"
    rule = {'control': cfg['control'], 'fit_accuracy': cfg['fit_accuracy'], 'extrap_multiple': cfg['extrap_multiple'],
            'extrap_threshold': cfg['extrap_threshold'], 'extrap_task': cfg['extrap_task'],
            'range_threshold': cfg['range_threshold'], **TESTS,
            **({'deteriorates': f"a fit run deteriorates when its quick-eval accuracy at {cfg['deteriorate_multiple']}x "
                                f"falls >= {cfg['deteriorate_drop']} below its running maximum since the fit at "
                                f"{cfg['deteriorate_evals']} quick evals in a row"} if cfg['deteriorate_multiple'] else {}),
            'fit': f"a run fits at the first quick eval where the 1x accuracy of every task it evaluates is >= "
                   f"{cfg['fit_accuracy']}; a run that never does is counted apart and left out of the extrapolation statistics",
            'extrapolates': f"a fit run extrapolates when its final-eval accuracy at {cfg['extrap_multiple']}x on {task} "
                            f"is >= {cfg['extrap_threshold']}",
            'tests': f"each arm against {cfg['control']!r}: primary, the area (mean accuracy over the evaluated "
                     f"multiples) paired by seed, two-sided sign-flip test over the seeds fit in both (Holm-corrected over "
                     f"the arms; also with never-fit runs counted as area 0); secondary, two-sided Fisher exact test on "
                     f"extrapolates / fit but not (Holm-corrected over the arms), two-sided permutation test of the mean "
                     f"accuracy at {cfg['extrap_multiple']}x over fit runs, and a paired sign-flip test of it over seeds "
                     f"fit in both where both arms continue the same runs (init_from with '{{seed}}')"
                     if cfg['control'] else 'none (control is empty)'}
    # the command that regenerates these results: how the runs were scheduled does not matter
    study_argv = [a for a in study_argv if a[2:].split('=', 1)[0] not in SCHEDULING]
    return {'command': 'python ablate.py ' + shlex.join(study_argv), 'base_config': cfg['base_config'],
            'common': cfg['common'], 'grid_dir': cfg['grid_dir'],
            'eval': {'multiples': eval_lengths.parse_multiples('multiples', cfg['multiples']),
                     'eval_samples': cfg['eval_samples'], 'seed': 0, 'std': 'sample standard deviation over seeds'},
            'rule': rule, 'arms': arms_out}


def fmt_ci(x, ci):
    return '-' if x is None else f"{x:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else '')


def outcomes_table(results):
    """The Outcomes table: one row per arm, its outcome counts and its tests against the control."""
    rule, c = results['rule'], results['rule']['control']
    m = rule['extrap_multiple']
    lines = [f"| arm | runs | fit | steps to fit (median, range) | extrapolate (k/n, share [95% CI]) | {m}x accuracy "
             f"of fit runs (mean [95% CI]) | Fisher p (Holm) | permutation p | paired p | seeds for {rule['power']:.0%} power |",
             '| --- |' + ' --- |' * 9]
    for name, arm in results['arms'].items():
        st, ex, acc = arm['steps_to_fit'], arm['extrapolates'], arm['accuracy_at_extrap']
        steps = '-' if st['median'] is None else f"{st['median']:g} ({st['min']}..{st['max']})"
        share = '-' if not ex['of'] else f"{ex['count']}/{ex['of']}, {fmt_ci(ex['share'], ex['ci95'])}"
        tests = ['control'] + ['-'] * 3 if name == c else ['-'] * 4
        v = arm.get('vs_control')
        if v and v['fisher']:
            tests[0] = f"{fmt_p(v['fisher']['p'])} ({fmt_p(v['fisher']['p_holm'])})"
            n = v['power']['seeds_per_arm']
            tests[3] = 'none: equal rates' if n is None else str(n)
        if v and v['permutation']:
            tests[1] = fmt_p(v['permutation']['p']) + (' (MC)' if v['permutation']['method'].startswith('Monte') else '')
        if v and v['paired']:
            both = v['paired']['seeds']
            mc = ', MC' if v['paired']['method'].startswith('Monte') else ''
            tests[2] = f"{fmt_p(v['paired']['p'])} ({len(both)} seeds{mc})" if both else 'no seed fit in both'
        lines.append(f"| {name} | {arm['runs']} | {arm['fit']} | {steps} | {share} | {fmt_ci(acc['mean'], acc['ci95'])} | "
                     + ' | '.join(tests) + ' |')
    lines += ['', f"Steps to fit: the iteration of the run's first quick eval that met the fit rule. Extrapolate: fit runs "
              f"that met the extrapolation rule, 95% Wilson interval; the accuracy interval is Student t over fit runs. "
              f"Fisher p: two-sided exact test of extrapolates / fit but not against {c or 'the control'}, raw "
              f"(Holm-adjusted over the arms tested). Permutation p: two-sided, difference of the mean {m}x accuracy "
              f"over fit runs, exact over all splits (MC: 20,000 random splits, seed 0). Paired p: sign-flip test over the "
              f"seeds fit in both arms (exact up to 16 seeds), only where both continue the same runs ('-': not paired). "
              f"Seeds for power: fit runs per arm the observed shares would need for {rule['power']:.0%} power (two-sided Fisher at alpha "
              f"{rule['alpha']}, exact; searched up to 200).", '']
    return lines


def area_table(results):
    """The continuous outcomes: one row per arm, its area and range, and its area against the
    control paired by seed (the primary test, Holm over the arms), with never-fit runs left out and
    counted as 0."""
    rule, c, n = results['rule'], results['rule']['control'], results['eval']['eval_samples']
    lines = [f"| arm | fit runs | area (mean [95% CI], sd) | median range (>= {rule['range_threshold']:g}) | "
             f"area - {c or 'control'}, paired (mean [95% CI]) | paired p (Holm) | seeds for {SHIFT:g} | "
             f"never fit as 0: paired p |", '| --- |' + ' --- |' * 7]
    for name, arm in results['arms'].items():
        a = arm['area']
        sd = '' if a['sd'] is None else f", sd {a['sd']:.3f}"
        cells = [f"{fmt_ci(a['mean'], a['ci95'])}{sd}",
                 '-' if arm['range']['median'] is None else f"{arm['range']['median']:g}x"]
        v = (arm.get('vs_control') or {}).get('area') or {}
        t, t0 = v.get('left_out'), v.get('never_fit_as_0')
        if name == c:
            cells += ['control', '-', '-', '-']
        elif t:
            ci = '' if t['ci95'] is None else f" [{t['ci95'][0]:+.3f}, {t['ci95'][1]:+.3f}]"
            cells += [f"{t['difference']:+.3f}{ci} ({len(t['seeds'])} seeds)", f"{fmt_p(t['p'])} ({fmt_p(t.get('p_holm'))})",
                      str(t['seeds_for_power'] or '-'), fmt_p(t0['p']) if t0 else '-']
        else:
            cells += ['-'] * 4
        lines.append(f"| {name} | {arm['fit']} | " + ' | '.join(cells) + ' |')
    lines += ['', f"Area: a run's mean accuracy over the evaluated multiples (the area under accuracy against "
              f"log2(multiple), in [0, 1]); range: the largest multiple with accuracy >= {rule['range_threshold']:g} there "
              f"and at every shorter one. Each point is {n} held-out examples, so its eval standard error is at most "
              f"{0.5 / n ** 0.5:.3f} (p = 0.5) and the area's at most {0.5 / (n * len(results['eval']['multiples'])) ** 0.5:.3f}. "
              f"Paired: per-seed differences from {c or 'the control'} (a seed fixes the initial weights and the batches in every "
              f"arm), sign-flip test (exact up to 16 seeds), Holm over the arms tested; seeds for {SHIFT:g}: paired seeds that "
              f"80% power at alpha 0.05 would need to detect an area shift of {SHIFT:g} at this spread (normal approximation; at least 6, the fewest at which the sign-flip test can reach 0.05). "
              f"Never fit as 0: the same test with never-fit runs counted as failures (area 0).", '']
    return lines


def what_tests_support(results):
    """One paragraph: the pre-registered rule, then only what the tests' numbers support."""
    rule, arms, c, alpha = results['rule'], results['arms'], results['rule']['control'], results['rule']['alpha']
    m = rule['extrap_multiple']
    out = [f"Pre-registered rule: {rule['fit']}; {rule['extrapolates']}; control: {c or 'none (no tests)'}."]
    never = [f"{n} seed{'s' if len(a['never_fit']) > 1 else ''} {', '.join(map(str, a['never_fit']))}"
             for n, a in arms.items() if a['never_fit']]
    if never:
        out.append(f"{sum(len(a['never_fit']) for a in arms.values())} of {sum(a['runs'] for a in arms.values())} "
                   f"finished runs never fit ({'; '.join(never)}).")
    if not c:
        return ' '.join(out + ['No control is set, so nothing is tested.'])
    if c not in arms or not arms[c]['extrapolates']['of']:
        return ' '.join(out + [f"{c} has no fit run measured at {m}x yet, so nothing is tested."])
    areas = {n: a['vs_control']['area']['left_out'] for n, a in arms.items()
             if n != c and a['vs_control']['area']['left_out']}
    if areas:               # the primary outcome first (a deterioration study's is its rule: the area comes second)
        sig = {n: t for n, t in areas.items() if t['p_holm'] <= alpha}
        label = ('The area paired by seed (secondary: the deterioration rule below is this study\'s outcome)'
                 if 'deteriorates' in rule else 'Primary, the area paired by seed')
        out += [f"{label}: {n}'s is {'above' if t['difference'] > 0 else 'below'} {c}'s by "
                f"{t['difference']:+.3f}" + (f" [{t['ci95'][0]:+.3f}, {t['ci95'][1]:+.3f}]" if t['ci95'] else '')
                + f" ({len(t['seeds'])} seeds, sign-flip p = {fmt_p(t['p'])}, {fmt_p(t['p_holm'])} after Holm)."
                for n, t in sig.items()]
        rest = {n: t for n, t in areas.items() if n not in sig}
        if rest:
            best = min(rest, key=lambda n: rest[n]['p_holm'])
            out.append(f"{'No other' if sig else 'No'} arm's area differs from {c}'s at alpha {alpha} after Holm; the "
                       f"smallest adjusted p is {fmt_p(rest[best]['p_holm'])} ({best}, difference "
                       f"{rest[best]['difference']:+.3f}, raw p {fmt_p(rest[best]['p'])}).")
        out.append("Secondary:")
    k0, n0 = arms[c]['extrapolates']['count'], arms[c]['extrapolates']['of']
    tested = {n: a['vs_control'] for n, a in arms.items() if n != c and a['vs_control']['fisher']}
    untested = [n for n in arms if n != c and n not in tested]
    if untested:
        out.append(f"Not tested (no fit run measured at {m}x): {', '.join(untested)}.")
    if not tested:
        return ' '.join(out)
    sig = [n for n, v in tested.items() if v['fisher']['p_holm'] <= alpha]   # reject at p <= alpha, as power_fisher counts
    for n in sig:
        e, f = arms[n]['extrapolates'], tested[n]['fisher']
        out.append(f"{n} extrapolates {'more' if e['share'] > arms[c]['extrapolates']['share'] else 'less'} often than {c} "
                   f"({e['count']}/{e['of']} vs {k0}/{n0} fit runs; Fisher p = {fmt_p(f['p'])}, {fmt_p(f['p_holm'])} after Holm).")
    rest = [n for n in tested if n not in sig]
    if rest:
        best = min(rest, key=lambda n: tested[n]['fisher']['p_holm'])
        out.append(f"{'No other' if sig else 'No'} arm differs from {c} in how often it extrapolates at alpha {alpha} after "
                   f"Holm correction; the smallest adjusted p is {fmt_p(tested[best]['fisher']['p_holm'])} ({best}, raw "
                   f"{fmt_p(tested[best]['fisher']['p'])}).")
        floor = [n for n in rest if tested[n]['fisher']['smallest_possible_p'] > alpha]
        if floor:
            out.append(f"With these few fit runs no outcome could reach p <= {alpha} for "
                       + ', '.join(f"{n} ({arms[n]['extrapolates']['of']} vs {n0}: smallest possible p "
                                   f"{fmt_p(tested[n]['fisher']['smallest_possible_p'])})" for n in floor)
                       + ": there the test could not have found a difference, whatever the effect.")
    for test, what in (('permutation', f"mean {m}x accuracy of fit runs"), ('paired', f"paired {m}x accuracy (seeds fit in both)")):
        ps = {n: v[test]['p'] for n, v in tested.items() if v[test] and v[test]['p'] is not None}
        if not ps:
            continue
        low = [n for n, p in ps.items() if p <= alpha]
        if low:
            out.append(f"By the {what}: " + '; '.join(
                f"{n} is {'above' if tested[n][test]['difference'] > 0 else 'below'} {c} (difference "
                f"{tested[n][test]['difference']:+.2f}, {test} p = {fmt_p(ps[n])})" for n in low)
                + f", uncorrected for the {len(ps)} arm(s) tested.")
        else:
            best = min(ps, key=ps.get)
            out.append(f"No arm differs from {c} by {what} at alpha {alpha} ({test} test; the smallest p, uncorrected, "
                       f"is {fmt_p(ps[best])}, {best}).")
    return ' '.join(out)


def format_markdown(results):
    mults = results['eval']['multiples']
    lines = [f"`{results['command']}`", '',
             f"Accuracy per length multiple: mean ± standard deviation over seeds, "
             f"{results['eval']['eval_samples']} held-out examples per point and seed.", '']
    lines += ['**Outcomes**', ''] + outcomes_table(results) + ['**Area and range**', ''] + area_table(results)
    lines += ['**What the tests support**', '', what_tests_support(results), '']
    if 'deteriorates' in results['rule']:
        lines += ['**Deterioration**', '', results['rule']['deteriorates'] + ': ' + '; '.join(
            f"{n} {a['deterioration']['count']} of {a['deterioration']['of']}"
            + (f" (Fisher p = {fmt_p(a['deterioration']['fisher_p'])} against {results['rule']['control']})"
               if 'fisher_p' in a['deterioration'] else '') for n, a in results['arms'].items()) + '.', '']
    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    for task in tasks:
        lines += [f"**{task}**", '', '| arm | seeds | ' + ' | '.join(f'{m}x' for m in mults) + ' |',
                  '| --- | --- |' + ' --- |' * len(mults)]
        for name, arm in results['arms'].items():
            cells = []
            for m in mults:
                p = arm['tasks'].get(task, {}).get(str(m))
                cells.append('-' if p is None else f"{p['mean']:.2f}" + (f" ± {p['std']:.2f}" if p['std'] is not None else ''))
            lines.append(f"| {name} | {len(arm['seeds'])} | " + ' | '.join(cells) + ' |')
        # a mean over 2-3 seeds hides whether they agree: every seed's own row
        lines += ['', 'Per seed:', '', '| arm | seed | ' + ' | '.join(f'{m}x' for m in mults) + ' |',
                  '| --- | --- |' + ' --- |' * len(mults)]
        for name, arm in results['arms'].items():
            for seed in arm['seeds']:
                points = [arm['tasks'].get(task, {}).get(str(m), {}).get('per_seed', {}).get(str(seed)) for m in mults]
                mark = ' †' if seed in arm['never_fit'] else ''
                lines.append(f"| {name} | {seed}{mark} | " + ' | '.join('-' if a is None else f"{a:.2f}" for a in points) + ' |')
        if any(a['never_fit'] for a in results['arms'].values()):
            lines += ['', '† never fit: counted apart, left out of the extrapolation statistics.']
        lines.append('')
    measured = {n: a for n, a in results['arms'].items() if a.get('mismatch')}
    if measured:
        def cell(arm, k):
            m, sd = arm['mismatch'][k], arm['mismatch_sd'][k]
            return '-' if m is None else f"{m:.3f}" + ('' if sd is None else f" ± {sd:.3f}")
        cols = ('token_shift', 'mean_shift', 'var_ratio', 'pre_act_token_shift', 'pre_act_var_ratio', 'token_floor')
        lines += ["Train-vs-eval mismatch at each arm's own dropout site, mean over the linear layers its noise reaches "
                  f"('-': none, no dropout), mean ± sd over seeds ({MISMATCH_ROWS} validation rows, {MISMATCH_MASKS} masks; "
                  "`python model.py RUN_DIR` gives it per layer and site). Token shift: the conditional mean shift per "
                  "token, E over masks of y given x against x; batch shift: the same for the per-coordinate batch mean; "
                  "both in eval standard deviations with the mask-noise floor (last column) subtracted (0 = kept); "
                  "var ratio: train / eval variance (1 = kept); at the layers' inputs and, pre-act, at their outputs.", '',
                  '| arm | token shift | batch shift | var ratio | pre-act token shift | pre-act var ratio | noise floor |',
                  '| --- |' + ' --- |' * 6]
        lines += [f"| {n} | " + ' | '.join(cell(a, k) for k in cols) + ' |' for n, a in measured.items()]
        lines.append('')
    pending = {n: a['pending_seeds'] for n, a in results['arms'].items() if a['pending_seeds']}
    if pending:
        lines.append('Not finished yet (left out above): ' + '; '.join(f"{n} seeds {s}" for n, s in pending.items()))
    return '\n'.join(lines) + '\n'


def step_curves(runs):
    """{arm: {task: {'<m>x': {seed: {iter: accuracy}}}}}: each finished run's quick length eval from
    its log.jsonl, to that run's own end (runs that fit later train longer)."""
    curves = {}
    for run in runs:
        path = os.path.join(run['dir'], 'log.jsonl')
        if run['state'] != 'done' or not os.path.exists(path):
            continue
        for rec in rundir.read_log(path, float('inf')):
            for task, accs in (rec.get('length_eval') or {}).items():
                for m, a in accs.items():
                    if a is not None and not rec.get('final'):      # the final eval has other multiples
                        curves.setdefault(run['arm'], {}).setdefault(task, {}).setdefault(m, {}) \
                              .setdefault(run['seed'], {})[rec['iter']] = a
    return curves


def dots_with_median(ax, x, values, color, label=None, jitter=0.04, half=0.3):
    """One group of an area plot: each value a dot, spread around x so none hides another, their median a bar."""
    n = len(values)
    ax.plot([x + jitter * (k - (n - 1) / 2) for k in range(n)], values, 'o', color=color, alpha=0.6, ms=4, label=label)
    ax.plot([x - half, x + half], [statistics.median(values)] * 2, color=color, lw=2.5)


def plot(results, curves, out):
    """accuracy_vs_length.png (every run thin, each arm's median bold: outcomes are nearly binary per
    run, so a mean with a band would hide them), area_by_arm.png (each run's area and each arm's median
    range, in the study's arm order: along the dial in a regime map) and accuracy_vs_step.png (every
    run's quick eval to its own end, each arm's median bold)."""
    def by_length(ax, task):
        for i, (name, arm) in enumerate(results['arms'].items()):
            pts = sorted((int(m), p) for m, p in arm['tasks'].get(task, {}).items())
            if not pts:
                continue
            xs, color = [m for m, _ in pts], f"C{i}"
            for seed in pts[0][1]['per_seed']:
                ax.plot(xs, [p['per_seed'].get(seed) for _, p in pts], color=color, lw=0.8, alpha=0.35)
            medians = [statistics.median(p['per_seed'].values()) for _, p in pts]
            ax.plot(xs, medians, color=color, lw=2.5, marker='o', label=f"{name} (median of {len(arm['seeds'])} seeds)")
            ax.set_xticks(xs, [f"{m}x" for m in xs])
            ax.minorticks_off()

    def by_step(ax, panel):          # every run thin to its own end, each arm's median over its runs bold
        task, m = panel.split(' at ')
        for i, (name, by_task) in enumerate(curves.items()):
            per_seed = by_task.get(task, {}).get(m, {})
            for pts in per_seed.values():
                ax.plot(list(pts), list(pts.values()), color=f"C{i}", lw=0.7, alpha=0.35)
            steps = sorted({it for pts in per_seed.values() for it in pts})
            if steps:
                ax.plot(steps, [statistics.median(p[it] for p in per_seed.values() if it in p) for it in steps],
                        color=f"C{i}", lw=2, label=f"{name} (median of the runs still training)")

    def by_arm(ax, panel):            # every run's area a dot, each arm's median a bar, its median range above
        arms = [(n, a) for n, a in results['arms'].items() if a['area']['per_seed']]
        for i, (name, arm) in enumerate(arms):
            areas = list(arm['area']['per_seed'].values())
            dots_with_median(ax, i, areas, f"C{i}")
            ax.text(i, min(0.97, max(areas) + 0.04), f"range {arm['range']['median']:g}x", ha='center', fontsize=8)
        ax.set_xticks(range(len(arms)), [n for n, _ in arms], fontsize=8)

    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    if any(a['area']['per_seed'] for a in results['arms'].values()):
        eval_lengths.plot_panels([f"area per run (mean accuracy over {', '.join(f'{m}x' for m in results['eval']['multiples'])})"],
                                 by_arm, os.path.join(out, 'area_by_arm.png'), 'arm', 'area (dot: one run; bar: median)',
                                 log2=False)
    if tasks:
        eval_lengths.plot_panels(tasks, by_length, os.path.join(out, 'accuracy_vs_length.png'),
                                 'length (multiple of the training length)', 'accuracy (thin: one run each)')
    panels = sorted({(t, m) for a in curves.values() for t, by_m in a.items() for m in by_m},
                    key=lambda tm: (tasks.index(tm[0]) if tm[0] in tasks else 99, int(tm[1][:-1])))
    if panels:
        eval_lengths.plot_panels([f"{t} at {m}" for t, m in panels], by_step, os.path.join(out, 'accuracy_vs_step.png'),
                                 'training step', 'accuracy (thin: one run each)', log2=False)
