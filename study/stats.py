"""
The tests a study runs, in plain Python (math.comb, no scipy, no torch): tests/test_stats.py checks
them against scipy's numbers. A run nearly always either extrapolates or collapses and a study has
a handful of seeds per arm, so per-run outcomes and exact tests, not a mean +- std over seeds alone.
"""

import itertools
import math
import random
import statistics


def mean_std(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return m, sd


TESTS = {'alpha': 0.05, 'power': 0.8}     # a dict, not config keys: fixed with the tests they size


# Student t quantiles for df 1..30: t_0.975 (the 95% interval) and t_0.95 (the 90% interval of two one-sided tests)
T_QUANTILES = {0.975: (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
                       2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
                       2.052, 2.048, 2.045, 2.042),
               0.95: (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771,
                      1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706,
                      1.703, 1.701, 1.699, 1.697)}
Z_QUANTILES = {0.975: 1.959963984540054, 0.95: 1.6448536269514722}


def fisher_exact(a, b, c, d):
    """Two-sided Fisher exact test of the 2x2 table [[a, b], [c, d]]: with the margins fixed, the
    probability of a table no likelier than this one. The weights are integers, so ties are exact."""
    r1, r2, c1 = a + b, c + d, a + c
    weight = lambda x: math.comb(r1, x) * math.comb(r2, c1 - x)  # noqa: E731
    observed = weight(a)
    return (sum(w for w in map(weight, range(max(0, c1 - r2), min(r1, c1) + 1)) if w <= observed)
            / math.comb(r1 + r2, c1))


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


def mean_ci(xs, clip=True, level=0.95):
    """-> (mean, Student t interval at `level` (0.95 or 0.90), clipped to [0, 1] for accuracies unless
    clip=False (a difference)); the interval needs 2 values."""
    if not xs:
        return None, None
    m, sd = mean_std(xs)
    if sd is None:
        return m, None
    lo, hi = t_interval(m, sd, len(xs), level)
    return m, [max(0.0, lo), min(1.0, hi)] if clip else [lo, hi]


def t_interval(m, sd, n, level=0.95):
    """The Student t interval at `level` (0.95 or 0.90) of a mean m of n values with sample sd."""
    df, q = n - 1, {0.95: 0.975, 0.90: 0.95}[level]
    z, table = Z_QUANTILES[q], T_QUANTILES[q]      # past the table, the Cornish-Fisher expansion in 1/df
    t = (table[df - 1] if df <= len(table)
         else z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2))
    half = t * sd / math.sqrt(n)
    return [m - half, m + half]


DELTA = 0.05    # the smallest area difference of interest, where a study's config (or its results.json) sets none


def range_text(rng):
    """An arm's median range ({'per_seed': {seed: multiple}}) as evaluated multiples: '8x', or '8x-16x'
    where the median of an even count falls between two (12x was never evaluated)."""
    values = sorted(rng['per_seed'].values())
    if not values:
        return '-'
    lo, hi = statistics.median_low(values), statistics.median_high(values)
    return f"{lo:g}x" if lo == hi else f"{lo:g}x-{hi:g}x"


def early_late(snapshots, early=0, late=0):
    """A study's two points of a trunk: early_snapshot and late_snapshot, 0 meaning the first and the last."""
    return early or snapshots[0], late or snapshots[-1]


def point_text(point, fixed):
    """A trunk's point as the tables name it: '+4000' (fit + 4000, cooled) or, at fixed steps
    (snapshots_at_iter), 'at 16000' (step 16000 of its own training, cooled)."""
    return f"at {point}" if fixed else f"+{point}"


def at_point(point, fixed):
    """The same in a sentence: 'at +4000', 'at 16000'."""
    return point_text(point, fixed) if fixed else f"at +{point}"


def fixed_steps(results):
    """Whether a summary's points are fixed steps of each trunk's training rather than steps past its fit."""
    return bool(results.get('long', {}).get('fixed_steps'))


def second_analysis(fixed):
    """The key of the analysis beside the primary: with never-fit runs as area 0 (steps past the fit, where
    the primary leaves them out), or with fit runs only (fixed steps, where the primary counts every run's
    measured area, fit by then or not)."""
    return 'fit_runs_only' if fixed else 'never_fit_as_0'


def fmt_p(p):
    """A p-value as the tables print it: 3 decimals, or 2 significant digits below 0.001."""
    return '-' if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def verdict(t, delta):
    """The label of a paired test from the numbers results.json holds (difference, sd, seeds, ci95,
    p_holm, ci90, areas), under the current wording of the rule (a study summarized before its 90% interval
    was stored gets it from its sd and seeds): the one label every table prints."""
    ci90 = t.get('ci90') or (t_interval(t['difference'], t['sd'], len(t['seeds']), 0.90)
                             if t['sd'] is not None else None)
    return label(t.get('p_holm', t['p']), ci90, t['ci95'], delta, ceiling=at_ceiling(t))


CEILING = 0.99   # an arm whose mean area is at least this has (almost) no room left to differ: "at the ceiling"


def at_ceiling(t):
    """Whether a paired area test is built from an arm (or an arm under a variant, or either side of an
    interaction) whose mean area over the test's seeds is >= CEILING: t['areas'], {term: mean area}."""
    return any(m is not None and m >= CEILING for m in (t.get('areas') or {}).values())


MARGIN = 0.005   # a Holm p or an interval bound this close to its threshold reads "at the margin"


def inside(ci90, delta):
    """Whether a 90% interval lies inside (-delta, +delta): a difference too small to matter."""
    return ci90 is not None and -delta < ci90[0] and ci90[1] < delta


def label(p_holm, ci90, ci95, delta, alpha=0.05, ceiling=False):
    """A comparison's verdict, read from its test and its intervals, never from a p-value alone:
    'higher' / 'lower' where the Holm-adjusted p (exact sign flip) is <= alpha (the sign of the
    interval's centre), followed by ', within +-delta' where the unadjusted 90% interval (Student t) lies
    inside (-delta, +delta) too (resolved, but too small to matter); 'equivalent within +-delta' where that
    interval lies inside and the Holm p is above alpha (two one-sided tests at alpha, not adjusted for
    multiplicity); else 'not resolved: [a, b]' with the 95% interval, or 'not resolved after Holm' where
    that interval excludes 0 but the Holm p is above alpha (both quoted). A Holm p within MARGIN of alpha,
    or a 90% bound within MARGIN of delta, adds '(at the margin: ...)' to the words it decides; ceiling
    (an arm the comparison is built from at the ceiling, at_ceiling) adds ', at the ceiling' after them all."""
    if ci95 is None:
        return 'not resolved: one seed' + ', at the ceiling' * ceiling
    near_p = p_holm is not None and abs(p_holm - alpha) <= MARGIN
    bound = max(-ci90[0], ci90[1]) if ci90 else None          # the 90% interval's bound farthest from 0
    near_bound = delta > 0 and bound is not None and abs(bound - delta) <= MARGIN     # (delta 0: no margin to be at)
    at_bound = f" (at the margin: 90% bound {bound:.3f})" if near_bound else ''
    interval = f"[{ci95[0]:+.3f}, {ci95[1]:+.3f}]"
    if p_holm is not None and p_holm <= alpha:
        text = ('higher' if ci95[0] + ci95[1] > 0 else 'lower') + (
            f" (at the margin: Holm p {p_holm:.3f})" if near_p else '')
        if inside(ci90, delta):
            text += f", within +-{delta:g}" + at_bound
    elif inside(ci90, delta):
        text = f"equivalent within +-{delta:g}" + at_bound
    else:
        margin = [f"Holm p {p_holm:.3f}"] * near_p + [f"90% bound {bound:.3f} against +-{delta:g}"] * near_bound
        margin = f" (at the margin: {'; '.join(margin)})" if margin else ''
        if (ci95[0] > 0 or ci95[1] < 0) and p_holm is not None:
            text = f"not resolved after Holm: {interval} excludes 0, Holm p {fmt_p(p_holm)}" + margin
        else:
            text = f"not resolved: {interval}" + margin
    return text + (', at the ceiling' if ceiling else '')


def label_rule(delta, alpha=0.05):
    """The wording of label() in one sentence, as a summary states its rule (results.json, results.md)."""
    return (f"from the paired difference: 'higher' / 'lower' where its Holm-adjusted p (exact sign flip, within "
            f"its family) is <= {alpha}, followed by ', within +-{delta:g}' where its unadjusted 90% interval "
            f"(Student t) lies inside +-{delta:g} too (a difference too small to matter); 'equivalent within "
            f"+-{delta:g}' where that interval lies inside and the Holm p is above {alpha}; else 'not resolved' "
            f"with its 95% interval, 'after Holm' where that interval excludes 0 but the Holm p is above {alpha}; "
            f"'at the margin' where the Holm p or a 90% bound lies within {MARGIN} of its threshold; ', at the "
            f"ceiling' after the other words where an arm the comparison is built from (either side, or a term of "
            f"an interaction) has a mean area >= {CEILING} over the compared seeds")


def decision(text):
    """What a label decides, without its annotations: 'higher', 'lower', 'equivalent' or 'not resolved'."""
    return next(d for d in ('higher', 'lower', 'equivalent', 'not resolved') if text.startswith(d))


def within(text):
    """Whether a label says its difference lies inside +-delta: equivalent, or resolved but within it."""
    return decision(text) == 'equivalent' or ', within +-' in text


def leave_one_out(tests, delta, alpha=0.05):
    """The robustness of one Holm family's paired tests (each with its per-seed differences): with each
    seed left out of every test of the family in turn, the range of each test's Holm p and whether its
    label's decision survives every leave-one-out; the seeds whose removal changes it. In place."""
    seeds = sorted({s for t in tests for s in t['per_seed']}, key=int)
    runs = {id(t): [] for t in tests}
    for out in seeds:
        ds = [[d for s, d in t['per_seed'].items() if s != out] for t in tests]
        ps = [sign_flip_test(d)[0] if len(d) > 1 else 1.0 for d in ds]
        for t, d, p in zip(tests, ds, holm(ps)):
            mean, ci95 = mean_ci(d, clip=False)
            ci90 = mean_ci(d, clip=False, level=0.90)[1]
            runs[id(t)].append((out, p, decision(label(p, ci90, ci95, delta, alpha)) if ci95 else 'not resolved'))
    for t in tests:
        got = runs[id(t)]
        if not got:
            continue
        keep = decision(label(t['p_holm'], t['ci90'], t['ci95'], delta, alpha))
        t['leave_one_out'] = {'p_holm': [min(p for _, p, _ in got), max(p for _, p, _ in got)],
                              'survives': all(d == keep for _, _, d in got),
                              'flips': [int(s) for s, _, d in got if d != keep]}


def pearson(xs, ys):
    """-> (r, its 95% interval by Fisher's z, n): the linear correlation of paired values; the
    interval needs 4 pairs and values that vary."""
    n = len(xs)
    if n < 3:
        return None, None, n
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    if not sxx or not syy:
        return None, None, n
    r = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
    if n < 4 or abs(r) == 1:
        return r, None, n
    z, half = math.atanh(r), Z_QUANTILES[0.975] / math.sqrt(n - 3)
    return r, [math.tanh(z - half), math.tanh(z + half)], n


def holm(ps):
    """Holm's step-down adjustment of p-values (same order): controls the family-wise error over the arms."""
    adjusted, running = [None] * len(ps), 0.0
    for rank, i in enumerate(sorted(range(len(ps)), key=lambda i: ps[i])):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


CHANGE = "'s change"   # a family's entry "arm's change": that arm's change (early -> late) against the control's


def family_arms(entries):
    """A family's arms, each tested against the control: its entries but the changes it names ("arm's change")."""
    return [e for e in entries if not e.endswith(CHANGE)]


def named_changes(families):
    """{arm: family} of the changes the families name ("arm's change"): each tested in its family together
    with the family's arms at the late point (one Holm family), not in a family of changes apart."""
    return {e[:-len(CHANGE)]: f for f, entries in (families or {}).items() for e in entries if e.endswith(CHANGE)}


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
        hits = sum(diff(sum(pooled[i] for i in idx)) >= observed
                   for idx in itertools.combinations(range(len(pooled)), n))
        return hits / splits, f"exact: all {splits:,} splits"
    rng = random.Random(seed)
    hits = sum(diff(sum(rng.sample(pooled, n))) >= observed for _ in range(n_random))
    return ((hits + 1) / (n_random + 1),
            f"Monte Carlo: {n_random:,} random splits (seed {seed}), p = (hits + 1) / (draws + 1)")


def sign_flip_test(d, max_exact=2 ** 16, n_random=20_000, seed=0):
    """Two-sided paired test of mean(d) = 0 over per-seed differences d: under the null each
    difference is as likely negated, so p is the share of sign patterns whose |sum| is at least the
    observed one. Every pattern when there are at most max_exact, else n_random random ones. -> (p, method)."""
    observed = abs(sum(d)) - 1e-9
    if 2 ** len(d) <= max_exact:
        hits = sum(abs(sum(s * v for s, v in zip(signs, d))) >= observed
                   for signs in itertools.product((1, -1), repeat=len(d)))
        return hits / 2 ** len(d), f"exact: all {2 ** len(d):,} sign patterns"
    rng = random.Random(seed)
    hits = sum(abs(sum(v if rng.random() < 0.5 else -v for v in d)) >= observed for _ in range(n_random))
    return ((hits + 1) / (n_random + 1),
            f"Monte Carlo: {n_random:,} random sign patterns (seed {seed}), p = (hits + 1) / (draws + 1)")


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
    z = {0.05: Z_QUANTILES[0.975]}[alpha] + {0.8: 0.8416212335729143}[power]
    return max(math.ceil(math.log2(2 / alpha)), math.ceil((z * sd / shift) ** 2))


def power_for_shift(n, sd, shift, alpha=0.05):
    """The power of n paired seeds to detect a mean shift `shift` whose per-seed differences have
    standard deviation sd, two-sided at alpha (the normal approximation seeds_for_shift inverts):
    Phi(|shift| sqrt(n) / sd - z_(1-alpha/2))."""
    z = {0.05: Z_QUANTILES[0.975]}[alpha]
    return 0.5 * (1 + math.erf((abs(shift) * math.sqrt(n) / sd - z) / math.sqrt(2)))


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
