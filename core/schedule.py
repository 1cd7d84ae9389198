"""
The schedule of a run, from its settings and its fit: the learning rate at each step and the step
it stops at. Warmup, then the peak rate; with steps_after_fit (warmup-stable-decay) the peak until
the decay over the last cooldown_iters steps before the stop, fit + steps_after_fit, so every run
ends after the same decay however late it fit. A trunk (snapshots_after_fit) holds the peak to its
stop and keeps its state at fit + k for each snapshot k, the first checkpoint of a cooldown branch:
the run trained at the peak to fit + k and then decayed over cooldown_iters (Hagele et al. 2024's
way to measure one model at several lengths of training). A trunk at fixed steps (snapshots_at_iter)
is the same with its snapshots counted from step 0, not from the fit: it stops at its last snapshot,
max_iters, and each branch at k + cooldown_iters, fit or not. train.py runs it; ablate.py plans the
branches as runs of a study.
"""

import math
from dataclasses import dataclass
from typing import Optional

from configurator import items
from core import rundir


def fits(accs, threshold):
    """The fit rule: 1x accuracy >= threshold on every task of a length eval {task: {'1x': acc}}."""
    return all(by_m.get('1x') is not None and by_m['1x'] >= threshold for by_m in accs.values())


def parse_snapshots(text, key='snapshots_after_fit'):
    """snapshots_after_fit (or snapshots_at_iter): '1000,4000,10000' -> (1000, 4000, 10000); '' -> (); an
    empty or blank item ('1,,2', ' ') is refused, not dropped: a typo must not silently change a trunk's
    snapshots."""
    parts = items(key, text)
    try:
        steps = tuple(int(s) for s in parts)
    except ValueError:
        steps = None
    if steps is None or any(s <= 0 for s in steps) or list(steps) != sorted(set(steps)):
        raise ValueError(f"{key}={text!r}: give increasing positive steps " + (
            "past the fit, e.g. '1000,4000,10000'" if key == 'snapshots_after_fit' else
            "of the trunk's own training, e.g. '6000,11000,16000'"))
    return steps


def snapshots_of(cfg):
    """A trunk's snapshots and whether they are fixed steps of its training (snapshots_at_iter) rather than
    steps past its fit (snapshots_after_fit): -> (steps, fixed); ((), False) for a run that is no trunk.
    checks.check_schedule refuses both in one run."""
    fixed = parse_snapshots(cfg.get('snapshots_at_iter', ''), 'snapshots_at_iter')
    return (fixed, True) if fixed else (parse_snapshots(cfg.get('snapshots_after_fit', '')), False)


def branch_overrides(cfg, k):
    """The settings of the cooldown branch at snapshot k of a trunk: the trunk's own, trained k +
    cooldown_iters steps past the fit and decayed over the last cooldown_iters, in out_dir/cooldown<k>;
    at fixed steps, to step k + cooldown_iters (max_iters), fit or not, in out_dir/at<k>. That is the
    run trained at the peak rate to fit + k (to step k) and then decayed, which from the snapshot on it is."""
    fixed = snapshots_of(cfg)[1]
    return {'out_dir': rundir.branch_dir(cfg['out_dir'], k, fixed), ('snapshots_at_iter' if fixed else
            'snapshots_after_fit'): '', ('max_iters' if fixed else 'steps_after_fit'): k + cfg['cooldown_iters']}


def with_settings(argv, changes):
    """train.py arguments with some settings changed: their own flags left out, the changes appended."""
    return [a for a in argv if a[2:].split('=', 1)[0] not in changes] + [f'--{key}={v}' for key, v in changes.items()]


def branch_argv(argv, cfg, k):
    """A trunk's train.py arguments made its cooldown branch's at snapshot k."""
    return with_settings(argv, branch_overrides(cfg, k))


@dataclass
class Schedule:
    """The learning rate and the stop of a run, from its settings and its fit (the step of its first
    quick eval whose 1x accuracy reaches fit_accuracy on every eval task; None until then)."""
    cfg: dict
    fit_iter: Optional[int] = None

    def __post_init__(self):
        self.snapshots, self.fixed = snapshots_of(self.cfg)

    def lr(self, it):
        # 1) linear warmup (with decay_lr=False too: a constant rate from step 0 is another recipe); then
        # with steps_after_fit or cooldown_iters (warmup-stable-decay): 2) the peak until cooldown_iters
        # before the stop (0: from the fit on), 3) cosine down to min_lr at the stop, so every run ends at
        # min_lr after the same decay however late it fit (a trunk holds the peak: its branches decay);
        # without either: 2) cosine over lr_decay_iters (0: max_iters)
        c, peak = self.cfg, self.cfg['learning_rate']
        if it < c['warmup_iters']:
            return peak * (it + 1) / (c['warmup_iters'] + 1)
        if not c['decay_lr'] or self.snapshots:
            return peak
        if c['steps_after_fit'] or c['cooldown_iters']:
            if c['steps_after_fit'] and self.fit_iter is None:
                return peak
            end = self.stop()
            start = end - (c['cooldown_iters'] or c['steps_after_fit'])
            if it <= start:
                return peak
        else:
            start, end = c['warmup_iters'], c['lr_decay_iters'] or c['max_iters']
        if it > end:
            return c['min_lr']
        ratio = (it - start) / max(1, end - start)
        return c['min_lr'] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (peak - c['min_lr'])

    def stop(self):
        """max_iters (a trunk at fixed steps: its last snapshot), or steps_after_fit past the fit: max_iters
        caps the search for the fit, not the decay after it, so a run that fits late still gets its whole decay."""
        if self.fit_iter is None or not self.cfg['steps_after_fit']:
            return self.cfg['max_iters']
        return self.fit_iter + self.cfg['steps_after_fit']

    def snapshot_at(self, it):
        """k where step `it` is a trunk's snapshot, fit + k (at fixed steps: step k); else None."""
        start = 0 if self.fixed else self.fit_iter
        k = None if start is None else it - start
        return k if k in self.snapshots else None

    def observe(self, it, accs, final):
        """The fit rule on the length eval of step `it`. -> whether the run fits here. A fit seen only
        in the final eval of a fit-gated run had no steps after it: not a fit."""
        if (self.fit_iter is None and fits(accs, self.cfg['fit_accuracy'])
                and not (final and self.cfg['steps_after_fit'])):
            self.fit_iter = it
            return True
        return False
