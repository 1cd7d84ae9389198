"""
The tests a study runs, in plain Python (math.comb, no scipy, no torch): tests/test_stats.py checks
them against scipy's numbers. A run nearly always either extrapolates or collapses and a study has
a handful of seeds per arm, so per-run outcomes and exact tests, not a mean +- std over seeds alone.
"""

import itertools
import math
import random


def mean_std(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return m, sd


TESTS = {'alpha': 0.05, 'power': 0.8}     # a dict, not config keys: fixed with the tests they size


T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # t_0.975, df 1..30


def fisher_exact(a, b, c, d):
    """Two-sided Fisher exact test of the 2x2 table [[a, b], [c, d]]: with the margins fixed, the
    probability of a table no likelier than this one. The weights are integers, so ties are exact."""
    r1, r2, c1 = a + b, c + d, a + c
    weight = lambda x: math.comb(r1, x) * math.comb(r2, c1 - x)  # noqa: E731
    observed = weight(a)
    return sum(w for w in map(weight, range(max(0, c1 - r2), min(r1, c1) + 1)) if w <= observed) / math.comb(r1 + r2, c1)


def smallest_fisher_p(n1, n2):
    """The smallest p Fisher's test can give with n1 and n2 runs: above alpha, no outcome is significant."""
    return min(fisher_exact(a, n1 - a, c, n2 - c) for a in range(n1 + 1) for c in range(n2 + 1))


def wilson(k, n, z=1.959963984540054):
    """95% Wilson score interval of a share k/n: unlike k/n ± 1.96 se it stays in [0, 1] and is not
    zero-width at 0/n or n/n, which are the common shares here."""
    if n == 0:
        return None
    p, z2 = k / n, z * z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [0.0 if k == 0 else centre - half, 1.0 if k == n else centre + half]   # exact ends, no float dust


def mean_ci(xs, clip=True):
    """-> (mean, 95% Student t interval, clipped to [0, 1] for accuracies unless clip=False (a
    difference)); the interval needs 2 values."""
    if not xs:
        return None, None
    m, sd = mean_std(xs)
    if sd is None:
        return m, None
    df = len(xs) - 1
    z = 1.959963984540054
    t = T975[df - 1] if df <= len(T975) else z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
    half = t * sd / math.sqrt(len(xs))
    return m, [max(0.0, m - half), min(1.0, m + half)] if clip else [m - half, m + half]


def fmt_p(p):
    """A p-value as the tables print it: 3 decimals, or 2 significant digits below 0.001."""
    return '-' if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def holm(ps):
    """Holm's step-down adjustment of p-values (same order): controls the family-wise error over the arms."""
    adjusted, running = [None] * len(ps), 0.0
    for rank, i in enumerate(sorted(range(len(ps)), key=lambda i: ps[i])):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def permutation_test(x, y, max_exact=200_000, n_random=20_000, seed=0):
    """Two-sided permutation test of mean(x) = mean(y): the share of the splits of the pooled values
    into groups of len(x) and len(y) whose |difference of means| is at least the observed one.
    Every split when there are at most max_exact, else n_random random ones. -> (p, method)."""
    pooled, n = list(x) + list(y), len(x)
    total = sum(pooled)
    diff = lambda sx: abs(sx / n - (total - sx) / len(y))  # noqa: E731
    observed = diff(sum(x)) - 1e-9               # a tie in exact arithmetic must count despite float noise
    splits = math.comb(len(pooled), n)
    if splits <= max_exact:
        hits = sum(diff(sum(pooled[i] for i in idx)) >= observed for idx in itertools.combinations(range(len(pooled)), n))
        return hits / splits, f"exact: all {splits:,} splits"
    rng = random.Random(seed)
    hits = sum(diff(sum(rng.sample(pooled, n))) >= observed for _ in range(n_random))
    return (hits + 1) / (n_random + 1), f"Monte Carlo: {n_random:,} random splits (seed {seed}), p = (hits + 1) / (draws + 1)"


def sign_flip_test(d, max_exact=2 ** 16, n_random=20_000, seed=0):
    """Two-sided paired test of mean(d) = 0 over per-seed differences d: under the null each
    difference is as likely negated, so p is the share of sign patterns whose |sum| is at least the
    observed one. Every pattern when there are at most max_exact, else n_random random ones. -> (p, method)."""
    observed = abs(sum(d)) - 1e-9
    if 2 ** len(d) <= max_exact:
        hits = sum(abs(sum(s * v for s, v in zip(signs, d))) >= observed for signs in itertools.product((1, -1), repeat=len(d)))
        return hits / 2 ** len(d), f"exact: all {2 ** len(d):,} sign patterns"
    rng = random.Random(seed)
    hits = sum(abs(sum(v if rng.random() < 0.5 else -v for v in d)) >= observed for _ in range(n_random))
    return (hits + 1) / (n_random + 1), f"Monte Carlo: {n_random:,} random sign patterns (seed {seed}), p = (hits + 1) / (draws + 1)"


def power_fisher(p1, p2, n, alpha=0.05):
    """Power of the two-sided Fisher test at level alpha, n runs per arm, true rates p1 and p2:
    the chance of a significant table, summed exactly over both binomials. Given the total t of
    successes the test rejects the least likely tables (hypergeometric) while their mass is <= alpha."""
    comb = [math.comb(n, k) for k in range(n + 1)]
    b1 = [comb[k] * p1 ** k * (1 - p1) ** (n - k) for k in range(n + 1)]
    b2 = [comb[k] * p2 ** k * (1 - p2) ** (n - k) for k in range(n + 1)]
    power = 0.0
    for t in range(2 * n + 1):
        weights = sorted((comb[x] * comb[t - x], x) for x in range(max(0, t - n), min(n, t) + 1))
        total, mass = math.comb(2 * n, t), 0
        for w, tied in itertools.groupby(weights, key=lambda wx: wx[0]):   # equally likely tables share a p
            tied = [x for _, x in tied]
            mass += w * len(tied)
            if mass / total > alpha:
                break
            power += sum(b1[x] * b2[t - x] for x in tied)
    return power


def seeds_for_power(p1, p2, power=0.8, alpha=0.05, n_max=200):
    """The smallest n per arm at which power_fisher reaches `power`: an int, f'>{n_max}', or None
    when p1 == p2 (no effect: no n suffices)."""
    if p1 == p2:
        return None
    return next((n for n in range(1, n_max + 1) if power_fisher(p1, p2, n, alpha) >= power), f'>{n_max}')


def seeds_for_shift(sd, shift, power=0.8, alpha=0.05):
    """Paired seeds needed to detect a mean shift `shift` in a continuous outcome whose per-seed
    differences have standard deviation sd, two-sided at alpha (normal approximation:
    n = ((z_(1-alpha/2) + z_power) sd / shift)^2), and never fewer than the exact sign-flip test
    needs to reach alpha at all: its smallest p is 2 / 2^n (6 seeds at 0.05). None when sd is unknown."""
    if sd is None:
        return None
    z = {0.05: 1.959963984540054}[alpha] + {0.8: 0.8416212335729143}[power]
    return max(math.ceil(math.log2(2 / alpha)), math.ceil((z * sd / shift) ** 2))


def deteriorates(accs, drop, consecutive):
    """The deterioration rule over a run's quick evals since its fit: accuracy >= drop below its
    running maximum at `consecutive` evals in a row (one dip is noise)."""
    best, run = 0.0, 0
    for acc in accs:
        best = max(best, acc)
        run = run + 1 if acc <= best - drop else 0
        if run >= consecutive:
            return True
    return False
