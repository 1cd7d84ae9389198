"""
The README's verdict table, written from the committed results/<study>/results.json files, so that
no figure in it can drift from its results: one row per arm tested against its study's control
(the area paired by seed, its 95% interval, the paired p and Holm's over the study's sites, the
seeds), "untestable" where the control is at ceiling, and one row per map (a study without a
control). The table sits between the markers below in README.md. The headline figure
(results/headline.png, with matplotlib) is the regime map with each site study's runs drawn beside
the point of the map its recipe sits at.

    python -m study.verdicts            # rewrite the table in README.md and draw results/headline.png
    python -m study.verdicts --check    # exit 1 if README.md's table is not what the results give
"""

import json
import os
import sys

from study.stats import fisher_exact, fmt_p, holm, seeds_for_power

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = '<!-- verdicts: written by `python -m study.verdicts` -->', '<!-- /verdicts -->'
# the studies in the table, in order, with the claim each tests (only studies whose results.json
# carries the area outcome: the ones run since the sensitive recipe)
STUDIES = [('study_regime', 'where the no-dropout control fails (the instrument)'),
           ('study_positive', 'the instrument detects a known shift (`rope_theta` 3e4 vs 1e4)'),
           ('study_wd_sensitive', '1. long training deteriorates extrapolation, weight decay hastens it'),
           ('study_sites_sensitive', '3-4. Pre-Linear dropout / VPAD extrapolate further than none and Pre-Norm'),
           ('study_continue_sensitive', '3-4, the paper\'s headline experiment: dropout added in continued training'),
           ('study_sites_mamba2', '5. the same on Mamba2')]
ALPHA = 0.05
# a study with a deterioration rule is judged by it, each arm against the arm it differs from by one
# setting (fixed in its config before the runs): Fisher on the fit runs that deteriorate, Holm over these
DETERIORATION_PAIRS = {'study_wd_sensitive': [('none_wd', 'none'), ('vpad_wd', 'vpad'), ('vpad', 'none')]}
# the headline figure: the map, and the regime-map arm each site study's recipe is (its none arm is
# that point's control trained for 12 seeds; config/sensitive.py is rope_theta 1e4)
MAP = 'study_regime'
AT = {'study_sites_sensitive': 'theta_1e4', 'study_sites_mamba2': 'mamba2'}


def verdict(t, ceiling):
    if ceiling:
        return 'untestable on this recipe: the control is at ceiling'
    if t['p_holm'] <= ALPHA:
        return f"{'longer' if t['difference'] > 0 else 'shorter'} extrapolation (p_Holm <= {ALPHA})"
    return 'no difference detected' if (t['seeds_for_power'] or 0) <= len(t['seeds']) else 'inconclusive: underpowered'


def deterioration_rows(name, claim, res):
    link, arms = f"[{name}](results/{name}/README.md)", res['arms']
    tests = []                                   # (a, b, their counts, Fisher p, fit runs per arm 80% power needs)
    for a, b in DETERIORATION_PAIRS[name]:
        da, db = arms[a]['deterioration'], arms[b]['deterioration']
        if da['of'] and db['of']:
            tests.append((a, b, da, db, fisher_exact(da['count'], da['of'] - da['count'], db['count'], db['of'] - db['count']),
                          seeds_for_power(da['count'] / da['of'], db['count'] / db['of'])))
    out = []
    for (a, b, da, db, p, n), p_holm in zip(tests, holm([t[4] for t in tests])):
        more = da['count'] / da['of'] > db['count'] / db['of']
        verdict = (f"deteriorates {'more' if more else 'less'} often (p_Holm <= {ALPHA})" if p_holm <= ALPHA else
                   'neither arm deteriorates: the rule never fired' if da['count'] == db['count'] == 0 else
                   'every run deteriorates in both arms: the rule cannot tell them apart'
                   if (da['count'], db['count']) == (da['of'], db['of']) else
                   'no difference detected' if n is None or isinstance(n, int) and n <= min(da['of'], db['of']) else
                   'inconclusive: underpowered')
        out.append(f"| {claim} | {link} | {a} vs {b}: deteriorate {da['count']}/{da['of']} vs {db['count']}/{db['of']} "
                   f"fit runs (Fisher); area at the end {arms[a]['area']['mean']:.3f} vs {arms[b]['area']['mean']:.3f} "
                   f"| {fmt_p(p)} | {fmt_p(p_holm)} | {min(da['of'], db['of'])} per arm | {verdict} |")
    return out


def rows(name, claim, res):
    if name in DETERIORATION_PAIRS:
        return deterioration_rows(name, claim, res)
    link = f"[{name}](results/{name}/README.md)"
    arms, control = res['arms'], res['rule']['control']
    if not control:     # a map: each arm's area and range
        cells = '; '.join(f"{n} {a['area']['mean']:.2f} ({a['range']['median']:g}x)" for n, a in arms.items()
                          if a['area']['mean'] is not None)
        seeds = max(a['fit'] for a in arms.values())
        return [f"| {claim} | {link} | area (range) per arm: {cells} | - | - | {seeds} per arm | a map: no test |"]
    ctrl = arms[control]
    ceiling = (ctrl['area']['median'] or 0) >= 0.95 or ctrl['extrapolates']['count'] == ctrl['extrapolates']['of'] > 0
    out = []
    for n, a in arms.items():
        t = (a.get('vs_control') or {}).get('area', {}).get('left_out')
        if n == control or not t:
            continue
        ci = f" [{t['ci95'][0]:+.3f}, {t['ci95'][1]:+.3f}]" if t['ci95'] else ''
        out.append(f"| {claim} | {link} | {n} vs {control}: {a['area']['mean']:.3f} vs {ctrl['area']['mean']:.3f}, "
                   f"{t['difference']:+.3f}{ci} | {fmt_p(t['p'])} | {fmt_p(t['p_holm'])} | {len(t['seeds'])} paired "
                   f"| {verdict(t, ceiling)} |")
    return out


def table():
    lines = ['| claim | study | effect: area (mean accuracy over 1x..64x) against the control\'s, paired difference '
             '[95% CI] | paired p | Holm | seeds | verdict |',
             '| --- | --- | --- | --- | --- | --- | --- |']
    for name, claim in STUDIES:
        res = load(name)
        if res:
            study = rows(name, claim, res)
            # the claim and the study once, on the study's first row
            lines += study[:1] + [r.replace(f"| {claim} | [{name}](results/{name}/README.md) |", '| | |', 1) for r in study[1:]]
    return '\n'.join(lines)


def with_table(readme):
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md has no verdict markers ({BEGIN} ... {END}): add them where the table goes")
    head, rest = readme.split(BEGIN, 1)
    return head + BEGIN + '\n' + table() + '\n' + END + rest.split(END, 1)[1]


def load(name):
    path = os.path.join(ROOT, 'results', name, 'results.json')
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def headline_groups(studies):
    """The figure's dot groups, left to right: (x, label, study, arm, areas). Each map arm takes one
    slot; a site study drawn at that arm widens it by one slot per site arm, so no dots overlap."""
    groups, x = [], 0.0
    for point, arm in studies[MAP]['arms'].items():
        groups.append((x, point, MAP, point, list(arm['area']['per_seed'].values())))
        for name, at in AT.items():
            if at == point and studies.get(name):
                for site, a in studies[name]['arms'].items():
                    if a['area']['per_seed']:
                        x += 0.6
                        groups.append((x, site, name, site, list(a['area']['per_seed'].values())))
        x += 1.0
    return groups


def draw_headline(studies, path):
    import eval_lengths                          # torch and matplotlib: only to draw
    from study.plots import dots_with_median
    groups = headline_groups(studies)
    sites = list(dict.fromkeys(arm for _, _, study, arm, _ in groups if study != MAP))

    def draw(ax, _):
        labelled = set()                         # one legend entry per site, whichever study drew it first
        for x, _, study, arm, areas in groups:
            label = 'no dropout, the regime map' if study == MAP else arm
            dots_with_median(ax, x, areas, 'C7' if study == MAP else f"C{sites.index(arm)}",
                             label=None if label in labelled else label, jitter=0.03, half=0.25)
            labelled.add(label)
        for name in AT:                          # each site study named above its dots
            xs = [x for x, _, study, _, _ in groups if study == name]
            if xs:
                n = sorted({len(g[4]) for g in groups if g[2] == name})
                seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
                ax.text(sum(xs) / len(xs), 0.95, f"{name}\n({seeds} seeds per arm)", ha='center', va='top', fontsize=8)
        ax.set_xticks([g[0] for g in groups], [g[1] for g in groups], fontsize=8, rotation=30, ha='right')

    eval_lengths.plot_panels(['each site at the point of the regime map its recipe sits at'], draw, path, '',
                             'area: mean accuracy over 1x..64x (dot: one run; bar: median)', log2=False)


def main(argv):
    if argv in (['-h'], ['--help']):
        print("python -m study.verdicts [--check]: write (or, with --check, compare) README.md's verdict table "
              "and draw results/headline.png, from the committed results/*/results.json")
        return
    if set(argv) - {'--check'}:
        raise SystemExit(f"unknown argument(s) {' '.join(a for a in argv if a != '--check')}: "
                         "python -m study.verdicts [--check]")
    path = os.path.join(ROOT, 'README.md')
    with open(path) as f:
        readme = f.read()
    new = with_table(readme)
    if '--check' in argv:
        if new != readme:
            raise SystemExit("README.md's verdict table differs from what the results give: run python -m study.verdicts")
        print("README.md's verdict table matches the results")
        return
    with open(path, 'w') as f:
        f.write(new)
    print(f"wrote the verdict table ({table().count(chr(10)) - 1} rows) into README.md")
    studies = {name: load(name) for name in [MAP, *AT]}
    if studies[MAP]:
        draw_headline(studies, os.path.join(ROOT, 'results', 'headline.png'))


if __name__ == '__main__':
    main(sys.argv[1:])
