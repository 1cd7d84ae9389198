"""
This repository's publication, apart from the engine (study/, which names no study): the studies it reports
and the claim each tests, the tables its READMEs hold (results/README.md's verdict table, the two scales in
results/study_scale*/README.md) and its headline figure, all written from the committed summaries; and the
check that holds every committed number to what its per-seed numbers give, and each per-seed number to its
run's committed record.

    python -m publish.report               # the README tables and results/headline.png, from results/*/results.json
    python -m publish.report --check       # one line per committed number, results.md or README table that
                                           # differs from what the records and per-seed numbers give; exit 1 if any
    python -m publish.report results/<study>/results.json ...   # its derived numbers and results.md again, from
                                                                # its per-seed numbers once its records agree
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import copy
import json
import os
import statistics
import sys

from base import rundir
from publish.headline import draw_headline
from study import files
from study.files import read_summary
from study.outcomes import rederive
from study.records import disagreements
from study.stats import (CHANGE, DELTA, at_point, by_arm_and_point, decision, family_arms, fixed_steps, flips_text,
                         fmt_interval, fmt_p, point_text, range_text, second_analysis, verdict, within)
from study.tables import fmt_difference, format_markdown, second_name, side

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join('results', 'README.md')   # the table's file, from ROOT; its links are relative to results/
HEADLINE = os.path.join('results', 'headline.png')    # study_long's picture: each run cooled early and late
VERDICTS = '<!-- verdicts: written by `python -m publish.report` -->', '<!-- /verdicts -->'
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
           ('study_sites_mamba2', '5. the same on Mamba2'),
           ('study_mamba2_states', {'primary': "5, the recurrent fix: training from carried states, and a site "
                                               "added to it (6000 steps; carried runs fit later)",
                                    'sites': '5 on fresh seeds (71-80), at 6000 steps'}),
           ('study_mamba2_practice', {'primary': '5 on top of each Mamba2 fix (carried states, dt at inference), '
                                                 'every run counted, area over 1x..1024x',
                                      'fixes': 'the two fixes, each against the control'})]
EXTRA = ['study_scale']   # studies checked for mixed machines, not in the table
LONG = 'study_long'       # the headline figure's study
TABLED = [s for s, _ in STUDIES] + EXTRA     # every study the README tables read


# -----------------------------------------------------------------------------
# results/README.md's verdict table

def paired_row(claim, link, what, t, delta, holm_p=True, t0=None, fixed=False):
    """One row of a paired comparison: its effect, raw p, Holm p, seeds and the label its interval gives,
    with the 90% interval where it decides words of the label (equivalent, or within +-delta), and
    the never-fit-as-0 analysis (t0; at fixed steps, fit runs only) where its label differs."""
    text = verdict(t, delta)
    if within(text):
        text += f", 90% {fmt_interval(t['ci90'])}"
    text += flips_text(t)
    if t0 and decision(verdict(t0, delta)) != decision(verdict(t, delta)):
        text += f"; {second_name(fixed)}: {verdict(t0, delta)}"
    return (f"| {claim} | {link} | {what}, {fmt_difference(t)} | {fmt_p(t['p'])} | "
            f"{fmt_p(t['p_holm']) if holm_p else '-'} | {len(t['seeds'])} paired | {text} |")


def means(a, b, t):
    """'0.577 vs 0.602': two arms' mean areas over the seeds their paired test t counts (not over every run of
    each, which may be other seeds: a never-fit run is in one arm's mean and in no pair)."""
    seeds = [str(s) for s in t['seeds']]
    return ' vs '.join(f"{statistics.mean(x['area']['per_seed'][s] for s in seeds):.3f}" for x in (a, b))


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
                             f"{a} vs {c}, cooled area {at_point(late, fixed)}: {means(area[a], area[c], t)}", t, delta,
                             t0=tests.get(second_analysis(fixed)), fixed=fixed)
            (sites if family == 'sites' else claim_1).append(row)
    return claim_1 + sites


def family_rows(name, claims, res):
    """A study with families and comparisons of its own (claims: {family: claim}): each primary test at its
    primary point (the late snapshot), family by family in the order of claims: an arm against the control,
    a change the family names (early -> late, against the control's), or a comparison a - b (each side an
    arm's area, plain or under a variant, or a difference of two)."""
    link, delta = f"[{name}]({name}/README.md)", res['rule'].get('delta', DELTA)
    point, fixed = res.get('long', {}).get('late'), fixed_steps(res)
    at = by_arm_and_point(res['arms'])
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
                        + f": {means(at[arm, point], at[c, point], tests['left_out'])}")
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
        what = f"{n} vs {control}: {means(a, ctrl, t)}"
        out.append(paired_row(claim, link, what, t, delta, t0=tests.get('never_fit_as_0')))
    return out


def verdict_table(studies):
    """studies: {name: results}. -> the markdown of the verdict table"""
    lines = ['| claim | study | effect: area (mean accuracy over 1x..64x) against the control\'s, paired difference '
             '[95% CI] | paired p | Holm | seeds | verdict |',
             '| --- | --- | --- | --- | --- | --- | --- |']
    last = None
    for name, claim in STUDIES:
        for row in rows(name, claim, studies[name]):
            claim_cell, study_cell, rest = row.split(' | ', 2)
            # the claim and the study once, on the first of their rows
            lines.append('| | | ' + rest if (claim_cell, study_cell) == last else row)
            last = claim_cell, study_cell
    return '\n'.join(lines)


def mixed_machines(studies):
    """Studies whose paired runs of one seed trained on different machines (results.json's 'machines'):
    a pair broken across CPUs compares the machines as well as the arms. One line per study."""
    out = []
    for name, res in studies.items():
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


# -----------------------------------------------------------------------------
# the scales side by side

# the views, small first (its verdicts are the ones tested): (study, model, which point); 'late': the study's
# late point, 'fit_plus': its runs read near their own fit + k (a study at fixed steps, beside a fit-relative one)
VIEWS = [('study_scaling', '2 layers x 64', 'late'), ('study_scale', '4 layers x 128', 'late'),
         ('study_scale2', '4 layers x 128, rope_theta 1e3', 'late'),
         ('study_scale2', '4 layers x 128, rope_theta 1e3', 'fit_plus')]
SITES = ['pre_linear', 'vpad']
VARIANT = 'yarn'
SCALES = '<!-- scales: written by `python -m publish.report` -->', '<!-- /scales -->'
SCALED = ['study_scale', 'study_scale2']       # the READMEs that hold the scales table


def fit_plus_of(res):
    """A study's reading near each run's fit + k (outcomes.fit_plus), or {} where its summary has none."""
    return res.get('long', {}).get('fit_plus') or {}


def has_arm(res, arm):
    return arm in {a.get('arm') for a in res['arms'].values()}


def point_of(res, kind):
    """Where a view reads its study, as the tables name it: 'fit + 4000', 'at 16000', 'near fit + 4000'."""
    L = res['long']
    if kind == 'fit_plus':
        return f"near fit + {fit_plus_of(res)['offset']}" if fit_plus_of(res) else 'near fit + k'
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


def site_test(res, site, kind='late', variant=None):
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


def area_cell(res, arm, kind, variant):
    if kind == 'fit_plus' and variant or not has_arm(res, arm):
        return '-'                      # near the fit, read plain only; not an arm of the study
    if kind == 'fit_plus' and not fit_plus_of(res):
        return 'not computed'           # summarized without fit_plus_reading
    mean, seeds = area(res, arm, kind, variant)
    return 'no run' if mean is None else f"{mean:.3f} ({seeds})"


def test_cell(t, holm_over, fixed, delta):
    return (f"{fmt_difference(t)}, Holm {fmt_p(t['p_holm'])} over {holm_over}, {len(t['seeds'])} seeds: "
            f"{verdict(t, delta)}{flips_text(t)}" + ('' if fixed else ' (secondary)'))


def scales_table(views):
    """views: [(model, kind, results)], small first. -> the markdown of both tables."""
    c = views[0][2]['rule']['control']
    named = [(model, point_of(res, kind), kind, res) for model, kind, res in views]
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
                if (kind == 'fit_plus' and v) or not has_arm(res, site):
                    continue                     # near the fit, read plain only; not an arm of this study
                t, holm_over, fixed = site_test(res, site, kind, v)
                delta, computed = res['rule'].get('delta', DELTA), kind != 'fit_plus' or fit_plus_of(res)
                cell = test_cell(t, holm_over, fixed, delta) if t else 'no test' if computed else 'not computed'
                pending = len({s for a in res['arms'].values() for s in a.get('pending_seeds', [])})
                if i == 0:
                    small, still = t and reading(t, delta), 'the reading tested'
                else:
                    still = (held(small, t and reading(t, delta), pending) if computed else
                             'not computed: the summary has no such reading')
                out.append(f"| {what} | {model} | {point} | {cell} | {still} |")
    return '\n'.join(out)


# -----------------------------------------------------------------------------
# the committed summaries, read and checked

def load(name):
    """A committed study's results.json (read_summary)."""
    path = os.path.join(ROOT, 'results', name, files.RESULTS)
    shown = os.path.relpath(path, ROOT)
    return read_summary(path, shown, f"restore it (git checkout -- {shown}) or rerun python ablate.py config/{name}.py")


def differences(a, b, path=''):
    """[(path, a's value, b's value)] wherever two JSON values differ, floats to 10 significant digits (their last
    bits are a library's)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in dict.fromkeys([*a, *b]) for d in differences(a.get(k), b.get(k), f"{path}/{k}".lstrip('/'))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    same = (f"{a:.10g}" == f"{b:.10g}" if all(isinstance(x, float) for x in (a, b)) else a == b)
    return [] if same else [(path, a, b)]


def mismatches(name, res):
    """One line for each per-seed number of a committed summary that its run's record does not give, else for
    each number that its per-seed numbers do not give (rederive), else for a results.md that the summary does not
    give; each line ends in what to do."""
    path = os.path.join('results', name, files.RESULTS)
    rerun = f"restore it (git checkout -- {path}) or rerun python ablate.py config/{name}.py"
    lines = [f"{line}: {rerun}" for line in disagreements(res, os.path.join(ROOT, path), path)]
    if lines:
        return lines
    try:
        again = rederive(copy.deepcopy(res))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:    # a key gone, a shape changed
        return [f"{path} is not a summary this code reads ({type(e).__name__}: {rundir.first_line(e)}): {rerun}"]
    lines = [f"{path}: {where} is {json.dumps(a)[:60]}, its per-seed numbers give {json.dumps(b)[:60]}: {rerun}"
             for where, a, b in differences(res, again)]
    md = os.path.join('results', name, files.RESULTS_MD)
    with open(os.path.join(ROOT, md)) as f:
        if not lines and f.read() != format_markdown(res):
            lines.append(f"{md} differs from what its results.json gives: python -m publish.report {path} "
                         f"writes it again")
    return lines


def readme_tables(studies):
    """{README path from ROOT: (its text now, its text with the tables the results give)}"""
    out = {}
    scales = scales_table([(model, kind, studies[name]) for name, model, kind in VIEWS])
    for path, tbl, markers in [(TABLE, verdict_table(studies), VERDICTS)] + [
            (os.path.join('results', name, 'README.md'), scales, SCALES) for name in SCALED]:
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
        out[path] = text, with_table(text, tbl, *markers)
    return out


def with_table(readme, tbl, begin, end):
    """readme with tbl between its markers (begin, end), which must be there, in that order."""
    if begin not in readme or end not in readme or readme.index(end) < readme.index(begin):
        raise SystemExit(f"the README needs its table's markers, {begin} then {end}, in that order: put them "
                         f"around the table")
    head, rest = readme.split(begin, 1)
    return head + begin + '\n' + tbl + '\n' + end + rest.split(end, 1)[1]


def check(names):
    """--check: every committed summary (mismatches), then the README tables against what the summaries give:
    one line per mismatch, and exit 1 if there is any."""
    lines, studies = [], {}
    for name in names:
        try:
            studies[name] = load(name)
        except SystemExit as e:
            lines.append(str(e.code))
            continue
        lines += mismatches(name, studies[name])
    if not lines and all(n in studies for n in TABLED):
        for path, (text, new) in readme_tables(studies).items():
            if new != text:
                lines.append(f"{path}'s table differs from what the results give: python -m publish.report writes it")
    if lines:
        raise SystemExit('\n'.join(lines))
    print(f"{len(studies)} summaries match their records and per-seed numbers, their results.md and the README "
          f"tables too")
    for line in mixed_machines({name: studies[name] for name in TABLED if name in studies}):
        print(f"warning: {line}")


def rewrite(paths):
    """python -m publish.report results/<study>/results.json ...: each one's derived numbers from its per-seed
    numbers (once its run records, where it keeps them, agree with those), and results.md beside it."""
    for path in paths:
        fix = f"restore it (git checkout -- {path}) or rerun its study"
        results = read_summary(path, path, fix)
        wrong = disagreements(results, path, path)
        if wrong:
            raise SystemExit('\n'.join(f"{line}: {fix}" for line in wrong))
        rederive(results)
        out = os.path.join(os.path.dirname(path), files.RESULTS_MD)
        with rundir.writing(out, 'the summary', 'rerun this command'):
            rundir.write_atomic(path, json.dumps(results, indent=1).encode())
            rundir.write_atomic(out, format_markdown(results).encode())
        print(f"wrote {path} and {out}")


def main(argv):
    if any(a in ('-h', '--help') for a in argv):
        print(__doc__.strip().split('\n\n')[-1])
        return
    if any(a.startswith('-') and a != '--check' for a in argv) or '--check' in argv and len(argv) > 1:
        raise SystemExit(f"unknown argument(s) {' '.join(argv)}: python -m publish.report [--check], or python -m "
                         f"publish.report results/<study>/results.json ...")
    if argv and argv != ['--check']:
        return rewrite(argv)
    names = list(dict.fromkeys(TABLED))
    if argv == ['--check']:      # every committed study's summary, and the README tables of those they name
        names += sorted(n for n in os.listdir(os.path.join(ROOT, 'results')) if n not in names
                        and os.path.isfile(os.path.join(ROOT, 'results', n, files.RESULTS)))
        return check(names)
    studies = {name: load(name) for name in names}
    wrong = [line for name, res in studies.items() for line in mismatches(name, res)]
    if wrong:                    # no table is written from a summary that --check would refuse
        raise SystemExit('\n'.join(wrong))
    for path, (text, new) in readme_tables(studies).items():
        with rundir.writing(os.path.join(ROOT, path), 'a README table', f'rerun python -m publish.report ({path} is as '
                                                                          f'it was)'):
            rundir.write_atomic(os.path.join(ROOT, path), new.encode())
        print(f"wrote the tables of {path}")
    draw_headline(studies[LONG], os.path.join(ROOT, HEADLINE))


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
