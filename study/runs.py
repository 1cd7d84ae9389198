"""
One run of a study's grid: the train.py command that trains it and the state its run dir is in.
A run is a dict made by ablate.plan: arm, seed, dir, argv (train.py's), cfg (the exact settings
train.py will use), tasks (its eval tasks) and selected (trained by this grid, or only summarized).
"""

import os
import sys

import rundir

# ablate.py's keys that say how the runs are scheduled, not what they are: left out of the results' command
# (--arms is not among them: a grid of some arms is another grid, whose summary never replaces the study's)
SCHEDULING = {'workers', 'dry_run', 'launcher', 'wait', 'eval_on', 'slurm_partition', 'slurm_gpus_per_run',
              'slurm_cpus_per_run', 'slurm_time_min', 'slurm_mem_gb', 'slurm_extra'}


# settings that change how a run is executed or logged, not what it learns: a rerun may change them
NOT_THE_RUN = {'init_from', 'out_dir', 'device', 'compile', 'dtype', 'log_interval', 'peak_flops', 'eval_interval',
               'eval_iters', 'eval_tasks', 'eval_multiples', 'final_multiples', 'eval_samples', 'eval_batch_size'}
# ... except where steps_after_fit gates the run on its 1x quick eval: then how often and on what that eval
# runs decides the fit, so the decay and the stop
DECIDES_THE_FIT = {'eval_interval', 'eval_tasks', 'eval_samples'}


# settings train.py gained after runs were committed: a checkpoint without one trained as this value does
ADDED = {'cooldown_iters': 0, 'snapshots_after_fit': ''}


def differing(saved, wanted):
    """The settings that make two runs' settings two different runs, not one run executed or logged
    another way: [(key, saved value, wanted value)]."""
    free = NOT_THE_RUN - DECIDES_THE_FIT if wanted.get('steps_after_fit') else NOT_THE_RUN
    return [(k, saved.get(k, ADDED.get(k)), v) for k, v in wanted.items() if k not in free and saved.get(k, ADDED.get(k)) != v]


def state(run):
    """'done', 'partial' (a checkpoint of a run not finished) or 'new'; exits if the run dir holds a
    run with other settings (it would be mixed into this study's results), unless the run is not
    selected: then it is 'other', summarized as not finished."""
    path = os.path.join(run['dir'], 'ckpt.pt')
    if not os.path.exists(path):
        return 'new'
    ckpt = rundir.load_checkpoint(path, f"set it aside (mv {path} {path}.bad) and rerun this command: the run trains again")
    differ = differing(ckpt['config'], run['cfg'])
    if differ and not run['selected']:
        return 'other'
    if differ:
        raise SystemExit(f"{run['dir']} was trained with other settings ("
                         + ", ".join(f"{k}={a!r}, study: {b!r}" for k, a, b in differ[:4])
                         + f"): pick another grid_dir, or delete {run['dir']} to retrain it")
    if not ckpt['finished']:
        return 'partial'
    last = ckpt['iter_num']                    # max_iters, or earlier for a run stopped steps_after_fit after its fit
    logged = rundir.read_log(os.path.join(run['dir'], 'log.jsonl'), last) \
        if os.path.exists(os.path.join(run['dir'], 'log.jsonl')) else []
    return 'done' if any(r['iter'] == last for r in logged) else 'partial'


def tag(run):
    """'[vpad seed 7]', '[vpad seed 7, cooldown at fit + 1000]': a run in the grid's messages."""
    point = f", cooldown at fit + {run['point']}" if isinstance(run.get('point'), int) else ''
    return f"[{run['arm']} seed {run['seed']}{point}]"


def command(run, resume):
    """The run's train.py command; a cooldown branch always resumes (the snapshot its trunk wrote)."""
    return [sys.executable, 'train.py', *run['argv'], *(['--init_from=resume'] if resume or 'trunk' in run else [])]


def ready(run):
    """Can the run start? A cooldown branch once its trunk has written its first checkpoint, the snapshot."""
    return 'trunk' not in run or os.path.exists(os.path.join(run['dir'], rundir.CKPT))


def last_progress(run):
    """The last 'iter i/n' line of a running run's train.log, for the progress display."""
    try:
        with open(os.path.join(run['dir'], 'train.log'), 'rb') as f:
            f.seek(max(0, os.path.getsize(f.name) - 4000))
            lines = [l for l in f.read().decode(errors='replace').splitlines() if l.startswith('iter ')]
        return lines[-1].split(',')[0] if lines else 'starting'
    except OSError:
        return 'starting'
