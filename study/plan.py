"""
A study's plan: its command line and config read, every setting checked before anything runs
(study.settings.check), and each run of its grid a GridRun, a trunk's cooldown branches after it; the runs of
another study that an arm reuses, or that each run continues, found through that study's own config.
"""

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Optional

from base.schedule import branch_argv
from configurator import configure
from study import files
from study.runs import GridRun, differing
from study.settings import Lists, check, train_defaults


@dataclass
class Grid:
    """A planned study: its settings and command line, its runs; then what train and summarize learn of it."""
    cfg: dict                  # its study config with the command line's study keys, checked
    argv: list                 # ablate.py's command line
    lists: Lists               # its settings that are lists, parsed once
    runs: list                 # [GridRun], arm-major; those of arms --arms leaves out are not selected
    defaults: tuple            # (the study keys' defaults, train.py's), which plan read other studies' configs with
    never: list = field(default_factory=list)   # the branches of trunks that never fit: never trained
    out: Optional[str] = None          # where its summary goes; None: nowhere (a dry run)
    records: Optional[str] = None      # where each finished run is recorded (a study config's own grid); or None
    change: Optional[dict] = None      # a declared change of its pre-registered rule (summary.rule_change)
    queued: list = field(default_factory=list)  # runs whose cluster job is queued or running


def plan(cfg, argv, passed, selected, study_defaults):
    """A study config read with ablate.py's keys (cfg) and the rest of its command line (argv; passed: train.py
    overrides for every run; selected: --arms, or None) -> the Grid, every setting checked; nothing is written.
    study_defaults: ablate.py's keys and defaults, which another study's config is read with."""
    defaults = (study_defaults, train_defaults())
    runs, lists = plan_runs(cfg, passed, selected, defaults)
    return Grid(cfg, argv, lists, runs, defaults)


def plan_runs(cfg, passed, selected, defaults, studies=()):
    """The grid's runs, every setting checked first. -> ([GridRun] in arm-major order, those of arms left out by
    --arms marked selected=False (summarized if finished, never trained); the study's list settings, parsed).
    studies: the studies whose runs this one reuses, through which it is planned."""
    runs = []
    planned, lists = check(cfg, passed, selected, defaults[1])
    for p in planned:
        # (a run of equal steps, every_run_counts, is read at a fixed step: its end)
        run = GridRun(p.arm, p.seed, p.dir, p.argv, p.cfg, p.tasks, selected=selected is None or p.arm in selected,
                      fixed_steps=cfg['every_run_counts'])
        if cfg['init_from_study']:          # the source study's run of this seed, as that study plans it
            start = start_of(cfg['init_from_study'], p.seed, defaults, studies).dir
            run = dataclasses.replace(run, argv=[*p.argv, f'--init_from={start}'], cfg=p.cfg | {'init_from': start})
        if p.arm in cfg['reuse']:
            run = reused(cfg, run, defaults, studies) or run
        runs.append(run)
        runs += branches(run, p.snapshots, p.fixed, defaults[1])
    return runs, lists


PLANNED = {}               # (the path and text of a study config reused, the chain) -> its plan


def reused(cfg, run, defaults, studies):
    """The run of another study that this arm declares it reuses (reuse = {arm: 'study' or 'study/arm'}),
    for this seed: the source study's own run (its dir and command, so a missing one trains in its grid),
    once every setting that makes a run is checked equal; None if that study has no such seed."""
    study, _, arm = cfg['reuse'][run.arm].partition('/')
    arm = arm or run.arm
    theirs = run_of(study, arm, run.seed, defaults, studies,
                    f"arm '{run.arm}' reuses {study}'s {arm} runs (reuse={cfg['reuse']!r})")
    if theirs is None:
        return None                            # that study has no such seed: this one trains it
    differ = [(k, a, b) for k, a, b in differing(theirs.cfg, run.cfg) if k != 'seed']
    if differ:
        raise SystemExit(f"config error: arm '{run.arm}' reuses {study}'s {arm} runs (reuse={cfg['reuse']!r}), but "
                         + ', '.join(f"{k}={a!r} there, {b!r} here" for k, a, b in differ[:4])
                         + ": make them equal, or train this arm here with --reuse={}")
    return dataclasses.replace(theirs, arm=run.arm, selected=run.selected, reused=f"{study}/{arm}")


def run_of(study, arm, seed, defaults, studies, why):
    """Another study's run (arm, seed) as that study plans it (its own reuse followed): planned once
    per text of its config. None if it has no such seed; exits if it has no such arm, or is this one."""
    path = os.path.join(files.STUDY_CONFIGS, f'{study}.py')
    if study in studies or not os.path.isfile(path):
        raise SystemExit(f"config error: {why}, but " + (f"{study} reuses this study's runs in turn" if study in studies
                                                          else f"there is no {path}"))
    with open(path) as f:
        key = (os.path.abspath(path), f.read(), studies)
    if key not in PLANNED:
        source = configure(defaults[0], [path], quiet=True)
        if arm not in source['arms']:
            raise SystemExit(f"config error: {why}, but {study} has no arm '{arm}' (its arms: "
                             f"{', '.join(source['arms'])})")
        PLANNED[key] = plan_runs(source, [], None, defaults, (*studies, study))[0]
    if arm not in {r.arm for r in PLANNED[key]}:
        raise SystemExit(f"config error: {why}, but {study} has no arm '{arm}'")
    return next((r for r in PLANNED[key] if (r.arm, r.seed, r.trunk) == (arm, seed, None)), None)


def start_of(source, seed, defaults, studies):
    """init_from_study's run for this seed: the run of that study that this one continues."""
    study, arm = source.split('/')
    why = f"init_from_study={source!r}"
    theirs = run_of(study, arm, seed, defaults, studies, why)
    if theirs is None:
        raise SystemExit(f"config error: {why}, but {study} has no seed {seed}: give this study its seeds")
    return theirs


def branches(trunk, snapshots, fixed, train_defaults):
    """The cooldown branches of a trunk run (snapshots_after_fit): each a run of the study, in
    <trunk dir>/cooldown<k>, whose first checkpoint the trunk writes at fit + k; of a trunk at fixed
    steps (snapshots_at_iter), in <trunk dir>/at<k>, written at step k. The trunk is the point 'trunk'
    (its own final eval is the uncooled model at its stop), a branch the point k."""
    if not snapshots:
        return []
    trunk.point, trunk.fixed_steps = 'trunk', fixed
    out = []
    for k in snapshots:
        argv = branch_argv(trunk.argv, trunk.cfg, k, fixed)
        run_cfg = configure(train_defaults, argv, quiet=True)
        out.append(dataclasses.replace(trunk, dir=run_cfg['out_dir'], argv=argv, cfg=run_cfg, point=k, trunk=trunk.dir))
    return out
