"""study/stats.py: each test is scipy's, so what is checked here is what this repo adds to it: the sign flip's
interval as that test inverted (its ends against scipy's own p just inside and just outside), ties that exact
arithmetic makes and floats break, the labels read from a test and its intervals, Holm, Fisher's power by
enumeration, the leave-one-out robustness; the labels a summary's paired tests get (study/derive.py). The README
tables written from the committed results are tests/test_publish.py's."""
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

def planted_study(plain, yarn, spread=None):
    """A summary of arms none and vpad on 8 seeds, from planted mean areas per arm, plain and under yarn
    (each seed off its arm's mean by a small, different amount; vpad's `spread` times none's): vpad against
    none plain and under yarn, and the comparisons vpad@yarn - none@yarn and the interaction
    (vpad@yarn - none@yarn) - (vpad - none), labelled by derive.relabel as every summary's paired tests are."""
    from study import derive, outcomes, settings
    noise = [0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001, -0.004]

    def area(mean, k):               # the arm's areas per seed, none above 1
        per_seed = {str(s): min(1.0, mean + k * n) for s, n in enumerate(noise, 1)}
        return {'per_seed': per_seed, 'never_fit_as_0': {'per_seed': per_seed}}
    arms = {a: {'arm': a, 'point': None, 'area': area(plain[a], k), 'variants': {'yarn': {'area': area(yarn[a], k)}}}
            for a, k in (('none', 1), ('vpad', spread or (-0.25 if yarn['vpad'] >= 0.99 else 2)))}
    test = lambda x, y: derive.area_test(x['per_seed'], y['per_seed'], unpaired=False)    # noqa: E731
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
    derive.relabel(res)
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


def test_a_step_median_is_drawn_only_where_half_of_the_runs_still_train():
    """Three runs ending at steps 2, 4 and 6: the median at step 6 would be the last run's value alone."""
    from study.plots import median_while_most_train
    per_seed = {1: {0: 0.0, 2: 0.5}, 2: {0: 0.2, 2: 0.7, 4: 0.9}, 3: {0: 0.4, 2: 0.6, 4: 0.1, 6: 1.0}}
    assert median_while_most_train(per_seed) == ([0, 2, 4], [0.2, 0.6, 0.5])
