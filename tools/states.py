"""
Where a Mamba2 model's recurrent state goes past its training length: each Mamba2 layer's state h_t
(heads x p x n) read at every position of held-out examples of 1x..64x the training length T, on the task
the run trained on.

    python -m tools.states --out_dirs=out/mamba2_sensitive --multiples=1,4,16,64

Per layer and per stretch of positions (0, T], (T, 2T], (2T, 4T], ...: the state's norm (Frobenius per
head, mean over heads and examples; and its largest), and the share of its coordinates that lie outside
the range each coordinate took at the positions of the 1x examples (min..max over those examples and
positions): a model that never trained past T has never been in a state outside that range. The states
come from the recurrence run step by step (model.ssd_scan_sequential's), which the mixer's chunked scan
equals to rounding.
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import contextlib
import json
import os
import sys

import torch

import model as M
import sample_data
from base import rundir
from configurator import configure, items
from eval_lengths import load_run, parse_multiples

SETTINGS = dict(
    out_dirs='out/mamba2_sensitive',   # run dirs with Mamba2 layers, comma-separated
    multiples='1,2,4,8,16,32,64',      # lengths, in multiples of each run's training length; 1 sets the range
    eval_samples=16,                   # held-out examples per length (the eval's first ones)
    json='',                           # also write the numbers to this file
)


class Recorder:
    """Stands in for model.ssd_scan: the recurrence step by step, each layer's state measured at every
    position. envelope: {layer: (lo, hi)} per coordinate, collected at 1x and read at longer lengths."""

    def __init__(self, T):
        self.T, self.layer, self.envelope, self.stats, self.collect = T, 0, {}, {}, False

    def __call__(self, x, dt, A, B, C, chunk_size, initial_state=None, fast=False):
        b, t, h, p = x.shape
        x, dt, A, B, C = (u.float() for u in (x, dt, A, B, C))
        B, C = (u.expand(b, t, h, u.shape[-1]) for u in (B, C))               # the mixer's one group, every head
        state = x.new_zeros(b, h, p, B.shape[-1]) if initial_state is None else initial_state.float()
        ys, norms, outside = [], [], []
        lo, hi = self.envelope.get(self.layer, (None, None))
        for i in range(t):
            state = torch.exp(dt[:, i] * A)[..., None, None] * state + (dt[:, i, :, None] * x[:, i])[..., None] \
                * B[:, i, :, None, :]                                             # (b, h, p, n)
            ys.append(torch.einsum('bhpn,bhn->bhp', state, C[:, i]))
            norms.append(state.flatten(2).norm(dim=-1).mean(-1))                  # (b,): per head, mean over heads
            if self.collect:
                lo = state.amin(0) if lo is None else torch.minimum(lo, state.amin(0))
                hi = state.amax(0) if hi is None else torch.maximum(hi, state.amax(0))
            elif lo is not None:
                outside.append(((state < lo) | (state > hi)).flatten(1).float().mean(1))   # (b,)
        if self.collect:
            self.envelope[self.layer] = (lo, hi)
        self.stats[self.layer] = (torch.stack(norms, 1), torch.stack(outside, 1) if outside else None)   # (b, t)
        self.layer += 1
        return torch.stack(ys, 1).to(x.dtype), state


def stretches(t, T):
    """The positions (0, T], (T, 2T], (2T, 4T], ... up to t, as (label, first index, end index)."""
    out, lo, hi = [], 0, T
    while lo < t:
        out.append((f"{lo // T}-{hi // T}T" if lo else "0-1T", lo, min(hi, t)))
        lo, hi = hi, 2 * hi
    return out


@torch.no_grad()
def measure(model, tok, task, mults, n):
    """{layer: {multiple: {stretch: (mean norm, max norm, share outside the 1x range)}}} of a model on n
    held-out examples of `task` per length (the Mamba2 layers counted from 0)."""
    T = model.config.block_size
    rec, out = Recorder(T), {}
    scan, M.ssd_scan = M.ssd_scan, rec
    try:
        for m in sorted(set(mults) | {1}):
            examples = sample_data.eval_examples(task, tok, m * T, n)
            idx = torch.tensor([ex.prompt for ex in examples])                 # equal lengths: one batch
            rec.layer, rec.collect = 0, m == 1
            model(idx)
            for layer, (norms, outside) in rec.stats.items():
                out.setdefault(layer, {})[m] = {
                    name: (norms[:, a:b].mean().item(), norms[:, a:b].max().item(),
                           outside[:, a:b].mean().item() if outside is not None else 0.0)
                    for name, a, b in stretches(norms.shape[1], T)}
    finally:
        M.ssd_scan = scan
    return out


def main(argv):
    cfg = configure(SETTINGS, argv)
    try:
        runs, mults = items('out_dirs', cfg['out_dirs']), parse_multiples('multiples', cfg['multiples'])
    except ValueError as e:
        raise SystemExit(f"config error: {e}")
    configurator.started()
    torch.manual_seed(0)
    results = {}
    for run in runs:
        if not os.path.isfile(os.path.join(run, rundir.CKPT)):     # (load_run's advice trains a transformer)
            raise SystemExit(f"no checkpoint at {os.path.join(run, rundir.CKPT)}: train a Mamba2 run first, e.g. "
                             f"python train.py config/mamba2_sensitive.py --out_dir={run}")
        with contextlib.redirect_stdout(sys.stderr):
            model, tok, train_cfg = load_run(run, 'cpu')
        if 'M' not in model.config.block_pattern:
            raise SystemExit(f"{run} has no Mamba2 layer (block_pattern={model.config.block_pattern!r}): no state "
                             f"to read")
        task = sample_data.parse_tasks(train_cfg['tasks'])[0][0]
        results[run] = measure(model, tok, task, mults, cfg['eval_samples'])
        for layer, by_m in results[run].items():
            print(f"\n{run}, Mamba2 layer {layer}: state norm, mean (max), and share of coordinates outside the "
                  f"1x range, by stretch of positions ({cfg['eval_samples']} examples per length)")
            for m, by_stretch in by_m.items():
                print(f"  {m:>3}x  " + "  ".join(f"{name}: {mean:.2f} ({top:.2f}) {out:.1%}"
                                                  for name, (mean, top, out) in by_stretch.items()))
    if cfg['json']:
        with open(cfg['json'], 'w') as f:
            json.dump(results, f, indent=1)


if __name__ == '__main__':
    main(sys.argv[1:])
