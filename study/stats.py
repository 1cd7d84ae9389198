"""
The tests a study runs, from scipy.stats; tests/test_stats.py checks what this module adds to them. A run nearly
always either extrapolates or collapses and a study has a handful of seeds per arm, so per-run outcomes and
exact tests, not a mean +- std over seeds alone; and each interval comes from the test that gives its label:
the paired sign flip inverted, Wilson's for a share beside Fisher's p.
"""

import functools
import itertools
import math
import random

import numpy as np
from scipy import stats as sp

TESTS = {'alpha': 0.05, 'power': 0.8}     # a dict, not config keys: fixed with the tests they size
DELTA = 0.05       # the smallest area difference of interest, where a study's config (or its results.json) sets none
CEILING = 0.99     # an arm whose mean area is at least this has (almost) no room left to differ: "at the ceiling"
MARGIN = 0.005     # a Holm p or a 90% bound this close to its threshold reads "at the margin"
EXACT_FLIPS = 16   # the sign flip enumerates every pattern up to this many seeds (2^16), else RANDOM random ones
RANDOM = 20_000    # random sign patterns or splits (seed 0) where there are too many to enumerate
# statistics rounded to this many decimals before they are compared: values that tie in exact arithmetic (an area
# is a multiple of 1 / (examples x multiples)) differ in the last bits of a float, and a tie counts
DIGITS = 12


def mean_std(xs):
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None


def mean_ci(xs):
    """-> (mean, its 95% Student t interval clipped to [0, 1]) of an arm's accuracies or areas (needs 2)."""
    if not xs:
        return None, None
    m, sd = mean_std(xs)
    half = sd and sp.t.ppf(0.975, len(xs) - 1) * sd / math.sqrt(len(xs))
    return m, None if sd is None else [max(0.0, m - half), min(1.0, m + half)]


def fisher_exact(a, b, c, d):
    """Two-sided Fisher exact test of the 2x2 table [[a, b], [c, d]]."""
    return float(sp.fisher_exact([[a, b], [c, d]]).pvalue)


def smallest_fisher_p(n1, n2):
    """The smallest p Fisher's test can give with n1 and n2 runs: above alpha, no outcome is significant."""
    return min(fisher_exact(a, n1 - a, c, n2 - c) for a in range(n1 + 1) for c in range(n2 + 1))


def wilson(k, n):
    """95% Wilson score interval of a share k/n: it stays in [0, 1] and is not zero-width at 0/n or n/n."""
    if n == 0:
        return None
    ci = sp.binomtest(k, n).proportion_ci(0.95, method='wilson')
    return [0.0 if k == 0 else float(ci.low), 1.0 if k == n else float(ci.high)]   # exact ends, no float dust


def holm(ps):
    """Holm's step-down adjustment of p-values (same order): controls the family-wise error over the arms."""
    adjusted, running = [None] * len(ps), 0.0
    for rank, i in enumerate(sorted(range(len(ps)), key=lambda i: ps[i])):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def abs_mean_diff(x, y, axis):
    return np.round(np.abs(np.mean(x, axis=axis) - np.mean(y, axis=axis)), DIGITS)


def permutation_test(x, y, max_exact=200_000):
    """Two-sided permutation test of mean(x) = mean(y) over the splits of the pooled values: every split (scipy's
    enumeration) where there are at most max_exact, else RANDOM random ones (seed 0). -> (p, method)"""
    splits = math.comb(len(x) + len(y), len(x))
    exact = splits <= max_exact
    if not exact:       # the random splits the committed summaries drew (random.Random(0)): a rerun draws them again
        rng, pooled, n = random.Random(0), [*x, *y], len(x)
        total, observed = sum(pooled), abs(sum(x) / n - sum(y) / len(y)) - 1e-9
        hits = sum(abs(s / n - (total - s) / len(y)) >= observed
                   for s in (sum(rng.sample(pooled, n)) for _ in range(RANDOM)))
        p = (hits + 1) / (RANDOM + 1)
    elif min(len(x), len(y)) == 1:      # scipy asks for two values a sample: the one value is each pooled in turn
        pooled = [*x, *y]
        diffs = [abs_mean_diff(np.array([v]), np.delete(pooled, i), 0) for i, v in enumerate(pooled)]
        p = np.mean(np.array(diffs) >= abs_mean_diff(np.array(x), np.array(y), 0))
    else:
        p = sp.permutation_test((np.asarray(x, float), np.asarray(y, float)), abs_mean_diff, vectorized=True,
                                n_resamples=np.inf, alternative='greater').pvalue
    return float(p), (f"exact: all {splits:,} splits" if exact else
                      f"Monte Carlo: {RANDOM:,} random splits (seed 0), p = (hits + 1) / (draws + 1)")


@functools.lru_cache(maxsize=None)
def flips(n):
    """The sign patterns the paired test of n seeds runs over: every one up to EXACT_FLIPS seeds (scipy's
    exact enumeration), else RANDOM random ones (seed 0). -> (patterns, exact)"""
    if n <= EXACT_FLIPS:
        return np.array(list(itertools.product((1, -1), repeat=n))), True
    return np.random.default_rng(0).choice([1, -1], size=(RANDOM, n)), False


def sign_flip(d):
    """The paired test of mean(d) = 0 over per-seed differences d, each as likely negated under the null: its
    two-sided p (scipy's permutation_test, exact up to EXACT_FLIPS seeds) and its 95% and 90% intervals, the
    test inverted: the shifts s for which the test of d - s does not reject. A pattern (+ on the seeds A, - on
    the rest B) reaches the observed |sum(d - s)| iff s lies between mean(A) and mean(B) ((a-b)^2 >= (a+b)^2
    iff ab <= 0), so p(s) counts the patterns whose range [min, max] of those two means holds s; each range
    holds mean(d), so the shifts not rejected make an interval whose ends are order statistics of those mins
    and maxes. An end is None where no shift is rejected (below 6 seeds p cannot reach 0.05, below 5 0.10).
    -> {'p', 'method', 'ci95', 'ci90'}; one seed has no interval (None)."""
    return {k: list(v) if isinstance(v, list) else v for k, v in flipped(tuple(d)).items()}   # a copy to keep


@functools.lru_cache(maxsize=1 << 16)   # a leave-one-out and an old rule's labels test the same seeds again
def flipped(d):
    d, n = np.asarray(d, dtype=float), len(d)
    if n < 2:
        return {'p': 1.0, 'method': 'exact: all 2 sign patterns', 'ci95': None, 'ci90': None}
    signs, exact = flips(n)
    p = float(sp.permutation_test((d,), lambda x, axis: np.round(np.abs(np.mean(x, axis=axis)), DIGITS),
                                  permutation_type='samples', vectorized=True, n_resamples=np.inf if exact else RANDOM,
                                  alternative='greater', rng=0).pvalue)
    plus = signs > 0
    k = plus.sum(1)
    with np.errstate(invalid='ignore', divide='ignore'):
        a, b = np.round(plus @ d / k, DIGITS), np.round(~plus @ d / (n - k), DIGITS)
    whole = (k == 0) | (k == n)              # no flip, or all: they reach the observed sum whatever s is
    lows = np.sort(np.where(whole, -np.inf, np.minimum(a, b)))
    highs = np.sort(np.where(whole, np.inf, np.maximum(a, b)))[::-1]
    hits, draws = (0, len(signs)) if exact else (1, len(signs) + 1)    # scipy's p = (hits + count) / draws

    def interval(alpha):       # p(s) > alpha: at least `need` patterns reach it
        need = math.floor(alpha * draws - hits) + 1
        return [None if math.isinf(e) else float(e) for e in (lows[need - 1], highs[need - 1])]
    method = (f"exact: all {2 ** n:,} sign patterns" if exact else
              f"Monte Carlo: {RANDOM:,} random sign patterns (seed 0), p = (hits + 1) / (draws + 1)")
    return {'p': p, 'method': method, 'ci95': interval(0.05), 'ci90': interval(0.10)}


def pearson(xs, ys):
    """-> (r, its 95% interval by Fisher's z, n) of paired values: r needs 3 pairs that vary, the interval 4."""
    n = len(xs)
    if n < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None, None, n
    res = sp.pearsonr(xs, ys)
    r = max(-1.0, min(1.0, float(res.statistic)))
    ci = res.confidence_interval(0.95) if n >= 4 and abs(r) < 1 else None
    return r, ci and [float(ci.low), float(ci.high)], n


def power_fisher(p1, p2, n, alpha=TESTS['alpha']):
    """Power of the two-sided Fisher test at level alpha, n runs per arm, true rates p1 and p2, summed exactly
    over both binomials, table by table of those the test rejects (rejected)."""
    # Python floats: the same products and sums as numpy's scalars, faster to index
    b1, b2 = sp.binom.pmf(range(n + 1), n, p1).tolist(), sp.binom.pmf(range(n + 1), n, p2).tolist()
    power = 0.0
    for t, tied in rejected(n, alpha):
        power += sum(b1[x] * b2[t - x] for x in tied)
    return float(power)


@functools.lru_cache(maxsize=None)     # the tables depend on n alone, which seeds_for_power tries for every pair
def rejected(n, alpha):
    """The tables the two-sided Fisher test at level alpha rejects with n runs per arm: given the total t of
    successes it rejects the least likely tables (hypergeometric weights, integers: ties exact) while their mass
    is <= alpha. -> [(t, [arm 1's successes x of equally likely tables])], least likely first."""
    comb, out = [math.comb(n, k) for k in range(n + 1)], []
    for t in range(2 * n + 1):
        weights, mass = sorted((comb[x] * comb[t - x], x) for x in range(max(0, t - n), min(n, t) + 1)), 0
        for w, tied in itertools.groupby(weights, key=lambda wx: wx[0]):   # equally likely tables share a p
            tied = [x for _, x in tied]
            mass += w * len(tied)
            if mass / math.comb(2 * n, t) > alpha:
                break
            out.append((t, tied))
    return out


def seeds_for_power(p1, p2, n_max=200):
    """The smallest n per arm at which power_fisher reaches TESTS' power: an int, f'>{n_max}', or None when
    p1 == p2 (no effect: no n suffices)."""
    if p1 == p2:
        return None
    return next((n for n in range(1, n_max + 1) if power_fisher(p1, p2, n) >= TESTS['power']), f'>{n_max}')


def seeds_for_shift(sd, shift):
    """Paired seeds that detect a mean shift `shift` of differences with standard deviation sd, at TESTS' power
    and alpha (normal approximation: ((z_(1-alpha/2) + z_power) sd / shift)^2), and never fewer than the sign
    flip needs to reach alpha at all (its smallest p is 2 / 2^n: 6 seeds at 0.05). None when sd is unknown."""
    if sd is None:
        return None
    alpha = TESTS['alpha']
    z = sp.norm.ppf(1 - alpha / 2) + sp.norm.ppf(TESTS['power'])
    return max(math.ceil(math.log2(2 / alpha)), math.ceil((z * sd / shift) ** 2))


def deteriorates(accs, drop, consecutive):
    """The deterioration rule over a run's quick evals since its fit: accuracy >= drop below its running
    maximum at `consecutive` evals in a row (one dip is noise)."""
    best, run = 0.0, 0
    for acc in accs:
        best = max(best, acc)
        run = run + 1 if acc <= best - drop else 0
        if run >= consecutive:
            return True
    return False


# -----------------------------------------------------------------------------
# a paired test's label, read from its test: the one label every table prints

def fmt_p(p):
    """A p-value as the tables print it: 3 decimals, or 2 significant digits below 0.001."""
    return '-' if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_interval(ci):
    """A paired interval as the tables print it, signed: '[+0.001, +0.059]'; an unbounded end '-inf' / '+inf'."""
    return f"[{'-inf' if ci[0] is None else f'{ci[0]:+.3f}'}, {'+inf' if ci[1] is None else f'{ci[1]:+.3f}'}]"


def flips_text(t):
    """'; changes without seed 59' where leaving one seed out changes a test's decision, else ''."""
    r = t.get('leave_one_out')
    return '' if not r or r['survives'] else f"; changes without seed {', '.join(map(str, r['flips']))}"


def label(p_holm, ci90, ci95, delta, ceiling=False):
    """A comparison's verdict from its test (the sign flip) and that test's intervals: 'higher' / 'lower' where
    the Holm-adjusted p is <= alpha (the unadjusted 95% interval then excludes 0), followed by ', within +-delta'
    where the unadjusted 90% interval lies inside (-delta, +delta) too (resolved, too small to matter);
    'equivalent within +-delta' where it lies inside and the Holm p is above alpha (two one-sided tests, not
    adjusted for multiplicity); else 'not resolved: [a, b]' (the 95% interval), 'not resolved after Holm' where
    that excludes 0. '(at the margin: ...)' where the Holm p lies within MARGIN of alpha or a 90% bound of delta;
    ', at the ceiling' last where an arm the comparison is built from is at the ceiling (verdict)."""
    if ci95 is None:
        return 'not resolved: one seed' + ', at the ceiling' * ceiling
    lo, hi = ci95
    alpha = TESTS['alpha']
    excludes_0 = (lo is not None and lo > 0) or (hi is not None and hi < 0)
    bound = None if ci90 is None or None in ci90 else max(-ci90[0], ci90[1])   # the 90% bound farthest from 0
    inside = bound is not None and bound < delta
    margins = [f"Holm p {p_holm:.3f}"] if p_holm is not None and abs(p_holm - alpha) <= MARGIN else []
    if delta > 0 and bound is not None and abs(bound - delta) <= MARGIN:       # (delta 0, a shift in sds: none)
        margins.append(f"90% bound {bound:.3f} against +-{delta:g}")
    if p_holm is not None and p_holm <= alpha and excludes_0:
        text = ('higher' if lo is not None and lo > 0 else 'lower') + f", within +-{delta:g}" * inside
    elif inside:
        text = f"equivalent within +-{delta:g}"
    elif excludes_0 and p_holm is not None:
        text = f"not resolved after Holm: {fmt_interval(ci95)} excludes 0, Holm p {fmt_p(p_holm)}"
    else:
        text = f"not resolved: {fmt_interval(ci95)}"
    return text + (f" (at the margin: {'; '.join(margins)})" if margins else '') + ', at the ceiling' * ceiling


def verdict(t, delta):
    """The label of a paired test from what results.json holds: at the ceiling where an arm (a variant, a term
    of an interaction) it is built from has a mean area >= CEILING over its seeds (t['areas'])."""
    ceiling = any(m is not None and m >= CEILING for m in (t.get('areas') or {}).values())
    return label(t.get('p_holm', t['p']), t['ci90'], t['ci95'], delta, ceiling=ceiling)


def label_rule(delta):
    """The wording of label() in one sentence, as a summary states its rule (results.json, results.md)."""
    alpha = TESTS['alpha']
    return (f"from the paired difference's sign-flip test: 'higher' / 'lower' where its Holm-adjusted p (within "
            f"its family) is <= {alpha}, followed by ', within +-{delta:g}' where its unadjusted 90% interval lies "
            f"inside +-{delta:g} too (a difference too small to matter); 'equivalent within +-{delta:g}' where that "
            f"interval lies inside and the Holm p is above {alpha}; else 'not resolved' with its 95% interval, "
            f"'after Holm' where that interval excludes 0 but the Holm p is above {alpha}; 'at the margin' where "
            f"the Holm p or a 90% bound lies within {MARGIN} of its threshold; ', at the ceiling' after the other "
            f"words where an arm the comparison is built from (either side, or a term of an interaction) has a "
            f"mean area >= {CEILING} over the compared seeds. Each interval is the sign-flip test inverted: the "
            f"shifts s for which the test of the differences minus s does not reject (exact up to {EXACT_FLIPS} "
            f"seeds, as the test is), so a 95% interval excludes 0 exactly where the unadjusted p is <= {alpha}")


def decision(text):
    """What a label decides, without its annotations: 'higher', 'lower', 'equivalent' or 'not resolved'."""
    return next(d for d in ('higher', 'lower', 'equivalent', 'not resolved') if text.startswith(d))


def within(text):
    """Whether a label says its difference lies inside +-delta: equivalent, or resolved but within it."""
    return decision(text) == 'equivalent' or ', within +-' in text


def leave_one_out(tests, delta):
    """One Holm family's robustness, each seed left out of every test of the family in turn: each test's range
    of Holm p, whether its decision survives, the seeds whose removal changes it. In place."""
    seeds = sorted({s for t in tests for s in t['per_seed']}, key=int)
    runs = {id(t): [] for t in tests}
    for out in seeds:
        kept = [sign_flip(d) if len(d) > 1 else None
                for d in ([d for s, d in t['per_seed'].items() if s != out] for t in tests)]
        for t, k, p in zip(tests, kept, holm([k['p'] if k else 1.0 for k in kept])):
            runs[id(t)].append((out, p, decision(label(p, k['ci90'], k['ci95'], delta)) if k else
                                'not resolved'))
    for t in tests:
        got, keep = runs[id(t)], decision(label(t.get('p_holm', t['p']), t['ci90'], t['ci95'], delta))
        if got:
            t['leave_one_out'] = {'p_holm': [min(p for _, p, _ in got), max(p for _, p, _ in got)],
                                  'survives': all(d == keep for _, _, d in got),
                                  'flips': [int(s) for s, _, d in got if d != keep]}


# -----------------------------------------------------------------------------
# how the tables name a study's points, families and analyses

def range_text(rng):
    """An arm's median range as evaluated multiples: '8x', or '8x-16x' where the median falls between two."""
    values = sorted(rng['per_seed'].values())
    lo, hi = (values[(len(values) - 1) // 2], values[len(values) // 2]) if values else (None, None)
    return '-' if lo is None else f"{lo:g}x" if lo == hi else f"{lo:g}x-{hi:g}x"


def early_late(snapshots, early=0, late=0):
    """A study's two points of a trunk: early_snapshot and late_snapshot, 0 meaning the first and the last."""
    return early or snapshots[0], late or snapshots[-1]


def point_text(point, fixed):
    """A trunk's cooled point as the tables name it: '+4000' (fit + 4000) or, at fixed steps, 'at 16000'."""
    return f"at {point}" if fixed else f"+{point}"


def at_point(point, fixed):
    """The same in a sentence: 'at +4000', 'at 16000'."""
    return point_text(point, fixed) if fixed else f"at +{point}"


def by_arm_and_point(arms):
    """{(arm, point): its summary}: a summary's arms by the arm each reads and the point it is read at (a summary
    from before snapshots: the name, and no point)."""
    return {(a.get('arm', n), a.get('point')): a for n, a in arms.items()}


def fixed_steps(results):
    """Whether a summary's runs are read at fixed steps of their training (a trunk's snapshots at fixed steps, or
    runs that all train the same steps: every_run_counts) rather than steps past their fit."""
    return bool(results.get('long', {}).get('fixed_steps')) or any(a.get('fixed_steps')
                                                                   for a in results.get('arms', {}).values())


def second_analysis(fixed):
    """The analysis beside the primary: never-fit runs as area 0, or at fixed steps (where the primary counts
    every run measured) the runs fit by then only."""
    return 'fit_runs_only' if fixed else 'never_fit_as_0'


CHANGE = "'s change"   # a family's entry "arm's change": that arm's change (early -> late) against the control's


def family_arms(entries):
    """A family's arms, each tested against the control: its entries but the changes it names."""
    return [e for e in entries if not e.endswith(CHANGE)]


def named_changes(families):
    """{arm: family} of the changes the families name: each in one Holm family with its tests at the late point."""
    return {e[:-len(CHANGE)]: f for f, entries in (families or {}).items() for e in entries if e.endswith(CHANGE)}
