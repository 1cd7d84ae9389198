"""
The second scale beside the first: the tables in results/study_scale/README.md and
results/study_scale2/README.md, written from the committed results of study_scaling (2 layers of width
64), study_scale (4 layers of width 128, read at fit + 4000) and study_scale2 (4 layers of width 128 in
its own regime, read at equal total steps, and near each run's fit + 4000 for comparison), so that no
figure in them can drift from its results. For the arms the studies share: each arm's area plain and
under yarn, then each site's paired difference from none, plain and under yarn, with its 95% interval,
Holm p (within its own study's family) and label, and whether the small model's label held.

    python -m study.scales            # write the tables into both READMEs
    python -m study.scales --check    # exit 1 if a table is not what the results give
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import os
import sys

from base import rundir
from study import files

from study.stats import DELTA, decision, fixed_steps, fmt_p, verdict, within
from study.verdicts import ROOT, load, with_table

# the views, small first (its verdicts are the ones tested): (study, model, which point, the point as the
# tables name it until the study has results); 'late': the study's late point, 'fit_plus': its runs read near
# their own fit + k (a study at fixed steps, for comparison with a fit-relative one)
VIEWS = [('study_scaling', '2 layers x 64', 'late', 'fit + 4000'),
         ('study_scale', '4 layers x 128', 'late', 'fit + 4000'),
         ('study_scale2', '4 layers x 128, rope_theta 1e3', 'late', 'at 16000'),
         ('study_scale2', '4 layers x 128, rope_theta 1e3', 'fit_plus', 'near fit + 4000')]
SITES = ['pre_linear', 'vpad']
VARIANT = 'yarn'
READMES = [os.path.join(ROOT, 'results', name, 'README.md') for name in ('study_scale', 'study_scale2')]
BEGIN, END = '<!-- scales: written by `python -m study.scales` -->', '<!-- /scales -->'


def fit_plus_of(res):
    """A study's reading near each run's fit + k (outcomes.fit_plus), or {} where its summary has none."""
    return (res or {}).get('long', {}).get('fit_plus') or {}


def has_arm(res, arm):
    return arm in {a.get('arm') for a in res['arms'].values()}


def point_of(res, kind, default):
    """Where a view reads its study, as the tables name it: 'fit + 4000', 'at 16000', 'near fit + 4000'."""
    L = (res or {}).get('long')
    if not L:
        return default
    if kind == 'fit_plus':
        return f"near fit + {fit_plus_of(res)['offset']}" if fit_plus_of(res) else default
    return f"at {L['late']}" if fixed_steps(res) else f"fit + {L['late']}"


def late_arm(res, arm):
    """The arm's summary at the study's late point (its cooled snapshot there), or None."""
    late = res.get('long', {}).get('late')
    return next((a for a in res['arms'].values() if (a.get('arm'), a.get('point')) == (arm, late)), None)


def area(res, arm, kind='late', variant=None):
    """(mean area, seeds) of an arm in a view, plain or under a variant; (None, 0) where it has none."""
    if kind == 'fit_plus':
        per_seed = {} if variant else fit_plus_of(res).get('area', {}).get(arm, {})
        return (sum(per_seed.values()) / len(per_seed), len(per_seed)) if per_seed else (None, 0)
    a = late_arm(res, arm)
    a = a and (a.get('variants', {}).get(variant) if variant else a)
    if not a or a['area']['mean'] is None:
        return None, 0
    return a['area']['mean'], len(a['area']['per_seed'])


def test(res, site, kind='late', variant=None):
    """(the paired test of site against the control in a view, plain or both under a variant, or None; the
    size of the Holm family it was corrected over; whether the study fixed it in advance): a comparison the
    study fixed (site@v - control@v), else the arm's own test against the control (under the variant:
    secondary); near the fit, its test there (plain only)."""
    c, late, a = res['rule']['control'], res.get('long', {}).get('late'), late_arm(res, site) or {}
    families, comparisons = res['rule'].get('families') or {}, res['rule'].get('comparisons') or {}
    family = lambda name: len(families.get(name) or [site])   # noqa: E731
    if kind == 'fit_plus':         # secondary, a family of its own: Holm over the tests made in it
        tests = fit_plus_of(res).get('vs_control', {})
        t = None if variant else tests.get(site)
        return t, t and sum(x.get('family') == t.get('family') for x in tests.values()), False
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


def area_cell(res, arm, kind, variant):
    if kind == 'fit_plus' and variant:
        return '-'                      # near the fit, read plain only
    if not res:
        return 'not yet'
    if not has_arm(res, arm):
        return '-'                      # not an arm of the study
    if not computed(res, kind):
        return 'not computed'
    mean, seeds = area(res, arm, kind, variant)
    return 'no run' if mean is None else f"{mean:.3f} ({seeds})"


def computed(res, kind):
    """Whether a study's results hold the view's reading (near the fit: summarized with fit_plus_reading)."""
    return kind != 'fit_plus' or bool(fit_plus_of(res))


def test_cell(t, holm_over, fixed, delta):
    ci = f" [{t['ci95'][0]:+.3f}, {t['ci95'][1]:+.3f}]" if t['ci95'] else ''
    return (f"{t['difference']:+.3f}{ci}, Holm {fmt_p(t['p_holm'])} over {holm_over}, {len(t['seeds'])} seeds: "
            f"{verdict(t, delta)}" + ('' if fixed else ' (secondary)'))


def table(views):
    """views: [(model, kind, the point as named before results, results or None)], small first. -> the markdown
    of both tables."""
    c = views[0][3]['rule']['control']
    named = [(model, point_of(res, kind, default), kind, res) for model, kind, default, res in views]
    out = ["Area (mean accuracy over 1x..64x), cooled, mean over seeds (seeds in brackets; '-': not an arm of "
           "that study, or not read there):", '',
           '| model | read at | ' + ' | '.join(f"{arm}, {v or 'plain'}" for arm in [c] + SITES for v in (None, VARIANT))
           + ' |', '| --- | --- |' + ' --- |' * 2 * (1 + len(SITES))]
    for model, point, kind, res in named:
        out.append(f"| {model} | {point} | " + ' | '.join(area_cell(res, arm, kind, v) for arm in [c] + SITES
                                                        for v in (None, VARIANT)) + ' |')
    out += ['', "Each site's paired difference from the control [95% CI], its Holm p (over that many tests of its own "
                "study's family) and label (secondary: a test the study did not fix in advance); the last column "
                "holds each larger model's reading against the small model's, a resolved difference whose 90% "
                "interval lies inside +-0.05 read as within it:", '',
            "| comparison | model | read at | difference | the small model's reading held? |",
            '| --- | --- | --- | --- | --- |']
    for v in (None, VARIANT):
        for site in SITES:
            what = f"{site}@{v} - {c}@{v}" if v else f"{site} - {c}, plain"
            small = None
            for i, (model, point, kind, res) in enumerate(named):
                t, holm_over, fixed = test(res, site, kind, v) if res else (None, 0, False)
                delta = res['rule'].get('delta', DELTA) if res else DELTA
                if (kind == 'fit_plus' and v) or res and not has_arm(res, site):
                    continue                     # near the fit, read plain only; not an arm of this study
                cell = (test_cell(t, holm_over, fixed, delta) if t else 'not yet' if not res else
                        'no test' if computed(res, kind) else 'not computed')
                if i == 0:
                    small, still = t and reading(t, delta), 'the reading tested'
                else:
                    pending = pending_seeds(res)
                    still = ('pending: no results yet' if pending is None else
                             'not computed: the summary has no such reading' if not computed(res, kind) else
                             held(small, t and reading(t, delta), pending))
                out.append(f"| {what} | {model} | {point} | {cell} | {still} |")
    return '\n'.join(out)


def main(argv):
    if argv in (['-h'], ['--help']):
        print(__doc__.strip().split('\n\n')[-1])
        return
    if set(argv) - {'--check'}:
        raise SystemExit(f"unknown argument(s) {' '.join(a for a in argv if a != '--check')}: "
                         "python -m study.scales [--check]")
    results = {name: load(name) for name, *_ in VIEWS}
    small = VIEWS[0][0]
    if not results[small]:
        raise SystemExit(f"results/{small}/{files.RESULTS} is missing: restore it (git checkout -- "
                         f"results/{small}) or rerun python ablate.py config/{small}.py")
    tbl = table([(model, kind, default, results[name]) for name, model, kind, default in VIEWS])
    for readme in READMES:
        with open(readme) as f:
            text = f.read()
        new = with_table(text, tbl, BEGIN, END)
        where = os.path.relpath(readme, ROOT)
        if '--check' in argv:
            if new != text:
                raise SystemExit(f"{where}'s table differs from what the results give: run python -m study.scales")
            print(f"{where}'s table matches the results")
            continue
        with rundir.writing(readme, 'the scales table', 'rerun python -m study.scales (the README is as it was)'):
            rundir.write_atomic(readme, new.encode())
        print(f"wrote the table into {where}")


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
