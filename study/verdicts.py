"""
The verdict table of results/README.md, written from the committed results/<study>/results.json files, so that
no figure in it can drift from its results: one row per arm tested against its study's control
(the area paired by seed, its 95% interval, the paired p and Holm's over the study's sites, the
seeds, the label stats.verdict gives every table), and one row per map (a study without a control).
The table sits between the markers below in results/README.md. The headline figure (results/headline.png,
with matplotlib) is study_long's picture, each run cooled early and late in its own training;
without study_long's results it falls back to the regime map with each site study's runs drawn
beside the point of the map its recipe sits at.

    python -m study.verdicts            # rewrite the table in results/README.md, draw results/headline.png
    python -m study.verdicts --check    # exit 1 if results/README.md's table is not what the results give
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import os
import statistics
import sys

from base import rundir
from study import files

from study.stats import (CHANGE, DELTA, at_point, decision, family_arms, fixed_steps, fmt_p, point_text,
                         range_text, second_analysis, t_interval, verdict, within)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join('results', 'README.md')   # the table's file, from ROOT; its links are relative to results/
BEGIN, END = '<!-- verdicts: written by `python -m study.verdicts` -->', '<!-- /verdicts -->'
# the studies in the table, in order, with the claim each tests (only studies whose results.json
# carries the area outcome: the ones run since the sensitive recipe)
STUDIES = [('study_regime', 'where the no-dropout control fails (the instrument)'),
           ('study_positive', 'the instrument detects a known shift (`rope_theta` 3e4 vs 1e4)'),
           ('study_long', ('1. long training deteriorates extrapolation, weight decay hastens it',
                           '3-4, late in training: Pre-Linear dropout / VPAD extrapolate further than none')),
           ('study_sites_sensitive', '3-4. Pre-Linear dropout / VPAD extrapolate further than none and Pre-Norm'),
           ('study_continue_sensitive', '3-4, the paper\'s headline experiment: dropout added in continued training'),
           ('study_scaling', {'sites': '3-4 on fresh seeds (21-32), cooled at fit +4000',
                              'paper': "3-4, the paper's own comparisons: Pre-Linear vs Pre-Norm, VPAD vs Pre-Linear",
                              'practice': 'beside RoPE rescaled at inference (YaRN, fixed in advance)',
                              'weight decay': '1, weight decay on fresh seeds'}),
           ('study_quick', '4 in under an hour: VPAD vs none at fit +5000, the last 1000 decaying'),
           ('study_haystack', {'primary': '4 and beside YaRN on a haystack whose distractors grow with the length'}),
           ('study_scale2', ('1 at 4 layers x 128 (0.97M), rope_theta 1e3: the change 6000 -> 16000 steps',
                             '3-4 at 4 layers x 128, at 16000 steps: VPAD against none')),
           ('study_long_mamba2', ('1, on Mamba2', '5, late in training')),
           ('study_sites_mamba2', '5. the same on Mamba2')]
EXTRA = ['study_scale']   # studies checked for mixed machines, not in the table
# the headline figure: the map, and the regime-map arm each site study's recipe is (its none arm is
# that point's control trained for 12 seeds; config/sensitive.py is rope_theta 1e4)
MAP = 'study_regime'
LONG = 'study_long'    # once it has results, the headline is its picture: each run early and late in its training
AT = {'study_sites_sensitive': 'theta_1e4', 'study_sites_mamba2': 'mamba2'}


def paired_row(claim, link, what, t, delta, holm_p=True, t0=None, fixed=False):
    """One row of a paired comparison: its effect, raw p, Holm p, seeds and the label its interval gives,
    with the 90% interval where it decides words of the label (equivalent, or within +-delta), and
    the never-fit-as-0 analysis (t0; at fixed steps, fit runs only) where its label differs."""
    ci = f" [{t['ci95'][0]:+.3f}, {t['ci95'][1]:+.3f}]" if t['ci95'] else ''
    text = verdict(t, delta)
    if within(text):
        lo, hi = t.get('ci90') or t_interval(t['difference'], t['sd'], len(t['seeds']), 0.90)
        text += f", 90% [{lo:+.3f}, {hi:+.3f}]"
    if t0 and decision(verdict(t0, delta)) != decision(verdict(t, delta)):
        text += f"; {'fit runs only' if fixed else 'never fit as 0'}: {verdict(t0, delta)}"
    return (f"| {claim} | {link} | {what}, {t['difference']:+.3f}{ci} | {fmt_p(t['p'])} | "
            f"{fmt_p(t['p_holm']) if holm_p else '-'} | {len(t['seeds'])} paired | {text} |")


def long_rows(name, claims, res):
    """A study of cooled snapshots. Claim 1 (claims[0]): each run's change from its early to its late
    cooled area, the control's against 0 and each arm's against the control's, and the area late of
    the arms outside the sites family (weight decay); claims 3-4 (claims[1]): each site's cooled area
    late against the control's. A comparison with no paired runs yet (a study cut short) has no row."""
    link, L, c, delta = f"[{name}]({name}/README.md)", res['long'], res['rule']['control'], res['long']['delta']
    e, late, fixed = L['early'], L['late'], fixed_steps(res)
    area = {a['arm']: a for a in res['arms'].values() if a.get('point') == late and a['area']['mean'] is not None}
    early = next((a['area']['mean'] for a in res['arms'].values() if (a['arm'], a.get('point')) == (c, e)), None)
    change, claim_1, sites = L['change'].get(c), [], []
    if change and c in area and early is not None:
        what = f"{c}: cooled area {at_point(e, fixed)} -> {point_text(late, fixed)}, {early:.3f} -> "
        claim_1.append(paired_row(claims[0], link, what + f"{area[c]['area']['mean']:.3f}", change, delta, holm_p=False))
    claim_1 += [paired_row(claims[0], link, f"{a}'s change against {c}'s", t, delta)
                for a, t in L['change_vs_control'].items()]
    for family, arms in (res['rule']['families'] or {'sites': [a for a in area if a != c]}).items():
        for a in family_arms(arms):
            tests = (area.get(a, {}).get('vs_control') or {}).get('area', {})
            t = tests.get('left_out')
            if not t or c not in area:
                continue
            row = paired_row(claims[1] if family == 'sites' else claims[0], link,
                             f"{a} vs {c}, cooled area {at_point(late, fixed)}: "
                             f"{area[a]['area']['mean']:.3f} vs {area[c]['area']['mean']:.3f}", t, delta,
                             t0=tests.get(second_analysis(fixed)), fixed=fixed)
            (sites if family == 'sites' else claim_1).append(row)
    return claim_1 + sites


def side(term):
    """A side of a comparison as a table names it: a difference in brackets."""
    return f"({term})" if ' - ' in term else term


def family_rows(name, claims, res):
    """A study with families and comparisons of its own (claims: {family: claim}): each primary test at its
    primary point (the late snapshot), family by family in the order of claims: an arm against the control,
    a change the family names (early -> late, against the control's), or a comparison a - b (each side an
    arm's area, plain or under a variant, or a difference of two)."""
    link, delta = f"[{name}]({name}/README.md)", res['rule'].get('delta', DELTA)
    point, fixed = res.get('long', {}).get('late'), fixed_steps(res)
    at = {(a['arm'], a.get('point')): a for a in res['arms'].values()}
    c, out, second = res['rule']['control'], [], second_analysis(fixed)
    for family, claim in claims.items():
        for entry in res['rule']['families'].get(family, []):
            if entry.endswith(CHANGE):
                change = res.get('long', {}).get('change_vs_control', {}).get(entry.removesuffix(CHANGE))
                if change:
                    what = (f"{entry} {point_text(res['long']['early'], fixed)} -> {point_text(point, fixed)} "
                            f"against {c}'s")
                    out.append(paired_row(claim, link, what, change, delta))
                continue
            arm = entry
            tests = (at.get((arm, point), {}).get('vs_control') or {}).get('area', {})
            if tests.get('left_out') and (c, point) in at:
                what = (f"{arm} vs {c}" + (f" {at_point(point, fixed)}" if point else '')
                        + f": {at[arm, point]['area']['mean']:.3f} vs {at[c, point]['area']['mean']:.3f}")
                out.append(paired_row(claim, link, what, tests['left_out'], delta, t0=tests.get(second), fixed=fixed))
        for t in res.get('comparisons', []):
            if t['family'] == family and t['point'] == point and t['left_out']:
                what = f"{side(t['a'])} - {side(t['b'])}" + (f" {at_point(point, fixed)}" if point else '')
                out.append(paired_row(claim, link, what, t['left_out'], delta, t0=t[second], fixed=fixed))
    return out


def rows(name, claim, res):
    if isinstance(claim, dict):
        return family_rows(name, claim, res)
    if 'long' in res:
        return long_rows(name, claim, res)
    link = f"[{name}]({name}/README.md)"
    arms, control, delta = res['arms'], res['rule']['control'], res['rule'].get('delta', DELTA)
    if not control:     # a map: each arm's area and range
        cells = '; '.join(f"{n} {a['area']['mean']:.2f} ({range_text(a['range'])})" for n, a in arms.items()
                          if a['area']['mean'] is not None)
        seeds = max(a['fit'] for a in arms.values())
        return [f"| {claim} | {link} | area (range) per arm: {cells} | - | - | {seeds} per arm | a map: no test |"]
    ctrl = arms[control]
    out = []
    for n, a in arms.items():
        tests = (a.get('vs_control') or {}).get('area', {})
        t = tests.get('left_out')
        if n == control or not t:
            continue
        what = f"{n} vs {control}: {a['area']['mean']:.3f} vs {ctrl['area']['mean']:.3f}"
        out.append(paired_row(claim, link, what, t, delta, t0=tests.get('never_fit_as_0')))
    return out


def table():
    lines = ['| claim | study | effect: area (mean accuracy over 1x..64x) against the control\'s, paired difference '
             '[95% CI] | paired p | Holm | seeds | verdict |',
             '| --- | --- | --- | --- | --- | --- | --- |']
    last = None
    for name, claim in STUDIES:
        res = load(name)
        if not res:                   # missing or empty: said, never dropped in silence
            print(f"note: results/{name}/results.json is {'empty' if res == {} else 'missing'}: its rows are left "
                  f"out; rerun python ablate.py config/{name}.py (or git checkout -- results/{name})")
        for row in rows(name, claim, res) if res else []:
            claim_cell, study_cell, rest = row.split(' | ', 2)
            # the claim and the study once, on the first of their rows
            lines.append('| | | ' + rest if (claim_cell, study_cell) == last else row)
            last = claim_cell, study_cell
    return '\n'.join(lines)


def mixed_machines(names=None):
    """Studies whose paired runs of one seed trained on different machines (results.json's 'machines'):
    a pair broken across CPUs compares the machines as well as the arms. One line per study."""
    out = []
    for name in names or [s for s, _ in STUDIES] + [s for s in EXTRA if s not in dict(STUDIES)]:
        res = load(name) or {}
        where = {}
        for machine, by_arm in res.get('machines', {}).items():
            for seeds in by_arm.values():
                for s in seeds:
                    where.setdefault(s, set()).add(machine)
        mixed = sorted(s for s, ms in where.items() if len(ms) > 1)
        if mixed:
            out.append(f"{name}: the arms of seed(s) {', '.join(map(str, mixed))} trained on different machines "
                       f"({'; '.join(sorted(set().union(*(where[s] for s in mixed))))}): those pairs compare "
                       f"machines as well as arms")
    return out


def with_table(readme, tbl, begin=BEGIN, end=END):
    """readme with tbl between its markers (begin, end), which must be there, in that order."""
    if begin not in readme or end not in readme or readme.index(end) < readme.index(begin):
        raise SystemExit(f"the README needs its table's markers, {begin} then {end}, in that order: put them "
                         f"around the table")
    head, rest = readme.split(begin, 1)
    return head + begin + '\n' + tbl + '\n' + end + rest.split(end, 1)[1]


def load(name):
    path = os.path.join(ROOT, 'results', name, files.RESULTS)
    if not os.path.isfile(path):
        return None
    return files.read_json(path, f"restore it (git checkout -- {os.path.relpath(path, ROOT)}) or rerun its study")


def headline_groups(studies):
    """The figure's dot groups, left to right: (x, label, study, arm, areas, accuracies at the map
    point's mid-range (task, multiple), that (task, multiple)). Each map arm takes one slot; a site
    study drawn at that arm widens it by one slot per site arm, so no dots overlap."""
    groups, x = [], 0.0

    def group(x, label, study, arm, entry, at):
        task, m = at
        accs = entry.get('tasks', {}).get(task, {}).get(m, {}).get('per_seed', {})
        return x, label, study, arm, list(entry['area']['per_seed'].values()), list(accs.values()), at
    for point, arm in studies[MAP]['arms'].items():
        at = mid_multiple(arm)
        groups.append(group(x, point, MAP, point, arm, at))
        for name, where in AT.items():
            if where == point and studies.get(name):
                for site, a in studies[name]['arms'].items():
                    if a['area']['per_seed']:
                        x += 0.6
                        groups.append(group(x, site, name, site, a, at))
        x += 1.0
    return groups


def mid_multiple(arm):
    """(task, multiple) where an arm's median accuracy over its runs is nearest 0.5: where a loss of
    length shows, not where every run is at 1 or at 0. (None, None) for an arm with no eval."""
    if not arm.get('tasks'):
        return None, None
    task = next(iter(arm['tasks']))
    accs = arm['tasks'][task]
    return task, min(accs, key=lambda m: abs(statistics.median(accs[m]['per_seed'].values()) - 0.5))


def mid_range(res):
    """mid_multiple of the control of a study of snapshots, cooled late; None before it is evaluated."""
    late = (res['rule']['control'], res['long']['late'])
    ctrl = next((a for a in res['arms'].values() if (a['arm'], a['point']) == late and a['tasks']), None)
    return mid_multiple(ctrl) if ctrl else None


def draw_long_headline(res, path):
    """The deterioration picture: each run's area, and its accuracy where the control is mid-range,
    cooled early (left) and late (right) in its own training, one line per run, arm by arm."""
    import eval_lengths                          # torch and matplotlib: only to draw
    from study.plots import area_of, early_late_panel
    task, m = mid_range(res)
    panels = {'area (mean accuracy, 1x..64x)': area_of,
              f"accuracy at {m}x (the control's mid-range)":
                  lambda a: a['tasks'].get(task, {}).get(m, {}).get('per_seed', {})}
    e, late = res['long']['early'], res['long']['late']
    eval_lengths.plot_panels(list(panels), lambda ax, p: early_late_panel(ax, res, panels[p]), path,
                             f"cooled at fit +{e} | fit +{late}",
                             f"{task} accuracy (a line: one run; a bar: median)", log2=False)


def draw_headline(studies, path):
    import eval_lengths                          # torch and matplotlib: only to draw
    from study.plots import dots_with_median
    groups = headline_groups(studies)
    sites = list(dict.fromkeys(g[3] for g in groups if g[2] != MAP))
    panels = ['area: mean accuracy over 1x..64x', "accuracy at the multiple where the map's control is nearest 0.5"]

    def draw(ax, panel):
        labelled = set()                         # one legend entry per site, whichever study drew it first
        for x, _, study, arm, areas, accs, _ in groups:
            label = 'no dropout, the regime map' if study == MAP else arm
            dots_with_median(ax, x, areas if panel == panels[0] else accs or [float('nan')],
                             'C7' if study == MAP else f"C{sites.index(arm)}",
                             label=None if label in labelled else label, jitter=0.03, half=0.25)
            labelled.add(label)
        for name in AT:                          # each site study named above its dots
            xs = [g[0] for g in groups if g[2] == name]
            if xs and panel == panels[0]:
                n = sorted({len(g[4]) for g in groups if g[2] == name})
                seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
                ax.text(sum(xs) / len(xs), 0.95, f"{name}\n({seeds} seeds per arm)", ha='center', va='top', fontsize=8)
        ax.set_xticks([g[0] for g in groups], [g[1] if panel == panels[0] else f"{g[1]} {g[6][1]}x" for g in groups],
                      fontsize=8, rotation=30, ha='right')

    eval_lengths.plot_panels(panels, draw, path, '', 'mqar accuracy (dot: one run; bar: median)', log2=False, width=6.5)


def main(argv):
    if argv in (['-h'], ['--help']):
        print(f"python -m study.verdicts [--check]: write (or, with --check, compare) {TABLE}'s verdict table "
              "and draw results/headline.png, from the committed results/*/results.json")
        return
    if set(argv) - {'--check'}:
        raise SystemExit(f"unknown argument(s) {' '.join(a for a in argv if a != '--check')}: "
                         "python -m study.verdicts [--check]")
    path = os.path.join(ROOT, TABLE)
    with open(path) as f:
        readme = f.read()
    tbl = table()
    new = with_table(readme, tbl)
    if '--check' in argv:
        for line in mixed_machines():
            print(f"warning: {line}")
        if new != readme:
            raise SystemExit(f"{TABLE}'s verdict table differs from what the results give: "
                             "run python -m study.verdicts")
        print(f"{TABLE}'s verdict table matches the results")
        return
    with rundir.writing(path, 'the verdict table', f'rerun python -m study.verdicts ({TABLE} is as it was)'):
        rundir.write_atomic(path, new.encode())
    print(f"wrote the verdict table ({tbl.count(chr(10)) - 1} rows) into {TABLE}")
    studies = {name: load(name) for name in [LONG, MAP, *AT]}
    if studies[LONG] and mid_range(studies[LONG]):
        draw_long_headline(studies[LONG], os.path.join(ROOT, 'results', 'headline.png'))
    elif studies[MAP]:
        draw_headline(studies, os.path.join(ROOT, 'results', 'headline.png'))


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
