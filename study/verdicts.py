"""
The README's verdict table, written from the committed results/<study>/results.json files, so that
no figure in it can drift from its results: one row per arm tested against its study's control
(the area paired by seed, its 95% interval, the paired p and Holm's over the study's sites, the
seeds), "untestable" where the control is at ceiling, and one row per map (a study without a
control). The table sits between the markers below in README.md.

    python -m study.verdicts            # rewrite the table in README.md
    python -m study.verdicts --check    # exit 1 if README.md's table is not what the results give
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = '<!-- verdicts: written by `python -m study.verdicts` -->', '<!-- /verdicts -->'
# the studies in the table, in order, with the claim each tests (only studies whose results.json
# carries the area outcome: the ones run since the sensitive recipe)
STUDIES = [('study_regime', 'where the no-dropout control fails (the instrument)'),
           ('study_positive', 'the instrument detects a known shift (`rope_theta` 3e4 vs 1e4)'),
           ('study_sites_sensitive', '3-4. Pre-Linear dropout / VPAD extrapolate further than none and Pre-Norm'),
           ('study_sites_mamba2', '5. the same on Mamba2')]
ALPHA = 0.05


def verdict(t, ceiling):
    if ceiling:
        return 'untestable on this recipe: the control is at ceiling'
    if t['p_holm'] <= ALPHA:
        return f"{'longer' if t['difference'] > 0 else 'shorter'} extrapolation (p_Holm <= {ALPHA})"
    return 'no difference detected' if (t['seeds_for_power'] or 0) <= len(t['seeds']) else 'inconclusive: underpowered'


def rows(name, claim, res):
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
        out.append(f"| {claim} | {link} | {n} vs {control}: area {a['area']['mean']:.3f} vs {ctrl['area']['mean']:.3f}, "
                   f"paired difference {t['difference']:+.3f}{ci} | {t['p']:.3f} | {t['p_holm']:.3f} | {len(t['seeds'])} paired "
                   f"| {verdict(t, ceiling)} |")
    return out


def table():
    lines = ['| claim | study | effect (area: mean accuracy over 1x..64x) | paired p | Holm | seeds | verdict |',
             '| --- | --- | --- | --- | --- | --- | --- |']
    for name, claim in STUDIES:
        path = os.path.join(ROOT, 'results', name, 'results.json')
        if os.path.isfile(path):
            with open(path) as f:
                study = rows(name, claim, json.load(f))
            # the claim and the study once, on the study's first row
            lines += study[:1] + [r.replace(f"| {claim} | [{name}](results/{name}/README.md) |", '| | |', 1) for r in study[1:]]
    return '\n'.join(lines)


def with_table(readme):
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md has no verdict markers ({BEGIN} ... {END}): add them where the table goes")
    head, rest = readme.split(BEGIN, 1)
    return head + BEGIN + '\n' + table() + '\n' + END + rest.split(END, 1)[1]


def main(argv):
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


if __name__ == '__main__':
    main(sys.argv[1:])
