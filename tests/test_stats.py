"""study/stats.py: each test is scipy's, so what is checked here is what this repo adds to it: the sign flip's
interval as that test inverted (its ends against scipy's own p just inside and just outside), ties that exact
arithmetic makes and floats break, the labels read from a test and its intervals, Holm, Fisher's power by
enumeration, the leave-one-out robustness; then the README tables written from the committed results."""
import itertools
import json
import math
import os
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sp

from study import stats


def scipy_p(d):
    """The two-sided sign-flip p of mean(d) = 0, exact, straight from scipy."""
    return sp.permutation_test((np.asarray(d, float),), lambda x, axis: np.abs(np.mean(x, axis=axis)),
                               permutation_type='samples', vectorized=True, n_resamples=np.inf,
                               alternative='greater').pvalue


def test_fisher_wilson_and_holm_are_the_textbook_ones():
    assert stats.fisher_exact(8, 2, 1, 5) == pytest.approx(0.034965034965034975, rel=1e-12)   # 2x2, by hand
    assert stats.fisher_exact(0, 5, 0, 3) == 1.0
    # 3 vs 3 runs: even 3/3 vs 0/3 gives p = 0.1 (above); 4 vs 4: 2 / C(8, 4) = 0.0286
    assert stats.smallest_fisher_p(3, 3) == pytest.approx(0.1) and stats.smallest_fisher_p(4, 4) == pytest.approx(2 / 70)
    # Wilson's score interval of 7/10 by its formula; 0/n and n/n end exactly at 0 and 1
    z, k, n = 1.959963984540054, 7, 10
    centre, half = (k / n + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(
        k / n * (1 - k / n) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert stats.wilson(7, 10) == pytest.approx([centre - half, centre + half], abs=1e-12)
    assert stats.wilson(0, 3)[0] == 0.0 and stats.wilson(3, 3)[1] == 1.0 and stats.wilson(0, 0) is None
    # Holm by hand: sorted 0.005*4, 0.01*3, 0.03*2, then 0.04*1 = 0.04 raised to the running maximum 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([]) == []


def test_an_arms_interval_uses_the_exact_t_quantile():
    # t_0.975 with 2 degrees of freedom is 4.302653 (a 3-place table said 4.303); with 60, 2.000298
    mean, ci = stats.mean_ci([0.62, 0.91, 0.75])
    assert mean == pytest.approx(0.76) and ci == pytest.approx([0.76 - 4.302653 * 0.145258 / math.sqrt(3), 1.0], abs=1e-5)
    xs = [0.1 * (i % 7) for i in range(61)]
    m, sd = stats.mean_std(xs)
    assert stats.mean_ci(xs)[1][0] == pytest.approx(m - 2.000298 * sd / math.sqrt(61), abs=1e-6)
    assert stats.mean_ci([0.5]) == (0.5, None) and stats.mean_ci([]) == (None, None)


def test_pearson_gives_r_and_its_fisher_z_interval():
    xs, ys = [1, 2, 3, 4, 5, 6], [2.1, 3.9, 6.2, 7.8, 10.5, 11.7]
    r, ci, n = stats.pearson(xs, ys)
    z, half = math.atanh(r), 1.959963984540054 / math.sqrt(n - 3)
    assert r == pytest.approx(np.corrcoef(xs, ys)[0, 1]) and ci == pytest.approx([math.tanh(z - half),
                                                                                  math.tanh(z + half)])
    assert stats.pearson([1, 2], [3, 4]) == (None, None, 2) and stats.pearson([1, 1, 1], [1, 2, 3])[0] is None


def test_the_sign_flip_p_counts_every_pattern_and_the_ties_exact_arithmetic_makes():
    # by hand: d = (1, 2, 3); the 8 sums of +-1 +-2 +-3 are +-6, +-4, +-2, 0, 0: |sum| >= 6 in 2 of 8
    assert stats.sign_flip([1, 2, 3]) == {'p': 0.25, 'method': 'exact: all 8 sign patterns', 'ci95': [None, None],
                                          'ci90': [None, None]}     # 3 seeds: no pattern count reaches p <= 0.10
    # areas are means of accuracies k/100 over 7 multiples: per-seed differences on a grid of 1/700, whose sums
    # tie in exact arithmetic and differ in a float's last bits; the p is the exact one, counted in fractions
    rng = random.Random(3)
    grid = [Fraction(rng.choice([0, 1, 1, 2, 3]), 700) * rng.choice([1, -1]) for _ in range(10)]
    d = [float(sum(Fraction(a, 100) for a in acc) / 7) - float(sum(Fraction(b, 100) for b in base) / 7)
         for acc, base in ((
             [rng.randrange(95, 101) for _ in range(7)], [rng.randrange(95, 101) for _ in range(7)]) for _ in grid)]
    exact_d = [Fraction(round(x * 700), 700) for x in d]
    exact = sum(abs(sum(s * x for s, x in zip(signs, exact_d))) >= abs(sum(exact_d))
                for signs in itertools.product((1, -1), repeat=10)) / 1024
    assert stats.sign_flip(d)['p'] == exact
    # past 16 seeds: random patterns, seeded, the same on every call and near the exact p of the first 16
    many = [0.01 * (i % 5) - 0.012 for i in range(17)]
    first, method = stats.sign_flip(many)['p'], stats.sign_flip(many)['method']
    assert method.startswith('Monte Carlo: 20,000') and first == stats.sign_flip(many)['p']
    assert first == pytest.approx(scipy_p(many[:16]), abs=0.05)


@pytest.mark.parametrize('seed', range(6))
def test_the_interval_is_the_sign_flip_inverted(seed):
    """Each end of the 95% and 90% intervals is the last shift the test does not reject: scipy's own p of the
    differences minus a shift just inside the end is above alpha, just outside it is not; so the 95% interval excludes 0
    exactly where p <= 0.05."""
    rng = random.Random(seed)
    n = rng.randrange(6, 12)
    d = [rng.gauss(0.03 * (seed % 3), 0.04) for _ in range(n)]
    got = stats.sign_flip(d)
    assert got['p'] == pytest.approx(scipy_p(d), abs=1e-12)
    for level, alpha in (('ci95', 0.05), ('ci90', 0.10)):
        lo, hi = got[level]
        # (a hair inside: at the end itself a pattern ties in exact arithmetic, which floats may break)
        assert scipy_p([x - lo - 1e-9 for x in d]) > alpha and scipy_p([x - hi + 1e-9 for x in d]) > alpha
        assert scipy_p([x - lo + 1e-6 for x in d]) <= alpha and scipy_p([x - hi - 1e-6 for x in d]) <= alpha
        assert (got['p'] <= alpha) == (lo > 0 or hi < 0)


def test_a_single_outlying_seed_gives_a_label_and_an_interval_that_agree():
    """study_scale2's case: nine seeds up by 0-0.006 (one exactly 0), one by 0.173. The sign flip resolves it
    (p = 4/1024 whatever the sizes) and its own interval excludes 0; Student t's, which the outlier widens,
    did not: the two are pinned apart here."""
    d = [0.006, 0.0, 0.173, 0.003, 0.004, 0.001, 0.002, 0.005, 0.006, 0.001]
    got = stats.sign_flip(d)
    assert got['p'] == 4 / 1024 and got['ci95'] == pytest.approx([0.001667, 0.06], abs=1e-6)
    t_lo, _ = sp.t.interval(0.95, len(d) - 1, loc=np.mean(d), scale=sp.sem(d))
    assert t_lo < 0 < got['ci95'][0]
    text = stats.label(got['p'], got['ci90'], got['ci95'], 0.05)
    assert text == 'higher, within +-0.05 (at the margin: 90% bound 0.047 against +-0.05)'


def test_where_t_excludes_0_and_the_sign_flip_does_not_the_label_follows_the_test():
    """Five seeds up by 0.03-0.06 and one down by 0.05: Student t's interval [+0.011, +0.145] excludes 0, but
    the sign flip's p is 4/64 and its interval includes 0, so the label quotes that one (the t interval made
    it read 'not resolved after Holm: ... excludes 0'); with five seeds all up, p = 2/32 can never pass 0.05
    and no 95% interval ends."""
    d = [0.1, 0.12, 0.09, 0.11, 0.1, -0.05]
    got = stats.sign_flip(d)
    assert got['p'] == 4 / 64 and got['ci95'] == pytest.approx([-0.05, 0.12])
    assert sp.t.interval(0.95, 5, loc=np.mean(d), scale=sp.sem(d))[0] > 0
    assert stats.label(got['p'], got['ci90'], got['ci95'], 0.05) == 'not resolved: [-0.050, +0.120]'
    five = stats.sign_flip([0.03, 0.05, 0.04, 0.06, 0.035])
    assert five['ci95'] == [None, None] and five['ci90'] == pytest.approx([0.03, 0.06])
    assert stats.label(five['p'], five['ci90'], five['ci95'], 0.05) == 'not resolved: [-inf, +inf]'


@pytest.mark.parametrize('d, holm_of, expected', [
    ([0.09, 0.11, 0.10, 0.12, 0.08, 0.10, 0.09, 0.11], 1, 'higher'),           # every seed up: p = 2/256
    ([-0.09, -0.11, -0.10, -0.12, -0.08, -0.10, -0.09, -0.11], 3, 'lower'),    # Holm over 3 still <= 0.05
    ([0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0], 1, 'equivalent within +-0.05'),
    ([0.2, -0.15, 0.1, -0.2, 0.05, 0.15, -0.1, 0.0], 1, 'not resolved: [-0.125, +0.133]'),
    ([0.05, 0.07, 0.04, 0.06, 0.05, 0.08], 16,                                 # p 1/32, but Holm over 16 families:
     'not resolved after Holm: [+0.040, +0.080] excludes 0, Holm p 0.500'),     # the interval and the p, quoted
    ([0.05, 0.07, 0.04, 0.06, 0.05, 0.08], 1.5, 'higher (at the margin: Holm p 0.047)'),
    # every seed up, but by 0.02-0.03: resolved, and its 90% interval inside +-0.05, a difference too small to matter
    ([0.02, 0.03, 0.025, 0.02, 0.03, 0.025, 0.02, 0.03], 1, 'higher, within +-0.05'),
    ([-0.02, -0.03, -0.025, -0.02, -0.03, -0.025, -0.02, -0.03], 3, 'lower, within +-0.05'),
])
def test_each_verdict_label_comes_from_planted_per_seed_differences(d, holm_of, expected):
    """Labels read from the test and its intervals: higher / lower only where Holm's p <= 0.05 (', within
    +-delta' where the 90% interval lies inside +-delta too), equivalent where it lies inside and Holm's p is
    above 0.05, and otherwise the 95% interval itself, never 'no effect'. A label names no ceiling unless told."""
    t = stats.sign_flip(d)
    text = stats.label(min(1.0, t['p'] * holm_of), t['ci90'], t['ci95'], 0.05)
    assert text == expected and stats.within(text) == ('within' in expected)
    assert stats.label(min(1.0, t['p'] * holm_of), t['ci90'], t['ci95'], 0.05, ceiling=True) == \
        text + ', at the ceiling'


@pytest.mark.parametrize('p, ci90, ci95, expected', [
    (0.5, [-0.01, 0.048], [-0.02, 0.06], 'equivalent within +-0.05 (at the margin: 90% bound 0.048 against +-0.05)'),
    (0.5, [-0.01, 0.052], [-0.02, 0.06], 'not resolved: [-0.020, +0.060] (at the margin: 90% bound 0.052 against '
                                         '+-0.05)'),
    # resolved: a bound just past delta is at the margin too (it decides 'within'), as a Holm p near 0.05 is
    (0.01, [0.02, 0.0502], [0.01, 0.059], 'higher (at the margin: 90% bound 0.050 against +-0.05)'),
    (0.01, [-0.048, -0.02], [-0.052, -0.01], 'lower, within +-0.05 (at the margin: 90% bound 0.048 against +-0.05)'),
    (0.052, [-0.01, 0.02], [-0.02, 0.03], 'equivalent within +-0.05 (at the margin: Holm p 0.052)'),
    (0.047, [0.01, 0.048], [0.005, 0.052], 'higher, within +-0.05 (at the margin: Holm p 0.047; 90% bound 0.048 '
                                           'against +-0.05)'),
    (0.5, [-0.002, 0.003], [-0.002, 0.003], 'equivalent within +-0.05'),
])
def test_at_the_margin_is_said_of_every_label_whose_p_or_bound_is_near_its_threshold(p, ci90, ci95, expected):
    assert stats.label(p, ci90, ci95, 0.05) == expected
    assert stats.label(p, ci90, ci95, 0.05, ceiling=True) == expected + ', at the ceiling'


def test_a_label_never_reads_higher_or_lower_beside_a_95_interval_that_includes_0():
    """Whatever p it is given (a Monte Carlo p past 16 seeds comes from other draws than the interval), the label
    resolves only where its interval excludes 0; the decisions of labels and the delta 0 of a shift in sds."""
    assert stats.label(0.01, [-0.001, 0.02], [-0.002, 0.03], 0.05) == 'equivalent within +-0.05'
    assert stats.decision('not resolved after Holm: [+0.043, +0.074] excludes 0, Holm p 0.500') == 'not resolved'
    assert stats.decision('higher, within +-0.05, at the ceiling') == 'higher'
    assert stats.label(0.5, [-0.002, 0.003], [-0.002, 0.003], 0.0) == 'not resolved: [-0.002, +0.003]'   # no margin
    assert stats.label(1.0, None, None, 0.05) == 'not resolved: one seed'


def test_power_for_a_shift_is_what_seeds_for_shift_inverts():
    """At the seeds seeds_for_shift gives (above the sign flip's floor of 6) the power reaches 0.8, one
    seed fewer it does not; a shift of one sd at 8 seeds: Phi(sqrt(8) - 1.96) = 0.807."""
    def power_for_shift(n, sd, shift, alpha=0.05):      # the power of n paired seeds: Phi(|shift| sqrt(n) / sd - z)
        return float(sp.norm.cdf(abs(shift) * math.sqrt(n) / sd - sp.norm.ppf(1 - alpha / 2)))
    for sd, shift in ((0.06, 0.05), (0.08, 0.04), (0.1, 0.03)):
        n = stats.seeds_for_shift(sd, shift)
        assert n > 6 and power_for_shift(n, sd, shift) >= 0.8 > power_for_shift(n - 1, sd, shift)
    assert power_for_shift(8, 0.05, 0.05) == pytest.approx(0.8074, abs=1e-4)
    assert stats.seeds_for_shift(0.001, 0.05) == 6 and stats.seeds_for_shift(None, 0.05) is None


def test_leave_one_out_names_the_seeds_a_verdict_rests_on():
    """A family of two: one test whose 8 seeds all rise (higher, kept whichever seed is left out: 7 seeds
    all up give p 2/128, Holm over two 2/64); one higher only because seeds 3 and 6 fall by little (p
    8/256): leave out any seed that rises and the Holm p passes 0.05; leave out 3 or 6 and it stays."""
    def test_of(d):
        return {'per_seed': {str(s): v for s, v in enumerate(d, 1)}, **stats.sign_flip(d)}
    strong = test_of([0.09, 0.11, 0.10, 0.12, 0.08, 0.10, 0.09, 0.11])
    fragile = test_of([0.02, 0.03, -0.01, 0.02, 0.03, -0.005, 0.02, 0.04])
    for t, p in zip((strong, fragile), stats.holm([strong['p'], fragile['p']])):
        t['p_holm'] = p
    assert stats.label(fragile['p_holm'], fragile['ci90'], fragile['ci95'], 0.05) == 'higher, within +-0.05'
    stats.leave_one_out([strong, fragile], 0.05)
    assert strong['leave_one_out'] == {'p_holm': [2 / 64, 2 / 64], 'survives': True, 'flips': []}
    assert fragile['leave_one_out'] == {'p_holm': [2 / 64, 4 / 64], 'survives': False, 'flips': [1, 2, 4, 5, 7, 8]}
    assert stats.flips_text(fragile) == '; changes without seed 1, 2, 4, 5, 7, 8' and stats.flips_text(strong) == ''


def test_permutation_test_exact_by_hand_and_seeded_past_max_exact():
    # by hand: pooled {3, 4, 1, 2} into pairs; |difference of means| per split: {3,4} 2, {3,1} 1, {3,2} 0,
    # {4,1} 0, {4,2} 1, {1,2} 2: two of six splits reach the observed 2
    assert stats.permutation_test([3, 4], [1, 2]) == (pytest.approx(1 / 3), 'exact: all 6 splits')
    x, y = [0.9, 1.0, 0.95], [0.1, 0.2, 0.96, 0.5]
    exact = stats.permutation_test(x, y)[0]
    p1, method = stats.permutation_test(x, y, max_exact=10)
    assert method.startswith('Monte Carlo: 20,000') and p1 == stats.permutation_test(x, y, max_exact=10)[0]
    assert p1 == pytest.approx(exact, abs=0.01)


def test_fisher_power_is_the_chance_of_a_significant_table_by_enumeration():
    """power_fisher against every pair of outcomes, each table's p from scipy's Fisher test; and the seeds
    it takes, searched up from 1."""
    def enumerated(p1, p2, n):
        return sum(sp.binom.pmf(a, n, p1) * sp.binom.pmf(c, n, p2) for a in range(n + 1) for c in range(n + 1)
                   if sp.fisher_exact([[a, n - a], [c, n - c]]).pvalue <= 0.05)
    for p1, p2, n in ((0.9, 0.1, 6), (0.9, 0.1, 7), (0.7, 0.2, 12), (0.8, 0.33, 9)):
        assert stats.power_fisher(p1, p2, n) == pytest.approx(enumerated(p1, p2, n), rel=1e-9)
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
    from study import report
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


def planted_study(plain, yarn, spread=None):
    """A summary of arms none and vpad on 8 seeds, from planted mean areas per arm, plain and under yarn
    (each seed off its arm's mean by a small, different amount; vpad's `spread` times none's): vpad against
    none plain and under yarn, and the comparisons vpad@yarn - none@yarn and the interaction
    (vpad@yarn - none@yarn) - (vpad - none), labelled by outcomes.rederive as summarize and study.report
    label them."""
    from study import outcomes, settings
    noise = [0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001, -0.004]

    def area(mean, k):               # the arm's areas per seed, none above 1
        per_seed = {str(s): min(1.0, mean + k * n) for s, n in enumerate(noise, 1)}
        return {'per_seed': per_seed, 'never_fit_as_0': {'per_seed': per_seed}}
    arms = {a: {'arm': a, 'point': None, 'area': area(plain[a], k), 'variants': {'yarn': {'area': area(yarn[a], k)}}}
            for a, k in (('none', 1), ('vpad', spread or (-0.25 if yarn['vpad'] >= 0.99 else 2)))}
    test = lambda x, y: outcomes.area_test(x['per_seed'], y['per_seed'], unpaired=False)    # noqa: E731
    arms['vpad']['vs_control'] = {'control': 'none', 'family': '', 'area': {
        w: test(arms['vpad']['area'], arms['none']['area']) for w in ('left_out', 'never_fit_as_0')}}
    arms['vpad']['variants']['yarn']['vs_control'] = {'control': 'none', 'family': '', **{
        w: test(arms['vpad']['variants']['yarn']['area'], arms['none']['variants']['yarn']['area'])
        for w in ('left_out', 'never_fit_as_0')}}
    cfg = {'arms': {'none': {}, 'vpad': {}}, 'eval_variants': 'yarn', 'delta': 0.05,
           'comparisons': {'yarn': [['vpad@yarn', 'none@yarn'], ['vpad@yarn - none@yarn', 'vpad - none']]}}
    res = {'rule': {'control': 'none', 'delta': 0.05, 'families': {}}, 'eval': {'variants': ['yarn']}, 'arms': arms,
           'comparisons': outcomes.comparisons(arms, cfg, {'yarn': [
               (a, b, *(settings.parse_term(x, ['none', 'vpad'], ['yarn']) for x in (a, b)))
               for a, b in cfg['comparisons']['yarn']]})}
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
    from study import report
    t = lambda d, p: {'difference': d, 'ci95': [d - 0.02, d + 0.02], 'ci90': [d - 0.016, d + 0.016],  # noqa: E731
                      'sd': 0.03, 'p': p, 'p_holm': p, 'seeds': list(range(1, 13))}
    at = lambda arm, area, test=None: {'arm': arm, 'point': 10000, 'area': {'mean': area},   # noqa: E731
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


def test_study_scalings_weight_decay_family_is_corrected_over_both_its_tests():
    """study_scaling's config pre-registered one weight decay family of two tests, none_wd against none at +4000
    and its change from +1000 against none's; its summary now corrects them together (Holm over 2), where
    each was corrected alone before: none_wd - none, p 0.036, is not resolved after Holm."""
    from study import report
    res = report.load('study_scaling')
    t = res['arms']['none_wd +4000']['vs_control']['area']['left_out']
    change = res['long']['change_vs_control']['none_wd']
    assert [t['p_holm'], change['p_holm']] == stats.holm([t['p'], change['p']])
    assert stats.fmt_p(t['p_holm']) == '0.071' and stats.verdict(t, 0.05).startswith('not resolved after Holm')
    assert stats.decision(res['rule_change']['labels']['none_wd +4000 vs none +4000'][0]) == 'lower'   # the old rule's


def committed_tests():
    """(study, path, test) of every paired test in the committed summaries."""
    from study import report

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


def test_every_committed_label_agrees_with_its_own_tests_interval():
    """A property of the committed summaries, whatever their numbers: a 95% interval excludes 0 exactly where the
    unadjusted p is <= 0.05 (the interval is that test inverted), 'higher' / 'lower' never stands beside one that
    includes 0, and 'within' / 'equivalent' beside a 90% interval inside +-delta; and the README's verdict table
    quotes no 'higher' / 'lower' beside an interval that includes 0. (That every number is what the per-seed
    numbers give, and every table what the summaries give, is `python -m study.report --check`'s, which .ci/run
    runs.)"""
    from study import report
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


def test_a_typo_or_help_never_rewrites_a_readme():
    from study import report
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
    from study import report
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
    from study import report
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
    from study import report
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


@pytest.fixture
def committed(tmp_path, monkeypatch):
    """study.report over a copy of the committed summaries, their results.md and the READMEs with tables; each
    summary's own numbers taken as checked (derived: --check's, on one study below), the headline not drawn."""
    import shutil
    from study import plots, report
    for name in os.listdir(os.path.join(report.ROOT, 'results')):
        if os.path.isfile(os.path.join(report.ROOT, 'results', name, 'results.json')):
            os.makedirs(tmp_path / 'results' / name)
            for f in ('results.json', 'results.md', 'README.md'):
                if os.path.exists(os.path.join(report.ROOT, 'results', name, f)):
                    shutil.copy(os.path.join(report.ROOT, 'results', name, f), tmp_path / 'results' / name)
    shutil.copy(os.path.join(report.ROOT, report.TABLE), tmp_path / report.TABLE)
    monkeypatch.setattr(report, 'ROOT', str(tmp_path))
    monkeypatch.setattr(plots, 'draw_headline', lambda *a: None)
    return tmp_path


def one_line(*argv):
    from study import report
    with pytest.raises(SystemExit) as e:
        report.main(list(argv))
    assert isinstance(e.value.code, str) and len(e.value.code.splitlines()) == 1, e.value.code
    return e.value.code


def test_the_readme_rewrite_is_atomic_and_a_damaged_or_missing_summary_is_refused(committed, monkeypatch):
    """A write that fails (a full disk) leaves the README as it was and ends in one line; markers in the wrong
    order, a results.json cut short, empty or missing are one line naming what to fix, and no table is written
    over from less (a missing summary rewrote both scales tables to 'not yet', exit 0)."""
    import errno
    from study import report
    monkeypatch.setattr(report, 'derived', lambda *a: None)
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


@pytest.mark.parametrize('edit, says', [
    (lambda t, arms: t.update(difference=None), 'left_out/difference is null, its per-seed numbers give 0.00'),
    (lambda t, arms: t.update(difference='abc'), 'left_out/difference is "abc", not a number'),
    (lambda t, arms: t['per_seed'].update({'3': t['per_seed']['3'] + 0.01}), 'left_out/per_seed/3 is'),
    (lambda t, arms: arms['none']['area']['per_seed'].update({'3': 0.5}), 'arms/none/area/mean is 0.41'),
    (lambda t, arms: arms['none'].update(area=[0.4]), 'is not a summary this code reads ('),
], ids=['null', 'abc', 'per_seed', 'an area', 'a shape'])
def test_check_names_the_first_number_a_summary_does_not_give_in_one_line(committed, edit, says):
    """A results.json whose number was edited to null or 'abc' gave a traceback, and one no table shows (a
    test's per-seed differences) passed --check: every number is held against what the per-seed numbers give."""
    path = committed / 'results' / 'study_continue_sensitive' / 'results.json'
    res = json.loads(path.read_text())
    edit(res['arms']['vpad']['vs_control']['area']['left_out'], res['arms'])
    path.write_text(json.dumps(res))
    msg = one_line('--check')
    assert msg.startswith('results/study_continue_sensitive/results.json') and says in msg, msg
    assert 'git checkout -- results/study_continue_sensitive/results.json' in msg
    assert one_line() == msg                                  # and the README tables are not written from it


def test_a_step_median_is_drawn_only_where_half_of_the_runs_still_train():
    """Three runs ending at steps 2, 4 and 6: the median at step 6 would be the last run's value alone."""
    from study.plots import median_while_most_train
    per_seed = {1: {0: 0.0, 2: 0.5}, 2: {0: 0.2, 2: 0.7, 4: 0.9}, 3: {0: 0.4, 2: 0.6, 4: 0.1, 6: 1.0}}
    assert median_while_most_train(per_seed) == ([0, 2, 4], [0.2, 0.6, 0.5])
