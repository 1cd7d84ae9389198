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
import os
import shlex
from dataclasses import dataclass
from typing import Optional

from configurator import items
from base import rundir


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


def check_schedule(cfg):
    """The schedule's settings, checked (a ValueError naming the key) and parsed: a cooldown inside the steps
    after the fit (or before max_iters), snapshots inside a trunk that has a fit to count from and branches
    that decay; a trunk at fixed steps (snapshots_at_iter) stops at its last one, fit or not, and has no
    snapshots past its fit beside them. -> (snapshots, fixed): a trunk's snapshots, and whether they are
    steps of its training (snapshots_at_iter) rather than steps past its fit; ((), False) for no trunk."""
    saf, cool = cfg['steps_after_fit'], cfg['cooldown_iters']
    if saf and cool > saf:
        raise ValueError(f"cooldown_iters={cool} is longer than steps_after_fit={saf}: the decay starts at the fit "
                         f"at the earliest; lower it (0 = all of steps_after_fit)")
    if not saf and cool > cfg['max_iters'] and not cfg['snapshots_at_iter']:     # (a trunk's branches decay)
        raise ValueError(f"cooldown_iters={cool} is longer than max_iters={cfg['max_iters']}: the decay before the "
                         f"stop starts at step 0 at the earliest; lower it")
    after_fit = parse_snapshots(cfg['snapshots_after_fit'])
    at_iter = parse_snapshots(cfg['snapshots_at_iter'], 'snapshots_at_iter')
    if at_iter and after_fit:
        raise ValueError(f"snapshots_at_iter={cfg['snapshots_at_iter']!r} and snapshots_after_fit="
                         f"{cfg['snapshots_after_fit']!r} in one run: a trunk counts its snapshots from step 0 or "
                         f"from its fit, not both; drop one")
    snapshots, fixed = (at_iter, True) if at_iter else (after_fit, False)
    if not snapshots:
        return snapshots, fixed
    key = 'snapshots_at_iter' if fixed else 'snapshots_after_fit'
    if fixed and (saf or cfg['max_iters'] != snapshots[-1]):
        raise ValueError(f"snapshots_at_iter={cfg['snapshots_at_iter']!r}: the trunk stops at its last snapshot, fit "
                         f"or not: set max_iters={snapshots[-1]} (now {cfg['max_iters']}) and steps_after_fit=0 "
                         f"(now {saf})")
    if not fixed and (not saf or snapshots[-1] > saf):
        raise ValueError(f"snapshots_after_fit={cfg['snapshots_after_fit']!r} lie past the trunk's stop: set "
                         f"steps_after_fit to the trunk's length past the fit, at least {snapshots[-1]} (now {saf})")
    if not cool or not cfg['decay_lr']:
        raise ValueError(f"{key} needs branches that decay: set cooldown_iters > 0 (now {cool}) "
                         f"and decay_lr=True (now {cfg['decay_lr']})")
    return snapshots, fixed


def branch_overrides(cfg, k, fixed):
    """The settings of the cooldown branch at snapshot k of a trunk (fixed: its snapshots are steps of its
    training, snapshots_at_iter): the trunk's own, trained k + cooldown_iters steps past the fit and decayed
    over the last cooldown_iters, in out_dir/cooldown<k>; at fixed steps, to step k + cooldown_iters
    (max_iters), fit or not, in out_dir/at<k>. That is the run trained at the peak rate to fit + k (to step
    k) and then decayed, which from the snapshot on it is."""
    return {'out_dir': rundir.branch_dir(cfg['out_dir'], k, fixed), ('snapshots_at_iter' if fixed else
            'snapshots_after_fit'): '', ('max_iters' if fixed else 'steps_after_fit'): k + cfg['cooldown_iters']}


def with_settings(argv, changes):
    """train.py arguments with some settings changed: their own flags left out, the changes appended."""
    return [a for a in argv if a[2:].split('=', 1)[0] not in changes] + [f'--{key}={v}' for key, v in changes.items()]


def branch_argv(argv, cfg, k, fixed):
    """A trunk's train.py arguments made its cooldown branch's at snapshot k."""
    return with_settings(argv, branch_overrides(cfg, k, fixed))


def write_branch(state, argv, k, fixed, then):
    """A trunk's snapshot k: its checkpoint (state, of the step) written as the first checkpoint of the
    cooldown branch, once (a replayed step leaves alone a branch that may be training), and the command
    that trains the branch said. argv: the trunk's train.py arguments; then: how to go on after a disk
    error."""
    cfg, it = state['config'], state['iter_num']
    branch = cfg | branch_overrides(cfg, k, fixed)
    path = os.path.join(branch['out_dir'], rundir.CKPT)
    if os.path.exists(path):
        return
    with rundir.writing(path, f'the snapshot of iter {it}', then):
        os.makedirs(branch['out_dir'], exist_ok=True)
        rundir.save_checkpoint(state | {'config': branch, 'finished': False}, path)
    command = ['python', 'train.py', *branch_argv(argv, cfg, k, fixed), '--init_from=resume']
    print(f"snapshot at iter {it}{'' if fixed else f' (fit + {k})'}; its cooldown branch: {shlex.join(command)}")


@dataclass
class Schedule:
    """The learning rate and the stop of a run, from its settings and its fit (the step of its first
    quick eval whose 1x accuracy reaches fit_accuracy on every eval task; None until then)."""
    cfg: dict
    fit_iter: Optional[int] = None
    snapshots: tuple = ()         # a trunk's snapshots (check_schedule's), steps past the fit or, fixed, of training
    fixed: bool = False

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
