"""study/stats.py against reference values computed once with scipy 1.17.1 / statsmodels 0.15.0 in a
throwaway virtualenv (scipy is not a dependency); the expressions that gave them are beside each."""
import math
import os

import pytest

from study import stats


@pytest.mark.parametrize('table,p', [
    ([[3, 0], [0, 3]], 0.10000000000000002),          # scipy.stats.fisher_exact(table).pvalue
    ([[8, 2], [1, 5]], 0.034965034965034975),
    ([[1, 9], [11, 3]], 0.0027594561852200836),
    ([[6, 2], [1, 4]], 0.10256410256410256),
    ([[4, 1], [0, 3]], 0.14285714285714288),
    ([[2, 3], [3, 2]], 1.0),
    ([[0, 5], [0, 3]], 1.0),
])
def test_fisher_exact_matches_scipy(table, p):
    assert stats.fisher_exact(*table[0], *table[1]) == pytest.approx(p, rel=1e-12)


def test_smallest_fisher_p_is_the_floor_of_small_tables():
    # 3 vs 3 runs: even 3/3 vs 0/3 gives p = 0.1 (above); 4 vs 4: 2 / C(8, 4) = 0.0286
    assert stats.smallest_fisher_p(3, 3) == pytest.approx(0.1)
    assert stats.smallest_fisher_p(4, 4) == pytest.approx(2 / 70)


@pytest.mark.parametrize('k,n,lo,hi', [
    (0, 3, 0.0, 0.5614970317550454),               # scipy.stats.binomtest(k, n).proportion_ci(method='wilson')
    (2, 3, 0.20765960080204782, 0.9385080552796038),
    (7, 10, 0.39677814746114526, 0.892208732593699),
    (3, 3, 0.4385029682449546, 1.0),
])
def test_wilson_matches_scipy(k, n, lo, hi):
    assert stats.wilson(k, n) == pytest.approx([lo, hi], abs=1e-12)
    assert stats.wilson(0, 0) is None


def test_holm_on_a_known_vector():
    # statsmodels.stats.multitest.multipletests(ps, method='holm')[1]; by hand: sorted 0.005*4, 0.01*3,
    # 0.03*2, then 0.04*1 = 0.04 raised to the running maximum 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.2, 0.5, 0.01]) == pytest.approx([0.4, 0.5, 0.03])
    assert stats.holm([]) == []


def test_t_interval_matches_scipy():
    # scipy.stats.t.ppf(0.975, df) rounded to 3 places is the table; past df 30 a Cornish-Fisher expansion
    assert stats.T_QUANTILES[0.975][0] == 12.706 and stats.T_QUANTILES[0.975][29] == 2.042
    assert stats.T_QUANTILES[0.95][0] == 6.314 and stats.T_QUANTILES[0.95][29] == 1.697    # scipy t.ppf(0.95, df)
    mean, ci = stats.mean_ci([0.62, 0.91, 0.75])
    # scipy.stats.t.interval(0.95, 2, loc=mean, scale=scipy.stats.sem(xs)) = (0.39916, 1.12084); clipped at 1
    assert mean == pytest.approx(0.76) and ci == pytest.approx([0.39916, 1.0], abs=1e-3)
    # scipy.stats.t.interval(0.90, 2, ...) = (0.515115, 1.004885), unclipped for a difference
    assert stats.mean_ci([0.62, 0.91, 0.75], clip=False, level=0.90)[1] == pytest.approx([0.515115, 1.004885], abs=1e-3)
    assert stats.mean_ci([0.5]) == (0.5, None) and stats.mean_ci([]) == (None, None)
    xs = [0.1 * (i % 7) for i in range(61)]                       # df 60: scipy t.ppf(0.975, 60) = 2.000298
    m, sd = stats.mean_std(xs)
    assert stats.mean_ci(xs)[1][0] == pytest.approx(m - 2.000298 * sd / math.sqrt(61), abs=1e-5)
    # t.ppf(0.95, 60)
    assert stats.mean_ci(xs, level=0.90)[1][0] == pytest.approx(m - 1.670649 * sd / math.sqrt(61), abs=1e-5)


def test_pearson_and_its_fisher_z_interval_match_scipy():
    # scipy.stats.pearsonr(x, y): statistic 0.9969028, confidence_interval(0.95) (0.9706172, 0.9996774)
    r, ci, n = stats.pearson([1, 2, 3, 4, 5, 6], [2.1, 3.9, 6.2, 7.8, 10.5, 11.7])
    assert (r, n) == (pytest.approx(0.9969028, abs=1e-6), 6) and ci == pytest.approx([0.9706172, 0.9996774], abs=1e-6)
    assert stats.pearson([1, 2], [3, 4]) == (None, None, 2) and stats.pearson([1, 1, 1], [1, 2, 3])[0] is None


@pytest.mark.parametrize('d, holm_of, expected', [
    ([0.09, 0.11, 0.10, 0.12, 0.08, 0.10, 0.09, 0.11], 1, 'higher'),           # every seed up: p = 2/256
    ([-0.09, -0.11, -0.10, -0.12, -0.08, -0.10, -0.09, -0.11], 3, 'lower'),    # Holm over 3 still <= 0.05
    ([0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0], 1, 'equivalent within +-0.05'),
    ([0.2, -0.15, 0.1, -0.2, 0.05, 0.15, -0.1, 0.0], 1, 'not resolved: ['),    # wide: neither
    ([0.05, 0.07, 0.04, 0.06, 0.05, 0.08], 16,                                 # p 1/32, but Holm over 16 families:
     'not resolved after Holm: [+0.043, +0.074] excludes 0, Holm p 0.500'),     # the interval and the p, quoted
    ([0.05, 0.07, 0.04, 0.06, 0.05, 0.08], 1.5, 'higher (at the margin: Holm p 0.047)'),
    # every seed up, but by 0.02-0.03: resolved, and its 90% interval inside +-0.05, a difference too small to matter
    ([0.02, 0.03, 0.025, 0.02, 0.03, 0.025, 0.02, 0.03], 1, 'higher, within +-0.05'),
    ([-0.02, -0.03, -0.025, -0.02, -0.03, -0.025, -0.02, -0.03], 3, 'lower, within +-0.05'),
])
def test_each_verdict_label_comes_from_planted_per_seed_differences(d, holm_of, expected):
    """Labels read from the interval: higher / lower only where Holm's p <= 0.05 (', within +-delta' where
    the 90% interval lies inside +-delta too), equivalent where it lies inside and Holm's p is above 0.05,
    and otherwise the 95% interval itself, never 'no effect'. A label names no ceiling unless told one."""
    p, _ = stats.sign_flip_test(d)
    (_, ci95), (_, ci90) = stats.mean_ci(d, clip=False), stats.mean_ci(d, clip=False, level=0.90)
    text = stats.label(min(1.0, p * holm_of), ci90, ci95, 0.05)
    assert text.startswith(expected) and text.endswith(']') if expected.endswith('[') else text == expected
    assert stats.within(text) == ('within' in expected)
    assert stats.label(min(1.0, p * holm_of), ci90, ci95, 0.05, ceiling=True) == text + ', at the ceiling'


def test_power_for_a_shift_is_what_seeds_for_shift_inverts():
    """At the seeds seeds_for_shift gives (above the sign flip's floor of 6) the power reaches 0.8, one
    seed fewer it does not; a shift of one sd at 8 seeds: Phi(sqrt(8) - 1.96) = 0.807 (scipy.stats.norm.cdf)."""
    for sd, shift in ((0.06, 0.05), (0.08, 0.04), (0.1, 0.03)):
        n = stats.seeds_for_shift(sd, shift)
        assert n > 6 and stats.power_for_shift(n, sd, shift) >= 0.8 > stats.power_for_shift(n - 1, sd, shift)
    assert stats.power_for_shift(8, 0.05, 0.05) == pytest.approx(0.8074, abs=1e-4)


def test_a_bound_at_the_margin_of_equivalence_is_marked():
    """90% interval [-0.010, +0.048] against delta 0.05: equivalent, at the margin; its mirror just
    outside (+0.052) is not resolved, at the margin too."""
    assert stats.label(0.5, [-0.01, 0.048], [-0.02, 0.06], 0.05) == \
        'equivalent within +-0.05 (at the margin: 90% bound 0.048)'
    assert stats.label(0.5, [-0.01, 0.052], [-0.02, 0.06], 0.05) == \
        'not resolved: [-0.020, +0.060] (at the margin: 90% bound 0.052 against +-0.05)'
    assert stats.decision('not resolved after Holm: [+0.043, +0.074] excludes 0, Holm p 0.500') == 'not resolved'
    # resolved and within +-0.05, its 90% bound at the margin of it; the ceiling after every other word
    assert stats.label(0.01, [0.01, 0.048], [0.005, 0.052], 0.05, ceiling=True) == \
        'higher, within +-0.05 (at the margin: 90% bound 0.048), at the ceiling'
    assert stats.decision('higher, within +-0.05, at the ceiling') == 'higher'
    assert stats.label(0.5, [-0.002, 0.003], [-0.002, 0.003], 0.0) == 'not resolved: [-0.002, +0.003]'   # no margin


def test_leave_one_out_names_the_seeds_a_verdict_rests_on():
    """A family of two: one test whose 8 seeds all rise (higher, kept whichever seed is left out: 7 seeds
    all up give p 2/128, Holm over two 2/64); one higher only because seeds 3 and 6 fall by little (p
    8/256): leave out any seed that rises and the Holm p passes 0.05; leave out 3 or 6 and it stays."""
    def test_of(d):
        p, _ = stats.sign_flip_test(d)
        return {'per_seed': {str(s): v for s, v in enumerate(d, 1)}, 'p': p,
                'ci95': stats.mean_ci(d, clip=False)[1], 'ci90': stats.mean_ci(d, clip=False, level=0.90)[1]}
    strong = test_of([0.09, 0.11, 0.10, 0.12, 0.08, 0.10, 0.09, 0.11])
    fragile = test_of([0.02, 0.03, -0.01, 0.02, 0.03, -0.005, 0.02, 0.04])
    for t, p in zip((strong, fragile), stats.holm([strong['p'], fragile['p']])):
        t['p_holm'] = p
    assert stats.label(fragile['p_holm'], fragile['ci90'], fragile['ci95'], 0.05) == 'higher, within +-0.05'
    stats.leave_one_out([strong, fragile], 0.05)
    assert strong['leave_one_out'] == {'p_holm': [2 / 64, 2 / 64], 'survives': True, 'flips': []}
    assert fragile['leave_one_out'] == {'p_holm': [2 / 64, 4 / 64], 'survives': False, 'flips': [1, 2, 4, 5, 7, 8]}


def test_permutation_test_exact_by_hand_and_against_scipy():
    # by hand: pooled {3, 4, 1, 2} into pairs; |difference of means| per split: {3,4} 2, {3,1} 1, {3,2} 0,
    # {4,1} 0, {4,2} 1, {1,2} 2: two of six splits reach the observed 2
    p, method = stats.permutation_test([3, 4], [1, 2])
    assert p == pytest.approx(1 / 3) and method == 'exact: all 6 splits'
    # scipy.stats.permutation_test((x, y), lambda a, b: abs(mean(a) - mean(b)), permutation_type='independent',
    #                              alternative='greater', n_resamples=np.inf).pvalue
    assert stats.permutation_test([0.9, 1.0, 0.95], [0.1, 0.2, 0.96, 0.5])[0] == pytest.approx(0.11428571428571428)
    assert (stats.permutation_test([0.97, 0.99, 0.92, 1.0, 0.31], [0.12, 0.95, 0.40, 0.05])[0]
            == pytest.approx(0.10317460317460317))
    # past max_exact: random splits with a fixed seed, near the exact p and the same on every call
    x, y = [0.9, 1.0, 0.95], [0.1, 0.2, 0.96, 0.5]
    p1, method = stats.permutation_test(x, y, max_exact=10)
    assert method.startswith('Monte Carlo: 20,000') and p1 == stats.permutation_test(x, y, max_exact=10)[0]
    assert p1 == pytest.approx(0.11428571428571428, abs=0.01)


def test_sign_flip_test_exact_by_hand_and_against_scipy():
    # by hand: d = (1, 2, 3); the 8 sums of ±1 ±2 ±3 are ±6, ±4, ±2, 0, 0: |sum| >= 6 in 2 of 8
    p, method = stats.sign_flip_test([1, 2, 3])
    assert p == pytest.approx(0.25) and method == 'exact: all 8 sign patterns'
    # scipy.stats.permutation_test((x, y), lambda a, b: abs(mean(a - b)), permutation_type='samples',
    #                              alternative='greater', n_resamples=np.inf).pvalue, d = x - y
    x, y = [0.98, 0.91, 0.40, 0.99, 0.97], [0.30, 0.95, 0.35, 0.20, 0.10]
    assert stats.sign_flip_test([a - b for a, b in zip(x, y)])[0] == pytest.approx(0.125)
    p, method = stats.sign_flip_test([1, 2, 3], max_exact=4)
    assert method.startswith('Monte Carlo') and p == pytest.approx(0.25, abs=0.01)


def test_power_and_seeds_needed_match_enumeration_with_scipy():
    # sum of binom.pmf(k1, n, p1) * binom.pmf(k2, n, p2) over the tables with scipy.stats.fisher_exact p <= 0.05
    assert stats.power_fisher(0.9, 0.1, 7) == pytest.approx(0.8416400187883599, rel=1e-9)
    assert stats.power_fisher(0.9, 0.1, 6) == pytest.approx(0.6590022518979999, rel=1e-9)
    assert stats.power_fisher(0.8, 0.33, 19) == pytest.approx(0.8003413696903867, rel=1e-9)
    assert stats.power_fisher(0.8, 0.33, 18) == pytest.approx(0.7774997834914577, rel=1e-9)
    assert stats.power_fisher(0.7, 0.2, 12) == pytest.approx(0.6097799676960007, rel=1e-9)
    assert stats.seeds_for_power(0.9, 0.1) == 7                    # a big effect: a few seeds
    assert stats.seeds_for_power(0.8, 0.33) == 19                  # a smaller one: many more
    assert stats.seeds_for_power(1.0, 0.0) == 4                    # 4/4 vs 0/4: p = 0.029; 3 vs 3 cannot
    assert stats.seeds_for_power(0.5, 0.5) is None                 # no effect: no n suffices
    assert stats.seeds_for_power(0.5, 0.45, n_max=20) == '>20'


# ----------------------------------------------------------------------------- the README's verdicts

def fake_results(ctrl_median, ctrl_pass, t):
    arm = lambda median, count: {'fit': 12, 'area': {'mean': median, 'median': median},   # noqa: E731
                                 'extrapolates': {'count': count, 'of': 12}, 'range': {'median': 4}}
    return {'rule': {'control': 'none'},
            'arms': {'none': arm(ctrl_median, ctrl_pass), 'vpad': {**arm(ctrl_median + t['difference'], 6),
                                                                   'vs_control': {'area': {'left_out': t}}}}}


def test_verdict_rows_read_their_label_from_the_interval_and_say_where_an_arm_is_at_the_ceiling():
    from study import verdicts
    t = {'difference': 0.08, 'ci95': [0.05, 0.11], 'sd': 0.047, 'p': 0.001, 'p_holm': 0.003,
         'seeds': list(range(1, 13)), 'seeds_for_power': 4}
    row, = verdicts.rows('s', 'claim', fake_results(0.41, 3, t))
    assert '| 0.001 | 0.003 | 12 paired | higher |' in row and '+0.080 [+0.050, +0.110]' in row
    # a control whose runs all extrapolate, or whose median area is 0.97, is no ceiling: the label alone decides
    assert verdicts.rows('s', 'claim', fake_results(0.97, 12, t))[0].endswith('| higher |')
    # an arm at the ceiling, as the summary records it (the mean areas the test is built from): said after the rest
    top = dict(t, areas={'vpad': 0.995, 'none': 0.915})
    assert verdicts.rows('s', 'claim', fake_results(0.915, 3, top))[0].endswith('| higher, at the ceiling |')
    weak = dict(t, p=0.03, p_holm=0.09)  # Holm > 0.05, and the 90% interval (+0.056, +0.104) reaches past 0.05
    assert verdicts.rows('s', 'claim', fake_results(0.41, 3, weak))[0].endswith(
        '| not resolved after Holm: [+0.050, +0.110] excludes 0, Holm p 0.090 |')
    small = dict(weak, difference=0.01, ci95=[-0.02, 0.04], sd=0.047)   # 90% interval +0.01 +- 0.024: inside +-0.05
    assert verdicts.rows('s', 'claim', fake_results(0.41, 3, small))[0].endswith(
        '| equivalent within +-0.05, 90% [-0.014, +0.034] |')          # the interval that decides it, quoted
    resolved = dict(small, p=0.001, p_holm=0.003, areas={'vpad': 1.0, 'none': 0.99})
    assert verdicts.rows('s', 'claim', fake_results(0.41, 3, resolved))[0].endswith(
        '| higher, within +-0.05, at the ceiling, 90% [-0.014, +0.034] |')


def planted_study(plain, yarn, spread=None):
    """A summary of arms none and vpad on 8 seeds, from planted mean areas per arm, plain and under yarn
    (each seed off its arm's mean by a small, different amount; vpad's `spread` times none's): vpad against
    none plain and under yarn, and the comparisons vpad@yarn - none@yarn and the interaction
    (vpad@yarn - none@yarn) - (vpad - none), labelled by outcomes.rederive as summarize and study.tables
    label them."""
    from study import outcomes
    noise = [0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001, -0.004]

    def area(mean, k):               # the arm's areas per seed, none above 1
        per_seed = {str(s): min(1.0, mean + k * n) for s, n in enumerate(noise, 1)}
        return {'per_seed': per_seed, 'never_fit_as_0': {'per_seed': per_seed}}
    arms = {a: {'arm': a, 'point': None, 'area': area(plain[a], k), 'variants': {'yarn': {'area': area(yarn[a], k)}}}
            for a, k in (('none', 1), ('vpad', spread or (-0.25 if yarn['vpad'] >= 0.99 else 2)))}
    test = lambda x, y: outcomes.area_test(x['per_seed'], y['per_seed'])    # noqa: E731
    arms['vpad']['vs_control'] = {'control': 'none', 'family': '', 'area': {
        w: test(arms['vpad']['area'], arms['none']['area']) for w in ('left_out', 'never_fit_as_0')}}
    arms['vpad']['variants']['yarn']['vs_control'] = {'control': 'none', 'family': '', **{
        w: test(arms['vpad']['variants']['yarn']['area'], arms['none']['variants']['yarn']['area'])
        for w in ('left_out', 'never_fit_as_0')}}
    cfg = {'arms': {'none': {}, 'vpad': {}}, 'eval_variants': 'yarn', 'delta': 0.05,
           'comparisons': {'yarn': [['vpad@yarn', 'none@yarn'], ['vpad@yarn - none@yarn', 'vpad - none']]}}
    res = {'rule': {'control': 'none', 'delta': 0.05, 'families': {}}, 'eval': {'variants': ['yarn']}, 'arms': arms,
           'comparisons': outcomes.comparisons(arms, cfg)}
    outcomes.rederive(res)
    plain_t, yarn_t = arms['vpad']['vs_control']['area']['left_out'], arms['vpad']['variants']['yarn']['vs_control']
    gain, inter = (t['left_out'] for t in res['comparisons'])
    return {'plain': plain_t, 'yarn': yarn_t['left_out'], 'gain': gain, 'interaction': inter}


def test_each_label_case_on_planted_areas():
    """One summary per case, planted: a difference resolved but too small to matter reads 'higher, within
    +-0.05' (or lower); a comparison with an arm at mean area >= 0.99, on either side, or a term of an
    interaction built from one, says 'at the ceiling' after its other words; the rest read as before."""
    v = lambda t: stats.verdict(t, 0.05)          # noqa: E731  (the label every table prints)
    # plain, no arm near the ceiling: vpad 0.02 above none on every seed, then 0.10 above, 0.10 below, level
    assert v(planted_study({'none': 0.40, 'vpad': 0.42}, {'none': 0.6, 'vpad': 0.6})['plain']) == \
        'higher, within +-0.05'
    assert v(planted_study({'none': 0.42, 'vpad': 0.40}, {'none': 0.6, 'vpad': 0.6})['plain']) == \
        'lower, within +-0.05'
    assert v(planted_study({'none': 0.40, 'vpad': 0.50}, {'none': 0.6, 'vpad': 0.6})['plain']) == 'higher'
    assert v(planted_study({'none': 0.50, 'vpad': 0.40}, {'none': 0.6, 'vpad': 0.6})['plain']) == 'lower'
    level = planted_study({'none': 0.40, 'vpad': 0.40}, {'none': 0.6, 'vpad': 0.6})
    assert v(level['plain']).startswith('equivalent within +-0.05') and 'ceiling' not in v(level['plain'])
    wide = planted_study({'none': 0.40, 'vpad': 0.40}, {'none': 0.6, 'vpad': 0.6}, spread=30)['plain']
    assert v(wide) == f"not resolved: [{wide['ci95'][0]:+.3f}, {wide['ci95'][1]:+.3f}]"
    # at the ceiling on the arm's side, then on the control's: the words the interval gives, then the ceiling
    case = planted_study({'none': 0.90, 'vpad': 0.995}, {'none': 0.6, 'vpad': 0.6})
    assert v(case['plain']) == 'higher, at the ceiling' and case['plain']['areas']['vpad'] >= 0.99
    case = planted_study({'none': 0.995, 'vpad': 0.90}, {'none': 0.6, 'vpad': 0.6})
    assert v(case['plain']) == 'lower, at the ceiling' and case['plain']['areas']['none'] >= 0.99
    # the practitioner's case: both at the ceiling under yarn, vpad 0.007 above; the interaction built from them
    case = planted_study({'none': 0.40, 'vpad': 0.55}, {'none': 0.992, 'vpad': 0.999})
    assert v(case['yarn']) == v(case['gain']) == 'higher, within +-0.05, at the ceiling'
    assert v(case['interaction']) == 'lower, at the ceiling' and v(case['plain']) == 'higher'
    assert set(case['interaction']['areas']) == {'vpad@yarn', 'none@yarn', 'vpad', 'none'}
    assert case['interaction']['label'] == v(case['interaction'])      # results.json holds the label it prints


def test_a_study_of_snapshots_gives_claim_1_rows_then_the_sites_at_the_late_point():
    from study import verdicts
    t = lambda d, p: {'difference': d, 'ci95': [d - 0.02, d + 0.02], 'sd': 0.03, 'p': p, 'p_holm': p,   # noqa: E731
                      'seeds': list(range(1, 13))}
    at = lambda arm, area, test=None: {'arm': arm, 'point': 10000, 'area': {'mean': area},   # noqa: E731
                                       **({'vs_control': {'area': {'left_out': test}}} if test else {})}
    res = {'rule': {'control': 'none', 'families': {'sites': ['vpad'], 'weight decay': ['none_wd']}},
           'arms': {'none +1000': {**at('none', 0.4995), 'point': 1000},      # the early mean as it is, not rounded
                    'none +10000': at('none', 0.40), 'vpad +10000': at('vpad', 0.50, t(0.10, 0.001)),
                    'none_wd +10000': at('none_wd', 0.30, t(-0.10, 0.002))},
           'long': {'early': 1000, 'late': 10000, 'delta': 0.05, 'change': {'none': t(-0.10, 0.001)},
                    'change_vs_control': {'vpad': t(0.01, 0.6), 'none_wd': t(-0.10, 0.002)}}}
    rows = verdicts.rows('study_long', ('claim 1', 'claims 3-4'), res)
    assert [r.split(' | ')[0] for r in rows] == ['| claim 1'] * 4 + ['| claims 3-4']
    assert 'none: cooled area at +1000 -> +10000, 0.499 -> 0.400, -0.100 [-0.120, -0.080] ' \
        '| 0.001 | - |' in rows[0] and rows[0].endswith('| lower |')
    assert "vpad's change against none's, +0.010" in rows[1] and rows[1].endswith(
        '| equivalent within +-0.05, 90% [-0.006, +0.026] |')
    assert 'none_wd vs none, cooled area at +10000: 0.300 vs 0.400, -0.100' in rows[3] and rows[3].endswith('| lower |')
    assert 'vpad vs none, cooled area at +10000: 0.500 vs 0.400, +0.100' in rows[4] and rows[4].endswith('| higher |')


def test_study_scalings_weight_decay_family_is_corrected_over_both_its_tests():
    """study_scaling's config pre-registered one weight decay family of two tests, none_wd against none at +4000
    and its change from +1000 against none's; its summary now corrects them together (Holm over 2), where
    each was corrected alone before: none_wd - none, p 0.036, is not resolved after Holm."""
    import copy
    from study import outcomes, verdicts
    res = verdicts.load('study_scaling')
    t = res['arms']['none_wd +4000']['vs_control']['area']['left_out']
    change = res['long']['change_vs_control']['none_wd']
    assert [t['p_holm'], change['p_holm']] == stats.holm([t['p'], change['p']])
    assert stats.fmt_p(t['p_holm']) == '0.071' and stats.verdict(t, 0.05).startswith('not resolved after Holm')
    assert res['rule_change']['labels']['none_wd +4000 vs none +4000'][0] == 'lower'      # the old rule's
    assert outcomes.rederive(copy.deepcopy(res)) == res        # study.tables, from its numbers, gives the same


def test_the_readme_verdict_table_is_what_the_committed_results_give():
    """The table between the README's markers is regenerated from results/*/results.json: a figure
    typed by hand, or a result committed without rerunning `python -m study.verdicts`, fails here."""
    from study import verdicts
    verdicts.main(['--check'])
    with open(os.path.join(verdicts.ROOT, verdicts.TABLE)) as f:
        readme = f.read()
    with pytest.raises(SystemExit, match='unknown argument'):     # a typo must not rewrite the README
        verdicts.main(['--chek'])
    verdicts.main(['--help'])                                     # nor does asking how to use it
    with open(os.path.join(verdicts.ROOT, verdicts.TABLE)) as f:
        assert f.read() == readme


def scale_results(plain, yarn, seeds=10, pending=(), fixed=True):
    """A study at +4000 with arms none, pre_linear and vpad: plain and yarn areas per arm, each site's
    test plain and under yarn; yarn's as a fixed comparison (with a different one at +1000) or the arm's own."""
    t = lambda d, p: {'difference': d, 'ci95': [d - 0.02, d + 0.02], 'sd': 0.03, 'p': p, 'p_holm': p,   # noqa: E731
                      'seeds': list(range(seeds))}
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
    from study import scales
    plain, yarn = {'none': 0.40, 'pre_linear': 0.50, 'vpad': 0.53}, {'none': 0.99, 'pre_linear': 1.0, 'vpad': 1.0}
    small = scale_results(plain, yarn, seeds=12, fixed=False)
    large = scale_results({'none': 0.80, 'pre_linear': 0.80, 'vpad': 0.93}, yarn)
    large['arms']['pre_linear +4000']['vs_control']['area']['left_out'].update(difference=0.0, ci95=[-0.02, 0.02],
                                                                              p=0.9, p_holm=0.9)
    views = lambda res: [('small', 'late', 'x', small), ('large', 'late', 'x', res)]   # noqa: E731
    tbl = scales.table(views(large)).split('\n')
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
    pending = scales.table(views(scale_results(plain, yarn, pending=[29, 30])))
    assert pending.count('pending: 2 seed(s) still to run') == 4
    assert scales.table(views(None)).count('not yet') == 6 + 4


def test_the_scales_table_reads_a_study_at_fixed_steps_at_its_late_step_and_near_each_runs_fit():
    """A study at fixed steps with arms none and vpad: read at its late step, and near each run's fit + k
    (plain only); pre_linear, not one of its arms, has no row there."""
    from study import scales
    plain, yarn = {'none': 0.40, 'pre_linear': 0.50, 'vpad': 0.53}, {'none': 0.99, 'pre_linear': 1.0, 'vpad': 1.0}
    small = scale_results(plain, yarn, seeds=12, fixed=False)
    fixed = scale_results({'none': 0.55, 'vpad': 0.70}, yarn)
    fixed['long'] = {'early': 1000, 'late': 4000, 'fixed_steps': True, 'fit_plus': {
        'offset': 4000, 'window': 1500, 'area': {'none': {'1': 0.5, '2': 0.7}, 'vpad': {'1': 0.6, '3': 0.9}},
        'vs_control': {'vpad': {'difference': -0.3, 'ci95': None, 'sd': None, 'p': 1.0, 'p_holm': 1.0,
                                'seeds': [1], 'family': 'sites'}}}}
    tbl = scales.table([('small', 'late', 'x', small), ('big', 'late', 'at 9', fixed),
                        ('big', 'fit_plus', 'near fit + 9', fixed)])
    lines = tbl.split('\n')
    assert '| big | at 4000 | 0.550 (10) | 0.990 (10) | - | - | 0.700 (10) | 1.000 (10) |' in lines
    assert '| big | near fit + 4000 | 0.600 (2) | - | - | - | 0.750 (2) | - |' in lines
    assert '| vpad - none, plain | big | near fit + 4000 | -0.300, Holm 1.000 over 1, 1 seeds: not resolved: one ' \
           'seed (secondary) | not confirmed: higher -> not resolved |' in lines
    assert not any(r.startswith('| pre_linear') and '| big |' in r for r in lines)
    assert not any(r.startswith('| vpad@yarn') and 'near fit' in r for r in lines)
    before = scales.table([('small', 'late', 'x', small), ('big', 'fit_plus', 'near fit + 9', None)])
    assert '| big | near fit + 9 | not yet | - | not yet | - | not yet | - |' in before.split('\n')
    del fixed['long']['fit_plus']             # summarized without the reading: not computed, not "no test"
    lines = scales.table([('small', 'late', 'x', small), ('big', 'fit_plus', 'near fit + 9', fixed)]).split('\n')
    assert '| big | near fit + 9 | not computed | - | - | - | not computed | - |' in lines
    assert '| vpad - none, plain | big | near fit + 9 | not computed | not computed: the summary has no such ' \
           'reading |' in lines


def test_the_scales_table_reads_a_negligible_resolved_difference_as_within_the_margin():
    from study import scales
    ceiling = {'difference': 0.001, 'ci95': [0.0005, 0.0015], 'sd': 0.0008, 'p': 0.001, 'p_holm': 0.002,
               'seeds': list(range(12))}           # resolved, but a 90% interval far inside +-0.05: both at 1.00
    assert stats.verdict(ceiling, 0.05) == 'higher, within +-0.05' and scales.reading(ceiling, 0.05) == 'within +-0.05'
    ceiling['areas'] = {'vpad@yarn': 1.0, 'none@yarn': 0.999}
    assert stats.verdict(ceiling, 0.05) == 'higher, within +-0.05, at the ceiling'
    assert scales.reading(ceiling, 0.05) == 'within +-0.05'
    assert scales.reading(dict(ceiling, difference=0.1, ci95=[0.08, 0.12], sd=0.03), 0.05) == 'higher'
    one = {'difference': 0.2, 'ci95': None, 'ci90': None, 'sd': None, 'p': 1.0, 'p_holm': 1.0, 'seeds': [21]}
    assert scales.reading(one, 0.05) == 'not resolved'
    assert scales.test_cell(one, 2, True, 0.05) == '+0.200, Holm 1.000 over 2, 1 seeds: not resolved: one seed'
    assert scales.held('higher', None, 0) == 'no paired test at the larger scale'
    assert scales.held('not resolved', 'not resolved', 0) == 'both not resolved'
    assert scales.held('higher', 'not resolved', 0) == 'not confirmed: higher -> not resolved'
    assert scales.held('not resolved', 'higher', 0) == 'did not hold: not resolved -> higher'


def test_the_scales_readme_table_is_what_the_committed_results_give():
    from study import scales
    scales.main(['--check'])
    with pytest.raises(SystemExit, match='unknown argument'):
        scales.main(['--chek'])


def test_the_headline_figure_draws_each_site_study_beside_its_point_of_the_map():
    from study import verdicts
    def per_seed(*a, at4=(0.5,)):             # the area, and the accuracy at 2x (above 0.5) and 4x
        seeds = lambda v: {'per_seed': {str(i + 1): x for i, x in enumerate(v)}}   # noqa: E731
        return {'area': seeds(a), 'tasks': {'mqar': {'2': seeds([0.9] * len(at4)), '4': seeds(at4)}}}
    studies = {'study_regime': {'arms': {'theta_1e3': per_seed(0.3, at4=(0.1,)), 'theta_1e4': per_seed(0.4),
                                         'mamba2': per_seed(0.6, at4=(0.99,))}},
               'study_sites_sensitive': {'arms': {'none': per_seed(0.41, 0.42), 'vpad': per_seed(0.45, 0.46),
                                                  'pre_norm': {'area': {'per_seed': {}}}}}}      # not run yet: no group
    groups = verdicts.headline_groups(studies)
    assert [(g[1], g[2]) for g in groups] == [('theta_1e3', 'study_regime'), ('theta_1e4', 'study_regime'),
                                              ('none', 'study_sites_sensitive'), ('vpad', 'study_sites_sensitive'),
                                              ('mamba2', 'study_regime')]
    xs = [g[0] for g in groups]
    assert all(b - a >= 0.6 for a, b in zip(xs, xs[1:]))                  # left to right, no slot shared
    assert groups[3][4] == [0.45, 0.46]
    # beside the area, each run's accuracy where its map point's control is nearest 0.5: 2x for
    # theta_1e3 (0.9 against 0.1), 4x for theta_1e4 (0.5) and its site studies' arms
    assert [g[6][1] for g in groups] == ['2', '4', '4', '4', '2']
    assert groups[3][5] == [0.5]


def test_the_readme_rewrite_is_atomic_and_a_damaged_or_missing_summary_is_one_line(tmp_path, monkeypatch, capsys):
    """On a copy of the README and the summaries: a write that fails (a full disk) leaves the README
    as it was and ends in one line; markers in the wrong order, and a results.json cut short, are one
    line naming what to fix; a study whose results.json is missing or empty is named, not dropped
    in silence."""
    import errno
    import shutil
    from study import verdicts
    for name, _ in verdicts.STUDIES:
        if os.path.exists(os.path.join(verdicts.ROOT, 'results', name, 'results.json')):
            os.makedirs(tmp_path / 'results' / name)
            shutil.copy(os.path.join(verdicts.ROOT, 'results', name, 'results.json'), tmp_path / 'results' / name)
    shutil.copy(os.path.join(verdicts.ROOT, verdicts.TABLE), tmp_path / verdicts.TABLE)
    monkeypatch.setattr(verdicts, 'ROOT', str(tmp_path))
    monkeypatch.setattr(verdicts, 'draw_headline', lambda *a: None)
    readme = (tmp_path / verdicts.TABLE).read_text()

    def one_line(*argv):
        with pytest.raises(SystemExit) as e:
            verdicts.main(list(argv))
        assert isinstance(e.value.code, str) and len(e.value.code.splitlines()) == 1, e.value.code
        return e.value.code

    def full(path, data):
        raise OSError(errno.ENOSPC, 'No space left on device')
    with monkeypatch.context() as m:
        m.setattr(verdicts.rundir, 'write_atomic', full)
        assert 'no space left on the device' in one_line()
    assert (tmp_path / verdicts.TABLE).read_text() == readme
    begin, end = verdicts.BEGIN, verdicts.END
    (tmp_path / verdicts.TABLE).write_text(readme.replace(begin, '@@').replace(end, begin).replace('@@', end))
    assert 'in that order' in one_line('--check')
    (tmp_path / verdicts.TABLE).write_text(readme)
    cut = tmp_path / 'results' / 'study_positive' / 'results.json'
    text = cut.read_text()
    cut.write_text(text[:len(text) // 2])
    assert one_line('--check').startswith(f"{cut} is not readable JSON") and 'git checkout' in one_line()
    cut.write_text('{}')
    capsys.readouterr()
    verdicts.main([])
    assert 'results/study_positive/results.json is empty: its rows are left out' in capsys.readouterr().out
    os.remove(cut)
    verdicts.main([])
    assert 'results/study_positive/results.json is missing: its rows are left out' in capsys.readouterr().out
    assert '[study_positive]' not in (tmp_path / verdicts.TABLE).read_text()


def test_a_step_median_is_drawn_only_where_half_of_the_runs_still_train():
    """Three runs ending at steps 2, 4 and 6: the median at step 6 would be the last run's value alone."""
    from study.plots import median_while_most_train
    per_seed = {1: {0: 0.0, 2: 0.5}, 2: {0: 0.2, 2: 0.7, 4: 0.9}, 3: {0: 0.4, 2: 0.6, 4: 0.1, 6: 1.0}}
    assert median_while_most_train(per_seed) == ([0, 2, 4], [0.2, 0.6, 0.5])
