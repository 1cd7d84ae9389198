"""
A study's results.md: its tables and the sentence of what its tests support, written from its results.json
alone (format_markdown), so that no figure can drift from the summary it states.
"""

from collections import Counter

from eval_lengths import parse_variant
from study.evals import MISMATCH_MASKS, MISMATCH_ROWS, examples, samples_per_point
from study.stats import (DELTA, at_point, by_arm_and_point, decision, fixed_steps, flips_text, fmt_interval, fmt_p,
                         named_changes, point_text, range_text, second_analysis, verdict)


# -----------------------------------------------------------------------------
# results.md

def second_name(fixed):
    return 'fit runs only' if fixed else 'never fit as 0'


def fmt_ci(x, ci):
    """A mean with its unsigned interval, as the arm tables print it: '0.41 [0.37, 0.45]'."""
    return '-' if x is None else f"{x:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else '')


def fmt_difference(t):
    """A paired test's mean difference with its 95% interval, as every table prints it: '+0.031 [+0.010, +0.051]'."""
    return f"{t['difference']:+.3f}" + (f" {fmt_interval(t['ci95'])}" if t['ci95'] else '')


def row(*cells):
    return '| ' + ' | '.join(map(str, cells)) + ' |'


def head(*cells):
    """A table's header line and its rule line."""
    return [row(*cells), '|' + ' --- |' * len(cells)]


def outcomes_table(results):
    """The Outcomes table: one row per arm, its outcome counts and its tests against the control."""
    rule, c = results['rule'], results['rule']['control']
    m, fixed = rule['extrap_multiple'], fixed_steps(results)
    lines = head('arm', 'runs', 'fit by then' if fixed else 'fit', 'steps to fit (median, range)',
                 'extrapolate (k/n, share [95% CI])', f"{m}x accuracy of {'every run' if fixed else 'fit runs'} "
                 f"(mean [95% CI])", 'Fisher p (Holm)', 'permutation p', 'paired p', f"seeds for {rule['power']:.0%} power")
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
            tests[1] = fmt_p(v['permutation']['p']) + (
                ' (MC)' if v['permutation']['method'].startswith('Monte') else '')
        if v and v['paired']:
            both = v['paired']['seeds']
            mc = ', MC' if v['paired']['method'].startswith('Monte') else ''
            tests[2] = f"{fmt_p(v['paired']['p'])} ({len(both)} seeds{mc})" if both else 'no seed fit in both'
        lines.append(row(name, arm['runs'], arm['fit'], steps, share, fmt_ci(acc['mean'], acc['ci95']), *tests))
    over = 'every run measured (at fixed steps: fit by then or not)' if fixed else 'fit runs'
    lines += ['', f"Steps to fit: the iteration of the run's first quick eval that met the fit rule. Extrapolate: "
              f"{over} that met the extrapolation rule, 95% Wilson interval; the accuracy interval is Student t "
              f"over {over}. Fisher p: two-sided exact test of extrapolates / fit but not against "
              f"{c or 'the control'}, raw (Holm-adjusted over the arms tested). Permutation p: two-sided, "
              f"difference of the mean {m}x accuracy over {'them' if fixed else 'fit runs'}, exact over all splits (MC: 20,000 random "
              f"splits, seed 0). Paired p: sign-flip test over the seeds fit in both arms (exact up to 16 seeds), "
              f"only where both continue the same runs ('-': not paired). Seeds for power: fit runs per arm the "
              f"observed shares would need for {rule['power']:.0%} power (two-sided Fisher at alpha "
              f"{rule['alpha']}, exact; searched up to 200).", '']
    return lines


def area_table(results):
    """The continuous outcomes: per arm its area and range, and its area against the control paired by seed
    (the primary test, Holm over the arms), with never-fit runs left out and counted as 0."""
    rule, c, per_point = results['rule'], results['rule']['control'], samples_per_point(results['eval'])
    shift, fixed = rule.get('delta', DELTA), fixed_steps(results)     # (summaries from before delta was a key)
    controls = {control_of(results, n) for n, a in results['arms'].items() if a.get('vs_control')} | {c}
    second = second_analysis(fixed)
    lines = head('arm', 'runs (not fit by then)' if fixed else 'fit runs', 'area (mean [95% CI], sd)',
                 *['fit runs only: area (mean [95% CI])'] * fixed, f"median range (>= {rule['range_threshold']:g})",
                 'area - its control, paired (mean [95% CI])', 'paired p (Holm)', 'verdict',
                 'leave one seed out: Holm p (verdict kept?)', f"seeds for {shift:g}",
                 f"{second_name(fixed)}: paired {'difference, p (Holm)' if fixed else 'p (Holm)'}")
    for name, arm in results['arms'].items():
        a = arm['area']
        sd = '' if a['sd'] is None else f", sd {a['sd']:.3f}"
        cells = [f"{fmt_ci(a['mean'], a['ci95'])}{sd}"] + ([fmt_ci(a[second]['mean'], a[second]['ci95'])] if fixed
                                                           else []) + [range_text(arm['range'])]
        v = (arm.get('vs_control') or {}).get('area') or {}
        t, t0 = v.get('left_out'), v.get(second)
        if t:
            cells += [f"{fmt_difference(t)} ({len(t['seeds'])} seeds, against {control_of(results, name)})",
                      f"{fmt_p(t['p'])} ({fmt_p(t.get('p_holm'))})", verdict(t, shift), robustness(t),
                      str(t['seeds_for_power'] or '-'), never_fit_text(t, t0, shift, fixed)]
        else:
            cells += ['control' if name in controls else '-'] + ['-'] * 5
        lines.append(row(name, f"{arm['runs']} ({len(arm['not_fit_by_then'])})" if fixed else arm['fit'], *cells))
    lines += ['', f"Area: a run's mean accuracy over the evaluated multiples (the area under accuracy against "
              f"log2(multiple), in [0, 1]); range: the largest multiple with accuracy >= "
              f"{rule['range_threshold']:g} there and at every shorter one. Each point is {examples(results)}, "
              f"so its eval standard error is at most {0.5 / min(per_point) ** 0.5:.3f} (p = 0.5) and the area's at "
              f"most {sum(0.25 / k for k in per_point) ** 0.5 / len(per_point):.3f}. Paired: per-seed differences from "
              f"{c or 'the control'} (a seed fixes the initial weights and the batches in every arm), sign-flip "
              f"test (exact up to 16 seeds), Holm over the arms tested (within each family); verdict: "
              f"{rule['label']}"
              f"; seeds for {shift:g}: paired seeds that 80% power at alpha 0.05 would need to detect an area "
              f"shift of {shift:g} at this spread (normal approximation; at least 6, the fewest at which the "
              f"sign-flip test can reach 0.05). "
              + ("At fixed steps every run is measured at its point, fit or not: a run not fit by then (its fit came "
                 "later, or never) counts with its measured area in the primary; fit runs only: the same test over "
                 "the runs fit by then alone." if fixed else
                 "Never fit as 0: the same test with never-fit runs counted as failures (area 0)."), '']
    return lines


def robustness(t):
    """A test's leave-one-seed-out cell: the range of its Holm p, and 'kept' or the seeds that change it."""
    r = t.get('leave_one_out')
    return '-' if not r else f"{fmt_p(r['p_holm'][0])}-{fmt_p(r['p_holm'][1])}, " + (
        'kept' if r['survives'] else flips_text(t)[2:])


def never_fit_text(t, t0, delta, fixed=False):
    """The analysis beside the primary (never fit as 0; at fixed steps fit runs only, with its difference and
    seeds): its p (Holm), and its verdict where it decides otherwise."""
    if not t0:
        return '-'
    out = (f"{t0['difference']:+.3f} ({len(t0['seeds'])} seeds), " if fixed else '') + \
        f"{fmt_p(t0['p'])} ({fmt_p(t0.get('p_holm', t0['p']))})"
    if t and decision(verdict(t0, delta)) != decision(verdict(t, delta)):
        out += f": {verdict(t0, delta)}, unlike the " + ("primary's verdict" if fixed else "verdict left out")
    return out


def control_of(results, name):
    """The arm a tested arm was compared with: its own point's control in a study of snapshots."""
    return results['arms'][name].get('vs_control', {}).get('control', results['rule']['control'])


def what_tests_support(results):
    """One paragraph: the pre-registered rule, then only what the tests' numbers support."""
    rule, arms, c, alpha = results['rule'], results['arms'], results['rule']['control'], results['rule']['alpha']
    m, delta, fixed = rule['extrap_multiple'], rule.get('delta', DELTA), fixed_steps(results)
    out = [f"Pre-registered rule: {rule['fit']}; {rule['extrapolates']}; control: {c or 'none (no tests)'}."]

    def unfit(key, what):        # '3 of 24 <what> (vpad seeds 1, 2; none seed 5).', where any is
        named = [f"{n} seed{'s' if len(a[key]) > 1 else ''} {', '.join(map(str, a[key]))}" for n, a in arms.items()
                 if a[key]]
        return [f"{sum(len(a[key]) for a in arms.values())} of {sum(a['runs'] for a in arms.values())} {what} "
                f"({'; '.join(named)})."] if named else []
    if fixed:
        out.append(f"At fixed steps: {rule['fixed_steps']}.")
        out += unfit('not_fit_by_then', 'runs at their points were not fit by then')
    out += unfit('never_fit', 'finished runs never fit')
    if not c:
        return ' '.join(out + ['No control is set, so nothing is tested.'])
    compared = {n: a['vs_control'] for n, a in arms.items() if a.get('vs_control')}
    if not any(arms[control_of(results, n)]['extrapolates']['of'] for n in compared):
        return ' '.join(out + [f"{c} has no fit run measured at {m}x yet, so nothing is tested."])
    areas = {n: v['area']['left_out'] for n, v in compared.items() if v['area']['left_out']}
    if areas:               # the primary outcome first (a deterioration study's is its rule: the area comes second)
        head = (f"The area paired by seed (primary {at_point(results['long']['late'], fixed)}, cooled; the other "
                f"points secondary)"
                if 'long' in results else
                'The area paired by seed (secondary: the deterioration rule below is this study\'s outcome)'
                if 'deteriorates' in rule else
                'The area paired by seed, each arm against the control in its family (the study\'s own comparisons '
                'are below, and its config says which family is primary)' if rule.get('comparisons') else
                'Primary, the area paired by seed')
        out.append(f"{head} ({rule['label']}): " + '; '.join(
            f"{n} against {control_of(results, n)}, {verdict(t, delta)}: {fmt_difference(t)}"
            f" ({len(t['seeds'])} seeds, p {fmt_p(t['p'])}, Holm {fmt_p(t.get('p_holm'))})"
            for n, t in areas.items()) + '.')
        out.append("Secondary:")
    tested = {n: v for n, v in compared.items() if v['fisher']}
    untested = [n for n in arms if n not in tested and n not in {control_of(results, t) for t in compared}]
    unmeasured = [n for n in untested if n in compared]
    if unmeasured:
        out.append(f"Not tested (no fit run measured at {m}x): {', '.join(unmeasured)}.")
    if len(unmeasured) < len(untested):
        out.append(f"Not tested against {c} (in no family): "
                   f"{', '.join(n for n in untested if n not in unmeasured)}.")
    if not tested:
        return ' '.join(out)
    sig = [n for n, v in tested.items()
           if v['fisher']['p_holm'] <= alpha]   # reject at p <= alpha, as power_fisher counts
    for n in sig:
        e, f, k = arms[n]['extrapolates'], tested[n]['fisher'], arms[control_of(results, n)]['extrapolates']
        out.append(f"{n} extrapolates {'more' if e['share'] > k['share'] else 'less'} often than "
                   f"{control_of(results, n)} ({e['count']}/{e['of']} vs {k['count']}/{k['of']} "
                   f"{'runs' if fixed else 'fit runs'}; "
                   f"Fisher p = {fmt_p(f['p'])}, {fmt_p(f['p_holm'])} after Holm).")
    rest = [n for n in tested if n not in sig]
    if rest:
        best = min(rest, key=lambda n: tested[n]['fisher']['p_holm'])
        out.append(f"{'No other' if sig else 'No'} arm differs from its control in how often it extrapolates at alpha "
                   f"{alpha} after Holm correction; the smallest adjusted p is "
                   f"{fmt_p(tested[best]['fisher']['p_holm'])} ({best}, raw {fmt_p(tested[best]['fisher']['p'])}).")
        floor = [n for n in rest if tested[n]['fisher']['smallest_possible_p'] > alpha]
        if floor:
            out.append(f"With these few fit runs no outcome could reach p <= {alpha} for "
                       + ', '.join(f"{n} ({arms[n]['extrapolates']['of']} vs "
                                   f"{arms[control_of(results, n)]['extrapolates']['of']}"
                                   f": smallest possible p {fmt_p(tested[n]['fisher']['smallest_possible_p'])})"
                                   for n in floor)
                       + ": there the test could not have found a difference, whatever the effect.")
    for test, what in (('permutation', f"mean {m}x accuracy of {'every run' if fixed else 'fit runs'}"),
                       ('paired', f"paired {m}x accuracy (seeds fit in both)")):
        ps = {n: v[test]['p'] for n, v in tested.items() if v[test] and v[test]['p'] is not None}
        if not ps:
            continue
        low = [n for n, p in ps.items() if p <= alpha]
        if low:
            out.append(f"By the {what}: " + '; '.join(
                f"{n} is {'above' if tested[n][test]['difference'] > 0 else 'below'} {control_of(results, n)} "
                f"(difference {tested[n][test]['difference']:+.2f}, {test} p = {fmt_p(ps[n])})" for n in low)
                + f", uncorrected for the {len(ps)} arm(s) tested.")
        else:
            best = min(ps, key=ps.get)
            out.append(f"No arm differs from its control by {what} at alpha {alpha} ({test} test; the smallest p, "
                       f"uncorrected, is {fmt_p(ps[best])}, {best}).")
    return ' '.join(out)


def diff_cells(t, delta, robust=True):
    """A paired test's cells: mean [95% CI], seeds, p (Holm), verdict (robust: with the seeds that change it)."""
    if not t:
        return ['-'] * 4
    holm = f" ({fmt_p(t['p_holm'])})" if t.get('p_holm') not in (None, t['p']) else ''
    return [fmt_difference(t), str(len(t['seeds'])), fmt_p(t['p']) + holm,
            verdict(t, delta) + (flips_text(t) if robust else '')]


def long_training_tables(results):
    """A study of trunks with cooled snapshots: each run's change from its early to its late cooled snapshot,
    against 0 and against the control's; the cooldown's effect; the mismatch's growth."""
    L, c, fixed = results['long'], results['rule']['control'], fixed_steps(results)
    e, late, delta = point_text(L['early'], fixed), point_text(L['late'], fixed), L['delta']
    at_e, at_late = at_point(L['early'], fixed), at_point(L['late'], fixed)
    lines = ['**Long training**', '', f"Each arm {at_late} against {c} {at_late} is in the tables above (the rows "
             f"'<arm> {late}'). Claim 1, deterioration: per run, its area cooled {at_late} minus its area cooled "
             f"{at_e} (paired within the run, sign-flip test against 0), and each arm's change against {c}'s, paired "
             f"by seed (Holm within each family{joined_text(results)}). Verdicts: {results['rule']['label']}.", '',
             *change_table(L, c, e, late, delta)]
    if L.get('fit_runs_only'):
        lines += ['', f"Fit runs only: the same over the runs fit by step {L['early']} (so by step {L['late']} too; "
                      f"a run not fit by then is left out of its arm's change and of its seed's pair):", '',
                  *change_table(L['fit_runs_only'], c, e, late, delta)]
    lines += ['', f"Secondary, the cooldown: the area cooled {at_late} minus the trunk's own final eval (at its stop, "
              f"uncooled: at the peak learning rate), paired within the run. Is a difference between arms a "
              f"high-learning-rate effect? Compare the rows '<arm> {late}' and '<arm> ... uncooled' above.", '',
              *head('arm', 'cooled - uncooled (mean [95% CI])', 'seeds', 'p', 'verdict')]
    lines += [row(arm, *diff_cells(t, delta)) for arm, t in L['cooldown'].items()]
    if L.get('fit_plus'):
        lines += fit_plus_table(L['fit_plus'], c, delta, list(L['change']))
    if L['mismatch']:
        lines += ['', f"Secondary, the train-vs-eval mismatch of the cooled models (the per-token shift at the site's "
                  f"layers, floor subtracted; none for no dropout): its mean {at_e} and {late}, and its growth "
                  f"per run.", '', *head('arm', f"token shift {e}", f"token shift {late}", 'growth (mean [95% CI])',
                                         'seeds', 'p', 'verdict')]
        for arm, m in L['mismatch'].items():     # a shift in eval sds, not area: no margin of area (delta 0)
            lines.append(row(arm, *['-' if x is None else f"{x:.3f}" for x in m['token_shift'].values()],
                             *diff_cells(m['growth'], 0.0)))
        r = L['mismatch_vs_change']
        lines += ['', f"Per run, the growth of the per-token shift against the change in area ({r['runs']} runs with "
                  f"dropout; 95% intervals by Fisher's z): {correlation_text(r)}; within each arm (the arms' "
                  f"different means left out): " + '; '.join(f"{a} {correlation_text(c)} ({c['runs']} runs)"
                                                           for a, c in r['by_arm'].items()) + '.']
    return lines + ['']


def change_table(tests, c, e, late, delta):
    """Each arm's change from e to late against 0 and against the control's (tests: 'change', 'change_vs_control')."""
    lines = head('arm', f"change {e} -> {late} (mean [95% CI])", 'seeds', 'p', 'verdict',
                 f"against {c}'s change (mean [95% CI])", 'seeds', 'p (Holm)', 'verdict', 'family')
    for arm, t in tests['change'].items():
        v = tests['change_vs_control'].get(arm)
        lines.append(row(arm, *diff_cells(t, delta), *(diff_cells(v, delta) + [v['family'] or '-'] if v else
                                                      ['control' if arm == c else '-'] + ['-'] * 4)))
    return lines


def fit_plus_table(F, c, delta, arms):
    """Secondary, a study at fixed steps read as a fit-relative one (outcomes.fit_plus)."""
    k, w = F['offset'], F['window']
    lines = ['', f"Secondary, for comparison with a study read at fit + {k}: each run at its cooled point within "
             f"+-{w} steps of its own fit + {k}, where it has one (its trunk's fit; a run fit late may have none, "
             f"one never fit has none; every run read there is fit by then, so the fit runs only are the same "
             f"runs), each arm against {c} paired by seed over the seeds where both have one (Holm within each "
             f"family).", '', *head('arm', 'runs read (at which point)', 'area (mean)', f"against {c} (mean [95% CI])",
                                    'seeds', 'p (Holm)', 'verdict')]
    for arm in arms:
        points, areas = F['points'].get(arm, {}), list(F['area'].get(arm, {}).values())
        at = ', '.join(f"{n} at {p}" for p, n in sorted(Counter(points.values()).items()))
        t = F['vs_control'].get(arm)
        cells = diff_cells(t, delta) if t else ['control' if arm == c else '-'] + ['-'] * 3
        lines.append(row(arm, f"{len(points)}{f' ({at})' if at else ''}",
                         f"{sum(areas) / len(areas):.3f}" if areas else '-', *cells))
    return lines


def joined_text(results):
    joined, late = named_changes(results['rule'].get('families')), results['long']['late']
    return ''.join(f"; {a}'s change with the {f} family's tests {at_point(late, fixed_steps(results))}, as its "
                   f"family names it" for a, f in joined.items())


def correlation_text(c):
    if c['r'] is None:
        return 'too few runs'
    return f"r = {c['r']:+.2f}" + (f" [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}]" if c['ci95'] else '')


def variant_tables(results):
    """Each arm's area under each length-scaling variant beside plain, and against its control under the same."""
    arms, delta, fixed = results['arms'], results['rule'].get('delta', DELTA), fixed_steps(results)
    variants = results['eval']['variants']
    ssm = [v for v in variants if parse_variant(v).ssm != 'none']
    how = (f"with Mamba2's SSM rescaled at inference ({', '.join(ssm)}: eval_lengths.py --ssm_scaling=...), s "
           f"calibrated at each eval length on examples the evaluation never sees" if ssm else
           "with RoPE rescaled at inference for each eval length L, s = L / T (the plain eval at 1x; `python "
           "eval_lengths.py --rope_scaling=... --logit_scale=...`)")
    lines = ['**Under length-scaling variants**', '', f"The same cooled models evaluated plain and {how}: each arm's "
             "area (mean [95% CI] over " + ("every run measured" if fixed else "fit runs") + ").", '',
             *head('arm', 'plain', *variants)]
    for name, arm in arms.items():
        if not arm.get('variants'):
            continue
        cells = [fmt_ci(arm['area']['mean'], arm['area']['ci95'])] + [
            fmt_ci(arm['variants'][v]['area']['mean'], arm['variants'][v]['area']['ci95']) if v in arm['variants']
            else '-' for v in variants]
        lines.append(row(name, *cells))
    lines += ['', "Each arm against its control under the same variant, paired by seed (secondary; Holm within the "
              "family at each point and variant):", '',
              *head('arm', 'variant', 'area - control (mean [95% CI])', 'seeds', 'p (Holm)', 'verdict',
                    f"{second_name(fixed)}: p (Holm)")]
    lines += [row(name, v, *diff_cells(t['left_out'], delta), holm_text(t[second_analysis(fixed)]))
              for name, arm in arms.items() for v, out in arm.get('variants', {}).items()
              for t in [out.get('vs_control')] if t and t['left_out']]
    return lines + ['']


def holm_text(t):
    return '-' if not t else f"{fmt_p(t['p'])} ({fmt_p(t.get('p_holm'))})"


def comparisons_table(results):
    """The study's own comparisons, a - b paired by seed, in both analyses."""
    delta, fixed = results['rule'].get('delta', DELTA), fixed_steps(results)
    late = results.get('long', {}).get('late')
    lines = ['**Comparisons**', '', "The study's own comparisons (`comparisons` in its config, fixed before the runs): "
             "a - b per seed, each side an arm's area (`arm@variant`: under that variant) or a difference of two "
             "(an interaction), sign-flip test, Holm within each family at each point"
             + (f"; primary {at_point(late, fixed)}, the other points secondary" if late else '') + '.', '',
             *head('point', 'family', 'a - b', 'mean [95% CI]', 'seeds', 'p (Holm)', 'verdict', 'leave one seed out',
                   f"{second_name(fixed)}: mean, p (Holm), verdict")]
    for t in results['comparisons']:
        point = '-' if t['point'] is None else point_text(t['point'], fixed)
        t0 = t[second_analysis(fixed)]
        zero = '-' if not t0 else f"{t0['difference']:+.3f}, {holm_text(t0)}, {verdict(t0, delta)}"
        if t0 and t['left_out'] and decision(verdict(t0, delta)) != decision(verdict(t['left_out'], delta)):
            zero += ' (differs)'
        lines.append(row(point, t['family'], f"{side(t['a'])} - {side(t['b'])}",
                         *diff_cells(t['left_out'], delta, robust=False), robustness(t['left_out'] or {}), zero))
    return lines + [''] + range_extension(results)


EXTENDS = 4         # the paper's reading of a range: extended when it is 4x or more the other's


def range_extension(results):
    """The paper's own metric beside each comparison of two arms (no interaction): per seed of its test, a's
    range over b's (the largest multiple with accuracy >= the threshold there and at every shorter one), and
    the seeds where a extends b's range EXTENDS-fold or more. Read from the per-seed ranges the summary holds."""
    fixed = fixed_steps(results)
    at = by_arm_and_point(results['arms'])

    def ranges(term, point):
        arm, _, variant = term.partition('@')
        entry = at.get((arm, point), {})
        return (entry.get('variants', {}).get(variant, {}) if variant else entry).get('range', {}).get('per_seed', {})
    multiple = lambda m: f"{m:g}x" if m else '0'      # noqa: E731  (0: below the threshold at 1x already)
    out = []
    for t in results['comparisons']:
        if ' - ' in t['a'] + t['b'] or not t['left_out']:
            continue
        a, b = ranges(t['a'], t['point']), ranges(t['b'], t['point'])
        seeds = [str(k) for k in t['left_out']['seeds'] if str(k) in a and str(k) in b]
        if not seeds:
            continue
        ratio = {k: a[k] / b[k] if b[k] else float('inf') if a[k] else 1.0 for k in seeds}
        extended = [k for k in seeds if ratio[k] >= EXTENDS]
        point = '-' if t['point'] is None else point_text(t['point'], fixed)
        out.append(row(point, t['family'], f"{t['a']} / {t['b']}",
                       ', '.join(f"{k}: {multiple(a[k])} / {multiple(b[k])}" for k in seeds),
                       f"{len(extended)} of {len(seeds)}" + (f" ({', '.join(extended)})" if extended else '')))
    if not out:
        return []
    return [f"The range, the paper's own metric (secondary): per seed of each comparison of two arms above, a's "
            f"range / b's (the largest multiple with accuracy >= {results['rule']['range_threshold']:g} there and "
            f"at every shorter one), and the seeds on which a's is {EXTENDS}x b's or more (where b's is the largest "
            f"multiple evaluated, a's cannot be).", '',
            *head('point', 'family', 'a / b', 'range per seed', f"seeds >= {EXTENDS}x"), *out, '']


def side(term):
    """A side of a comparison as a table names it: a difference in brackets."""
    return f"({term})" if ' - ' in term else term


def machines_text(results):
    return ['**Machines**', '', 'Where each run trained (from its provenance; a run reproduces bit for bit on the '
            'same code, CPU model, torch and thread count): ' + '; '.join(
                f"{m}: " + ', '.join(f"{a} seeds {','.join(map(str, s))}" for a, s in by_arm.items())
                for m, by_arm in results['machines'].items()) + '.', '']


def format_markdown(results):
    mults = results['eval']['multiples']
    lines = [f"`{results['command']}`", '',
             f"Accuracy per length multiple: mean ± standard deviation over seeds, "
             f"{examples(results)} per point and seed.", '']
    lines += ['**Outcomes**', ''] + outcomes_table(results) + ['**Area and range**', ''] + area_table(results)
    lines += ['**What the tests support**', '', what_tests_support(results), '']
    change = results.get('rule_change')
    if change:
        lines += ['**The rule changed after its results**', '', f"Why: {change['why']}. Changed: " + '; '.join(
            f"{k} {a!r} -> {b!r}" for k, (a, b) in change['keys'].items()) + '. Each primary verdict under the old '
            'rule, then under this one:', '', *head('test', 'old rule', 'this rule')]
        lines += [row(k, a, b) for k, (a, b) in change['labels'].items()] + ['']
    if results.get('comparisons'):
        lines += comparisons_table(results)
    if 'long' in results:
        lines += long_training_tables(results)
    if results['eval'].get('variants'):
        lines += variant_tables(results)
    if 'deteriorates' in results['rule']:
        lines += ['**Deterioration**', '', results['rule']['deteriorates'] + ': ' + '; '.join(
            f"{n} {a['deterioration']['count']} of {a['deterioration']['of']}"
            + (f" (Fisher p = {fmt_p(a['deterioration']['fisher_p'])} against {results['rule']['control']})"
               if 'fisher_p' in a['deterioration'] else '')
            for n, a in results['arms'].items() if 'deterioration' in a) + '.', '']
    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    for task in tasks:
        lines += [f"**{task}**", '', *head('arm', 'seeds', *(f'{m}x' for m in mults))]
        for name, arm in results['arms'].items():
            points = [arm['tasks'].get(task, {}).get(str(m)) for m in mults]
            lines.append(row(name, len(arm['seeds']), *('-' if p is None else f"{p['mean']:.2f}" + (
                f" ± {p['std']:.2f}" if p['std'] is not None else '') for p in points)))
        # a mean over 2-3 seeds hides whether they agree: every seed's own row
        lines += ['', 'Per seed:', '', *head('arm', 'seed', *(f'{m}x' for m in mults))]
        for name, arm in results['arms'].items():
            for seed in arm['seeds']:
                points = [arm['tasks'].get(task, {}).get(str(m), {}).get('per_seed', {}).get(str(seed)) for m in mults]
                mark = ' †' if seed in arm['never_fit'] else ' (not fit by then)' if seed in arm.get(
                    'not_fit_by_then', ()) else ''
                lines.append(row(name, f"{seed}{mark}", *('-' if a is None else f"{a:.2f}" for a in points)))
        if any(a['never_fit'] for a in results['arms'].values()):
            lines += ['', '† never fit: counted apart, left out of the extrapolation statistics.']
        if any(a.get('not_fit_by_then') for a in results['arms'].values()):
            lines += ['', "Not fit by then: the run's fit came after its point's step (or never); cooled and measured "
                      "like the others, its area counts in the primary tests."]
        lines.append('')
    measured = {n: a for n, a in results['arms'].items() if a.get('mismatch')}
    if measured:
        def cell(arm, k):
            m, sd = arm['mismatch'][k], arm['mismatch_sd'][k]
            return '-' if m is None else f"{m:.3f}" + ('' if sd is None else f" ± {sd:.3f}")
        cols = ('token_shift', 'mean_shift', 'var_ratio', 'pre_act_token_shift', 'pre_act_var_ratio', 'token_floor')
        lines += ["Train-vs-eval mismatch at each arm's own dropout site, mean over the linear layers its noise "
                  f"reaches ('-': none, no dropout), mean ± sd over seeds ({MISMATCH_ROWS} validation rows, "
                  f"{MISMATCH_MASKS} masks; `python -m tools.mismatch RUN_DIR` gives it per layer and site). Token shift: "
                  "the conditional mean shift per token, E over masks of y given x against x; batch shift: the same "
                  "for the per-coordinate batch mean; both in eval standard deviations with the mask-noise floor "
                  "(last column) subtracted (0 = kept); var ratio: train / eval variance (1 = kept); at the layers' "
                  "inputs and, pre-act, at their outputs.", '',
                  *head('arm', 'token shift', 'batch shift', 'var ratio', 'pre-act token shift', 'pre-act var ratio',
                        'noise floor')]
        lines += [row(n, *(cell(a, k) for k in cols)) for n, a in measured.items()]
        lines.append('')
    if results.get('machines'):
        lines += machines_text(results)
    pending = {n: a['pending_seeds'] for n, a in results['arms'].items() if a['pending_seeds']}
    if pending:
        lines.append('Not finished yet (left out above): ' + '; '.join(f"{n} seeds {s}" for n, s in pending.items()))
    return '\n'.join(lines) + '\n'
