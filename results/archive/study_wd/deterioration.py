"""
Deterioration during training, from the quick evals in each run's log.jsonl (every 250 steps, 32
examples per point): a run deteriorates when its 16x accuracy falls >= 0.2 below its running maximum
since the fit for >= 2 consecutive quick evals. Prints each arm's count and Fisher's exact test of
none_wd against none.

    python results/archive/study_wd/deterioration.py out/study_wd
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.getcwd())            # run from the repo root: the studies' Fisher test (no torch)
from study.stats import deteriorates, fisher_exact  # noqa: E402

MULTIPLE, DROP, CONSECUTIVE = '16x', 0.2, 2


def after_fit(records):
    """The run's 16x accuracy at each quick eval from its fit on (the final eval has other multiples)."""
    return [r['length_eval']['mqar'][MULTIPLE] for r in records if r.get('fit_iter') is not None and not r.get('final')]


out = sys.argv[1] if len(sys.argv) > 1 else 'out/study_wd'
counts = {}
for arm in ('none', 'none_wd'):
    for log in sorted(glob.glob(os.path.join(out, arm, 'seed*', 'log.jsonl'))):
        records = [json.loads(line) for line in open(log)]
        if not any(r.get('final') for r in records):
            continue                                 # not finished
        after = after_fit(records)
        hit = deteriorates(after, DROP, CONSECUTIVE)
        counts.setdefault(arm, []).append(hit)
        print(f"{arm:8} {os.path.basename(os.path.dirname(log)):7} fit at {records[-1]['fit_iter']}, {len(after)} quick evals "
              f"after it: {MULTIPLE} min {min(after):.2f}, max {max(after):.2f}, last {after[-1]:.2f}"
              f"{'  deteriorates' if hit else ''}")
(a, b), (c, d) = [(sum(counts.get(arm, [])), len(counts.get(arm, [])) - sum(counts.get(arm, []))) for arm in ('none_wd', 'none')]
print(f"deteriorate: none_wd {a} of {a + b}, none {c} of {c + d}; Fisher p = {fisher_exact(a, b, c, d):.3f}")
