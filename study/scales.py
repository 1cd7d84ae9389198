"""
The second scale beside the first: the table in results/study_scale/README.md, written from the
committed results of study_scaling (2 layers of width 64) and study_scale (4 layers of width 128),
so that no figure in it can drift from its results. At each study's late point (fit + 4000, cooled),
for the arms both share: each arm's area plain and under yarn, then each site's paired difference
from none, plain and under yarn, with its 95% interval, Holm p (within its own study's family) and
label, and whether the small model's label held at the larger scale.

    python -m study.scales            # write the table into results/study_scale/README.md
    python -m study.scales --check    # exit 1 if that table is not what the results give
"""

if __name__ == '__main__':   # first: a Ctrl-C at start-up is one line (configurator.startup)
    import configurator
    configurator.startup()

import os  # noqa: E402
import sys  # noqa: E402

from core import rundir  # noqa: E402
from study import files  # noqa: E402

from study.stats import DELTA, decision, fmt_p, verdict, within  # noqa: E402
from study.verdicts import ROOT, load, with_table  # noqa: E402

# the two studies, small first (its verdicts are the ones tested), each with its model
SCALES = [('study_scaling', '2 layers x 64'), ('study_scale', '4 layers x 128')]
SITES = ['pre_linear', 'vpad']
VARIANT = 'yarn'
README = os.path.join(ROOT, 'results', 'study_scale', 'README.md')
BEGIN, END = '<!-- scales: written by `python -m study.scales` -->', '<!-- /scales -->'


def late_arm(res, arm):
    """The arm's summary at the study's late point (its cooled snapshot at fit + late), or None."""
    late = res.get('long', {}).get('late')
    return next((a for a in res['arms'].values() if (a.get('arm'), a.get('point')) == (arm, late)), None)


def area(res, arm, variant=None):
    """(mean area, seeds) of an arm at the late point, plain or under a variant; (None, 0) before it has runs."""
    a = late_arm(res, arm)
    a = a and (a.get('variants', {}).get(variant) if variant else a)
    if not a or a['area']['mean'] is None:
        return None, 0
    return a['area']['mean'], len(a['area']['per_seed'])


def test(res, site, variant=None):
    """(the paired test of site against the control at the late point, plain or both under a variant, or None;
    the size of the Holm family it was corrected over; whether the study fixed it in advance): a comparison
    the study fixed (site@v - control@v), else the arm's own test against the control (under the variant:
    secondary)."""
    c, late, a = res['rule']['control'], res.get('long', {}).get('late'), late_arm(res, site) or {}
    families, comparisons = res['rule'].get('families') or {}, res['rule'].get('comparisons') or {}
    family = lambda name: len(families.get(name) or [site])   # noqa: E731
    if not variant:
        t = (a.get('vs_control') or {}).get('area', {}).get('left_out')
        return t, family(next((f for f, arms in families.items() if site in arms), None)), True
    pair = [f"{site}@{variant}", f"{c}@{variant}"]
    fixed = next((t for t in res.get('comparisons', []) if t['point'] == late and [t['a'], t['b']] == pair), None)
    if fixed:
        return fixed['left_out'], len(comparisons.get(fixed['family'], [pair])), True
    own = a.get('variants', {}).get(variant, {}).get('vs_control') or {}
    return own.get('left_out'), family(own.get('family')), False


def reading(t, delta):
    """What a test's label says, for holding one scale against the other: 'higher' / 'lower', 'within +-delta'
    (equivalent, or resolved but within +-delta: a difference too small to matter, as two arms both at the
    ceiling give) or 'not resolved'."""
    text = verdict(t, delta)
    return f"within +-{delta:g}" if within(text) else decision(text)


def held(small, large, pending):
    """Whether the small model's reading held at the larger scale: (small, large) readings or None. A larger
    scale that resolves nothing does not confirm it; one that resolves another reading says it did not hold."""
    if small is None:
        return 'not tested on the small model'
    if pending:
        return f"pending: {pending} seed(s) still to run"
    if large is None:
        return 'no paired test at the larger scale'
    if small == large:
        return 'both not resolved' if small == 'not resolved' else f"held: {small}"
    if large == 'not resolved':      # too few seeds or too much spread to tell: not evidence against it
        return f"not confirmed: {small} -> not resolved"
    return f"did not hold: {small} -> {large}"


def pending_seeds(res):
    """Seeds some run of the study has still to finish (any arm, any point); None before the study has results."""
    return len({s for a in res['arms'].values() for s in a.get('pending_seeds', [])}) if res else None


def area_cell(res, arm, variant):
    mean, seeds = area(res, arm, variant) if res else (None, 0)
    return 'not yet' if mean is None else f"{mean:.3f} ({seeds})"


def test_cell(t, holm_over, fixed, delta):
    ci = f" [{t['ci95'][0]:+.3f}, {t['ci95'][1]:+.3f}]" if t['ci95'] else ''
    return (f"{t['difference']:+.3f}{ci}, Holm {fmt_p(t['p_holm'])} over {holm_over}, {len(t['seeds'])} seeds: "
            f"{verdict(t, delta)}" + ('' if fixed else ' (secondary)'))


def table(studies):
    """studies: [(name, model, results or None)], small first. -> the markdown of both tables."""
    (small_name, _, small), large = studies[0], studies[-1][2]
    c, late = small['rule']['control'], small['long']['late']
    out = [f"Area (mean accuracy over 1x..64x) at fit + {late}, cooled, mean over seeds (seeds in brackets):", '',
           '| arm | ' + ' | '.join(f"{model}, {v}" for _, model, _ in studies for v in ('plain', VARIANT)) + ' |',
           '| --- |' + ' --- |' * 2 * len(studies)]
    for arm in [c] + SITES:
        out.append(f"| {arm} | " + ' | '.join(area_cell(res, arm, v) for _, _, res in studies for v in (None, VARIANT))
                   + ' |')
    out += ['', "Each site's paired difference from the control [95% CI], its Holm p (over that many tests of its own "
                "study's family) and label (secondary: a test the study did not fix in advance); the last column "
                "holds the two readings against each other, a resolved difference whose 90% interval lies inside "
                "+-0.05 read as within it:", '',
            '| comparison | ' + ' | '.join(model for _, model, _ in studies) + " | the small model's reading held? |",
            '| --- |' + ' --- |' * len(studies) + ' --- |']
    for v in (None, VARIANT):
        for site in SITES:
            cells, readings = [], []
            for _, _, res in studies:
                t, holm_over, fixed = test(res, site, v) if res else (None, 0, False)
                delta = res['rule'].get('delta', DELTA) if res else DELTA
                readings.append(t and reading(t, delta))
                cells.append(test_cell(t, holm_over, fixed, delta) if t else 'not yet')
            what = f"{site}@{v} - {c}@{v}" if v else f"{site} - {c}, plain"
            pending = pending_seeds(large)
            out.append(f"| {what} | " + ' | '.join(cells) + ' | '
                       + ('pending: no results yet' if pending is None else held(readings[0], readings[-1], pending))
                       + ' |')
    return '\n'.join(out)


def main(argv):
    if argv in (['-h'], ['--help']):
        print(__doc__.strip().split('\n\n')[-1])
        return
    if set(argv) - {'--check'}:
        raise SystemExit(f"unknown argument(s) {' '.join(a for a in argv if a != '--check')}: "
                         "python -m study.scales [--check]")
    studies = [(name, model, load(name)) for name, model in SCALES]
    small = studies[0][0]
    if not studies[0][2]:
        raise SystemExit(f"results/{small}/{files.RESULTS} is missing: restore it (git checkout -- "
                         f"results/{small}) or rerun python ablate.py config/{small}.py")
    with open(README) as f:
        readme = f.read()
    new = with_table(readme, table(studies), BEGIN, END)
    if '--check' in argv:
        if new != readme:
            raise SystemExit(f"{os.path.relpath(README, ROOT)}'s table differs from what the results give: "
                             "run python -m study.scales")
        print(f"{os.path.relpath(README, ROOT)}'s table matches the results")
        return
    with rundir.writing(README, 'the scales table', 'rerun python -m study.scales (the README is as it was)'):
        rundir.write_atomic(README, new.encode())
    print(f"wrote the table into {os.path.relpath(README, ROOT)}")


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
