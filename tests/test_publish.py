"""publish/report.py, this repository's publication: the README's rows and the scales tables read each label
from its test, and --check holds every committed number to what its per-seed numbers give and each per-seed
number to its run's record, one line per number that differs, and never advises a rewrite from a number it did
not recompute. Every test here works on a copy of results/ (the committed fixture), never on results/ itself."""
import json
import os
import shutil

import pytest

from publish import report
from study import stats

RESULTS = os.path.join(report.ROOT, 'results')     # the committed results: only ever copied


@pytest.fixture
def committed(tmp_path, monkeypatch):
    """A copy of the committed summaries (each study's results.json, results.md and README.md; study_quick's run
    records too) and of results/README.md, which publish.report reads and writes in place of results/; the
    headline is not drawn."""
    for name in os.listdir(RESULTS):
        if os.path.isfile(os.path.join(RESULTS, name, 'results.json')):
            os.makedirs(tmp_path / 'results' / name)
            for f in ('results.json', 'results.md', 'README.md'):
                if os.path.exists(os.path.join(RESULTS, name, f)):
                    shutil.copy(os.path.join(RESULTS, name, f), tmp_path / 'results' / name)
    shutil.copytree(os.path.join(RESULTS, 'study_quick', 'runs'), tmp_path / 'results' / 'study_quick' / 'runs')
    shutil.copy(os.path.join(RESULTS, 'README.md'), tmp_path / report.TABLE)
    monkeypatch.setattr(report, 'ROOT', str(tmp_path))
    monkeypatch.setattr(report, 'draw_headline', lambda *a: None)
    return tmp_path


def one_line(*argv):
    with pytest.raises(SystemExit) as e:
        report.main(list(argv))
    assert isinstance(e.value.code, str) and len(e.value.code.splitlines()) == 1, e.value.code
    return e.value.code


def fake_results(ctrl_median, ctrl_pass, t):
    arm = lambda median, count: {'fit': 12, 'area': {'mean': median, 'median': median,   # noqa: E731
                                                      'per_seed': {str(s): median for s in range(1, 13)}},
                                 'extrapolates': {'count': count, 'of': 12}, 'range': {'median': 4}}
    return {'rule': {'control': 'none'},
            'arms': {'none': arm(ctrl_median, ctrl_pass), 'vpad': {**arm(ctrl_median + t['difference'], 6),
                                                                   'vs_control': {'area': {'left_out': t}}}}}


def test_verdict_rows_read_their_label_from_the_interval_and_say_where_an_arm_is_at_the_ceiling():
    t = {'difference': 0.08, 'ci95': [0.05, 0.11], 'ci90': [0.056, 0.104], 'sd': 0.047, 'p': 0.001, 'p_holm': 0.003,
         'seeds': list(range(1, 13)), 'seeds_for_power': 4}
    row, = report.rows('s', 'claim', fake_results(0.41, 3, t))
    assert '| 0.001 | 0.003 | 12 paired | higher |' in row and '+0.080 [+0.050, +0.110]' in row
    # a control whose runs all extrapolate, or whose median area is 0.97, is no ceiling: the label alone decides
    assert report.rows('s', 'claim', fake_results(0.97, 12, t))[0].endswith('| higher |')
    # an arm at the ceiling, as the summary records it (the mean areas the test is built from): said after the rest
    top = dict(t, areas={'vpad': 0.995, 'none': 0.915})
    assert report.rows('s', 'claim', fake_results(0.915, 3, top))[0].endswith('| higher, at the ceiling |')
    weak = dict(t, p=0.03, p_holm=0.09)  # Holm > 0.05, and the 90% interval [+0.056, +0.104] reaches past 0.05
    assert report.rows('s', 'claim', fake_results(0.41, 3, weak))[0].endswith(
        '| not resolved after Holm: [+0.050, +0.110] excludes 0, Holm p 0.090 |')
    small = dict(weak, difference=0.01, ci95=[-0.02, 0.04], ci90=[-0.014, 0.034])   # inside +-0.05
    assert report.rows('s', 'claim', fake_results(0.41, 3, small))[0].endswith(
        '| equivalent within +-0.05, 90% [-0.014, +0.034] |')          # the interval that decides it, quoted
    resolved = dict(small, p=0.001, p_holm=0.003, ci95=[0.002, 0.04], ci90=[0.004, 0.034],
                    areas={'vpad': 1.0, 'none': 0.99})
    assert report.rows('s', 'claim', fake_results(0.41, 3, resolved))[0].endswith(
        '| higher, within +-0.05, at the ceiling, 90% [+0.004, +0.034] |')
    # a leave-one-out that changes the decision: the seeds, named in the row
    fragile = dict(t, leave_one_out={'p_holm': [0.01, 0.07], 'survives': False, 'flips': [3, 9]})
    assert report.rows('s', 'claim', fake_results(0.41, 3, fragile))[0].endswith(
        '| higher; changes without seed 3, 9 |')
    # the row's two means are over the seeds the test pairs: a control run no arm run pairs with is left out
    res = fake_results(0.41, 3, t)
    res['arms']['none']['area']['per_seed']['13'] = 0.0
    res['arms']['none']['area']['mean'] = 0.41 * 12 / 13
    assert 'vpad vs none: 0.490 vs 0.410' in report.rows('s', 'claim', res)[0]



def test_a_study_of_snapshots_gives_claim_1_rows_then_the_sites_at_the_late_point():
    t = lambda d, p: {'difference': d, 'ci95': [d - 0.02, d + 0.02], 'ci90': [d - 0.016, d + 0.016],  # noqa: E731
                      'sd': 0.03, 'p': p, 'p_holm': p, 'seeds': list(range(1, 13))}
    at = lambda arm, area, test=None: {'arm': arm, 'point': 10000,   # noqa: E731
                                       'area': {'mean': area, 'per_seed': {str(s): area for s in range(1, 13)}},
                                       **({'vs_control': {'area': {'left_out': test}}} if test else {})}
    res = {'rule': {'control': 'none', 'families': {'sites': ['vpad'], 'weight decay': ['none_wd']}},
           'arms': {'none +1000': {**at('none', 0.4995), 'point': 1000},      # the early mean as it is, not rounded
                    'none +10000': at('none', 0.40), 'vpad +10000': at('vpad', 0.50, t(0.10, 0.001)),
                    'none_wd +10000': at('none_wd', 0.30, t(-0.10, 0.002))},
           'long': {'early': 1000, 'late': 10000, 'delta': 0.05, 'change': {'none': t(-0.10, 0.001)},
                    'change_vs_control': {'vpad': t(0.01, 0.6), 'none_wd': t(-0.10, 0.002)}}}
    rows = report.rows('study_long', ('claim 1', 'claims 3-4'), res)
    assert [r.split(' | ')[0] for r in rows] == ['| claim 1'] * 4 + ['| claims 3-4']
    assert 'none: cooled area at +1000 -> +10000, 0.499 -> 0.400, -0.100 [-0.120, -0.080] ' \
        '| 0.001 | - |' in rows[0] and rows[0].endswith('| lower |')
    assert "vpad's change against none's, +0.010" in rows[1] and rows[1].endswith(
        '| equivalent within +-0.05, 90% [-0.006, +0.026] |')
    assert 'none_wd vs none, cooled area at +10000: 0.300 vs 0.400, -0.100' in rows[3] and rows[3].endswith('| lower |')
    assert 'vpad vs none, cooled area at +10000: 0.500 vs 0.400, +0.100' in rows[4] and rows[4].endswith('| higher |')


def test_study_scalings_weight_decay_family_is_corrected_over_both_its_tests(committed):
    """study_scaling's config pre-registered one weight decay family of two tests, none_wd against none at +4000
    and its change from +1000 against none's; its summary now corrects them together (Holm over 2), where
    each was corrected alone before: none_wd - none, p 0.036, is not resolved after Holm."""
    res = report.load('study_scaling')
    t = res['arms']['none_wd +4000']['vs_control']['area']['left_out']
    change = res['long']['change_vs_control']['none_wd']
    assert [t['p_holm'], change['p_holm']] == stats.holm([t['p'], change['p']])
    assert stats.fmt_p(t['p_holm']) == '0.071' and stats.verdict(t, 0.05).startswith('not resolved after Holm')
    assert stats.decision(res['rule_change']['labels']['none_wd +4000 vs none +4000'][0]) == 'lower'   # the old rule's


def committed_tests():
    """(study, path, test) of every paired test in the committed summaries (their copies)."""

    def walk(o, path):
        if isinstance(o, dict):
            if 'per_seed' in o and 'seeds' in o and 'sd' in o:
                yield path, o
            for k, v in o.items():
                yield from walk(v, f"{path}/{k}")
        elif isinstance(o, list):
            for i, v in enumerate(o):
                yield from walk(v, f"{path}[{i}]")
    for name in sorted(os.listdir(os.path.join(report.ROOT, 'results'))):
        if os.path.isfile(os.path.join(report.ROOT, 'results', name, 'results.json')):
            for path, t in walk(report.load(name), ''):
                yield name, path, t


def test_every_committed_label_agrees_with_its_own_tests_interval(committed):
    """A property of the committed summaries, whatever their numbers: a 95% interval excludes 0 exactly where the
    unadjusted p is <= 0.05 (the interval is that test inverted), 'higher' / 'lower' never stands beside one that
    includes 0, and 'within' / 'equivalent' beside a 90% interval inside +-delta; and the README's verdict table
    quotes no 'higher' / 'lower' beside an interval that includes 0. (That every number is what the per-seed
    numbers give, and every table what the summaries give, is `python -m publish.report --check`'s, which .ci/run
    runs.)"""
    excludes_0 = lambda ci: ci[0] is not None and ci[0] > 0 or ci[1] is not None and ci[1] < 0   # noqa: E731
    n = 0
    for name, path, t in committed_tests():
        if t['ci95'] is None:
            continue
        n += 1
        assert (t['p'] <= 0.05) == excludes_0(t['ci95']), (name, path)
        text = t.get('label') or ''
        if text.startswith(('higher', 'lower')):
            assert excludes_0(t['ci95']) and text.startswith('higher') == ((t['ci95'][0] or 0) > 0), (name, path)
        if stats.within(text):
            assert max(-t['ci90'][0], t['ci90'][1]) < 0.05, (name, path)
    assert n > 250
    with open(os.path.join(report.ROOT, report.TABLE)) as f:
        rows = [r for r in f.read().split(report.VERDICTS[0])[1].split(report.VERDICTS[1])[0].splitlines()
                if r.startswith('| ') and 'paired |' in r]
    for row in rows:
        cells = [c.strip() for c in row.strip('|').split('|')]
        effect, verdict = cells[2], cells[6]
        lo, hi = (float(x) for x in effect.rsplit('[', 1)[1].rstrip(']').split(', '))
        if verdict.startswith('higher'):
            assert lo > 0, row
        if verdict.startswith('lower'):
            assert hi < 0, row
    assert len(rows) > 30


def test_a_typo_or_help_never_rewrites_a_readme(committed):
    """A typo or --help, run on a copy of results/: the README is as it was (and results/ itself is never touched)."""
    with open(os.path.join(report.ROOT, report.TABLE)) as f:
        readme = f.read()
    with pytest.raises(SystemExit, match='unknown argument'):     # a typo must not rewrite the README
        report.main(['--chek'])
    report.main(['--help'])                                       # nor does asking how to use it
    with open(os.path.join(report.ROOT, report.TABLE)) as f:
        assert f.read() == readme


def scale_results(plain, yarn, seeds=10, pending=(), fixed=True):
    """A study at +4000 with arms none, pre_linear and vpad: plain and yarn areas per arm, each site's
    test plain and under yarn; yarn's as a fixed comparison (with a different one at +1000) or the arm's own."""
    t = lambda d, p: {'difference': d, 'ci95': [d - 0.02, d + 0.02], 'ci90': [d - 0.016, d + 0.016],  # noqa: E731
                      'sd': 0.03, 'p': p, 'p_holm': p, 'seeds': list(range(seeds))}
    area = lambda m: {'mean': m, 'per_seed': {str(s): m for s in range(seeds)}}   # noqa: E731
    arms = {f"{a} +{k}": {'arm': a, 'point': k, 'pending_seeds': list(pending), 'area': area(plain[a] - (k == 1000)),
                          'variants': {'yarn': {'area': area(yarn[a])}}} for a in plain for k in (1000, 4000)}
    comparisons = []
    for a, (dp, pp, dy, py) in {'pre_linear': (0.10, 0.002, 0.0, 0.9), 'vpad': (0.13, 0.002, 0.06, 0.002)}.items():
        if a not in plain:
            continue
        arms[f"{a} +4000"]['vs_control'] = {'area': {'left_out': t(dp, pp)}}
        if fixed:
            comparisons += [{'point': k, 'family': 'yarn', 'a': f"{a}@yarn", 'b': 'none@yarn',
                             'left_out': t(dy - (k == 1000), py)} for k in (1000, 4000)]
        else:
            arms[f"{a} +4000"]['variants']['yarn']['vs_control'] = {'family': 'sites', 'left_out': t(dy, py)}
    return {'rule': {'control': 'none', 'delta': 0.05, 'families': {'sites': ['pre_linear', 'vpad']},
                     'comparisons': {'yarn': [[f"{a}@yarn", 'none@yarn'] for a in ('pre_linear', 'vpad')]}},
            'long': {'early': 1000, 'late': 4000}, 'arms': arms, 'comparisons': comparisons}


def test_the_scales_table_reads_each_study_at_its_late_point_and_says_which_verdicts_held():
    plain, yarn = {'none': 0.40, 'pre_linear': 0.50, 'vpad': 0.53}, {'none': 0.99, 'pre_linear': 1.0, 'vpad': 1.0}
    small = scale_results(plain, yarn, seeds=12, fixed=False)
    large = scale_results({'none': 0.80, 'pre_linear': 0.80, 'vpad': 0.93}, yarn)
    large['arms']['pre_linear +4000']['vs_control']['area']['left_out'].update(
        difference=0.0, ci95=[-0.02, 0.02], ci90=[-0.016, 0.016], p=0.9, p_holm=0.9)
    views = lambda res: [('small', 'late', small), ('large', 'late', res)]   # noqa: E731
    tbl = report.scales_table(views(large)).split('\n')
    assert '| large | fit + 4000 | 0.800 (10) | 0.990 (10) | 0.800 (10) | 1.000 (10) | 0.930 (10) | 1.000 (10) |' in tbl
    rows = {tuple(r.split(' | ')[:2]): r for r in tbl if r.startswith('| ') and ' - ' in r.split(' | ')[0]}
    assert rows['| pre_linear - none, plain', 'small'].endswith(
        '+0.100 [+0.080, +0.120], Holm 0.002 over 2, 12 seeds: higher | the reading tested |')
    assert rows['| pre_linear - none, plain', 'large'].endswith(
        '| +0.000 [-0.020, +0.020], Holm 0.900 over 2, 10 seeds: equivalent within +-0.05 | '
        'did not hold: higher -> within +-0.05 |')
    assert rows['| vpad - none, plain', 'large'].endswith('| held: higher |')
    # the small study did not fix yarn's test: its arm's own, marked secondary; the large one's fixed comparison
    # at +4000 (not the one at +1000, 1 lower)
    assert rows['| vpad@yarn - none@yarn', 'small'].endswith('higher (secondary) | the reading tested |')
    assert rows['| vpad@yarn - none@yarn', 'large'].endswith(
        '+0.060 [+0.040, +0.080], Holm 0.002 over 2, 10 seeds: higher | held: higher |')
    assert rows['| pre_linear@yarn - none@yarn', 'large'].endswith('| held: within +-0.05 |')
    pending = report.scales_table(views(scale_results(plain, yarn, pending=[29, 30])))
    assert pending.count('pending: 2 seed(s) still to run') == 4


def test_the_scales_table_reads_a_study_at_fixed_steps_at_its_late_step_and_near_each_runs_fit():
    """A study at fixed steps with arms none and vpad: read at its late step, and near each run's fit + k
    (plain only); pre_linear, not one of its arms, has no row there."""
    plain, yarn = {'none': 0.40, 'pre_linear': 0.50, 'vpad': 0.53}, {'none': 0.99, 'pre_linear': 1.0, 'vpad': 1.0}
    small = scale_results(plain, yarn, seeds=12, fixed=False)
    fixed = scale_results({'none': 0.55, 'vpad': 0.70}, yarn)
    fixed['long'] = {'early': 1000, 'late': 4000, 'fixed_steps': True, 'fit_plus': {
        'offset': 4000, 'window': 1500, 'area': {'none': {'1': 0.5, '2': 0.7}, 'vpad': {'1': 0.6, '3': 0.9}},
        'vs_control': {'vpad': {'difference': -0.3, 'ci95': None, 'ci90': None, 'sd': None, 'p': 1.0, 'p_holm': 1.0,
                                'seeds': [1], 'family': 'sites'}}}}
    tbl = report.scales_table([('small', 'late', small), ('big', 'late', fixed), ('big', 'fit_plus', fixed)])
    lines = tbl.split('\n')
    assert '| big | at 4000 | 0.550 (10) | 0.990 (10) | - | - | 0.700 (10) | 1.000 (10) |' in lines
    assert '| big | near fit + 4000 | 0.600 (2) | - | - | - | 0.750 (2) | - |' in lines
    assert '| vpad - none, plain | big | near fit + 4000 | -0.300, Holm 1.000 over 1, 1 seeds: not resolved: one ' \
           'seed (secondary) | not confirmed: higher -> not resolved |' in lines
    assert not any(r.startswith('| pre_linear') and '| big |' in r for r in lines)
    assert not any(r.startswith('| vpad@yarn') and 'near fit' in r for r in lines)
    del fixed['long']['fit_plus']             # summarized without the reading: not computed, not "no test"
    lines = report.scales_table([('small', 'late', small), ('big', 'fit_plus', fixed)]).split('\n')
    assert '| big | near fit + k | not computed | - | - | - | not computed | - |' in lines
    assert '| vpad - none, plain | big | near fit + k | not computed | not computed: the summary has no such ' \
           'reading |' in lines


def test_the_scales_table_reads_a_negligible_resolved_difference_as_within_the_margin():
    ceiling = {'difference': 0.001, 'ci95': [0.0005, 0.0015], 'ci90': [0.0006, 0.0014], 'sd': 0.0008, 'p': 0.001, 'p_holm': 0.002,
               'seeds': list(range(12))}           # resolved, but a 90% interval far inside +-0.05: both at 1.00
    assert stats.verdict(ceiling, 0.05) == 'higher, within +-0.05' and report.reading(ceiling, 0.05) == 'within +-0.05'
    ceiling['areas'] = {'vpad@yarn': 1.0, 'none@yarn': 0.999}
    assert stats.verdict(ceiling, 0.05) == 'higher, within +-0.05, at the ceiling'
    assert report.reading(ceiling, 0.05) == 'within +-0.05'
    assert report.reading(dict(ceiling, difference=0.1, ci95=[0.08, 0.12], ci90=[0.084, 0.116]), 0.05) == 'higher'
    one = {'difference': 0.2, 'ci95': None, 'ci90': None, 'sd': None, 'p': 1.0, 'p_holm': 1.0, 'seeds': [21]}
    assert report.reading(one, 0.05) == 'not resolved'
    assert report.test_cell(one, 2, True, 0.05) == '+0.200, Holm 1.000 over 2, 1 seeds: not resolved: one seed'
    assert report.held('higher', None, 0) == 'no paired test at the larger scale'
    assert report.held('not resolved', 'not resolved', 0) == 'both not resolved'
    assert report.held('higher', 'not resolved', 0) == 'not confirmed: higher -> not resolved'
    assert report.held('not resolved', 'higher', 0) == 'did not hold: not resolved -> higher'


def test_the_readme_rewrite_is_atomic_and_a_damaged_or_missing_summary_is_refused(committed, monkeypatch):
    """A write that fails (a full disk) leaves the README as it was and ends in one line; markers in the wrong
    order, a results.json cut short, empty or missing are one line naming what to fix, and no table is written
    over from less (a missing summary rewrote both scales tables to 'not yet', exit 0)."""
    import errno
    monkeypatch.setattr(report, 'mismatches', lambda *a: [])       # each summary's numbers taken as checked
    readmes = {p: (committed / p).read_text() for p in (report.TABLE, 'results/study_scale2/README.md')}

    def full(path, data):
        raise OSError(errno.ENOSPC, 'No space left on device')
    with monkeypatch.context() as m:
        m.setattr(report.rundir, 'write_atomic', full)
        assert 'no space left on the device' in one_line()
    begin, end = report.VERDICTS
    (committed / report.TABLE).write_text(readmes[report.TABLE].replace(begin, '@@').replace(end, begin)
                                          .replace('@@', end))
    assert 'in that order' in one_line('--check')
    (committed / report.TABLE).write_text(readmes[report.TABLE])
    cut = committed / 'results' / 'study_scaling' / 'results.json'
    text = cut.read_text()
    cut.write_text(text[:len(text) // 2])
    assert one_line('--check').startswith(f"{cut} is not readable JSON") and 'git checkout' in one_line()
    cut.write_text('{}')
    assert one_line() == ("results/study_scaling/results.json: it is empty; restore it (git checkout -- "
                          "results/study_scaling/results.json) or rerun python ablate.py config/study_scaling.py")
    os.remove(cut)
    assert one_line().startswith('results/study_scaling/results.json is missing: restore it')
    assert {p: (committed / p).read_text() for p in readmes} == readmes


def quick(committed):
    """study_quick's copied summary and its vpad arm's tests against none: (path, summary, vpad's vs_control)."""
    path = committed / 'results' / 'study_quick' / 'results.json'
    res = json.loads(path.read_text())
    return path, res, res['arms']['vpad']['vs_control']


def checked(*names):
    """--check over these studies: the lines it ends with, [] where it passes."""
    try:
        report.check(list(names))
    except SystemExit as e:
        return e.code.splitlines()
    return []


@pytest.mark.parametrize('edit, says', [
    (lambda res, v: v['fisher'].update(p=0.010), 'vs_control/fisher/p is 0.01, its per-seed numbers give 0.006993'),
    (lambda res, v: v['fisher'].update(p_holm=0.5), 'vs_control/fisher/p_holm is 0.5, its per-seed numbers give'),
    (lambda res, v: v['fisher'].update(smallest_possible_p=0.2),
     'vs_control/fisher/smallest_possible_p is 0.2, its per-seed numbers give 0.000155'),
    (lambda res, v: v['fisher']['table'][0].__setitem__(0, 7), 'vs_control/fisher/table[0][0] is 7, its per-seed'),
    (lambda res, v: v['permutation'].update(p=0.5), 'permutation/p is 0.5, its per-seed numbers give 0.0013'),
    (lambda res, v: v['power'].update(seeds_per_arm=5), 'power/seeds_per_arm is 5, its per-seed numbers give 8'),
    (lambda res, v: res['arms']['vpad']['extrapolates'].update(count=7), 'arms/vpad/extrapolates/count is 7, its'),
    (lambda res, v: res['arms']['none']['area']['per_seed'].update({'41': 0.5}), 'arms/none/area/per_seed/41 is 0.5'),
    (lambda res, v: v['area']['left_out'].update(difference=None), 'left_out/difference is null, its per-seed'),
    (lambda res, v: res['arms']['vpad']['tasks']['mqar']['16']['per_seed'].update({'41': 0.5}),
     'arms/vpad/tasks/mqar/16/per_seed/41 is 0.5, its record'),
    (lambda res, v: res['arms']['none']['steps_to_fit']['per_seed'].update({'43': 1000}),
     'arms/none/steps_to_fit/per_seed/43 is 1000, its record'),
    (lambda res, v: v.pop('paired'), "is not a summary this code reads (KeyError: 'paired')"),
    (lambda res, v: v['area']['left_out'].update(difference='abc'), 'left_out/difference is "abc", not a number'),
], ids=['fisher p', 'fisher Holm p', 'smallest possible p', 'fisher table', 'permutation p', 'seeds per arm',
        'extrapolates', 'an area', 'a difference', 'a per-seed accuracy', 'a fit step', 'a shape', 'not a number'])
def test_check_names_every_committed_number_its_records_and_per_seed_numbers_do_not_give(committed, edit, says):
    """One number of study_quick's committed summary edited: --check names it in a line that ends in the way back
    (restore it, or rerun the study, which trains nothing: its records hold the runs), never in a rewrite of the
    summary from its own numbers."""
    path, res, v = quick(committed)
    edit(res, v)
    path.write_text(json.dumps(res))
    lines = checked('study_quick')
    assert any(says in line for line in lines), lines
    assert all(line.startswith('results/study_quick/results.json') and 'git checkout -- results/study_quick' in line
               and 'python ablate.py config/study_quick.py' in line and 'publish.report' not in line for line in lines)


def test_check_says_one_line_per_mismatch_and_a_rewrite_recomputes_every_number_it_writes(committed):
    """Two numbers edited: two lines. The rewrite a changed results.md is advised (python -m publish.report
    <its results.json>) writes each number again from the per-seed numbers, so it never writes "0.010 (1.000)" from
    an edited Fisher p, and it refuses a summary whose per-seed numbers its records do not give."""
    path, res, v = quick(committed)
    md = path.parent / 'results.md'
    committed_md = md.read_text()
    v['fisher']['p'], v['permutation']['p'] = 0.010, 0.5
    path.write_text(json.dumps(res))
    md.write_text('stale\n')
    assert len(checked('study_quick')) == 2
    report.main([str(path)])
    assert md.read_text() == committed_md and checked('study_quick') == []
    assert json.loads(path.read_text())['arms']['vpad']['vs_control']['fisher']['p'] == pytest.approx(0.006993, 1e-3)
    md.write_text(committed_md + 'an edit\n')           # a results.md its numbers do not give: the rewrite is advised
    assert checked('study_quick') == ['results/study_quick/results.md differs from what its results.json gives: '
                                      'python -m publish.report results/study_quick/results.json writes it again']
    res = json.loads(path.read_text())
    res['arms']['vpad']['tasks']['mqar']['16']['per_seed']['41'] = 0.5
    path.write_text(json.dumps(res))
    with pytest.raises(SystemExit, match='its record .* gives'):
        report.main([str(path)])
