"""
One run of a study's grid (a GridRun, made by study.plan): its train.py command, the state of its run dir,
what the grid's runs need before they start, and a process run in its dir (a trainer, its eval) and stopped.
"""

import dataclasses
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Optional, Union

import sample_data
from base import rundir
from base.schedule import with_settings
from study import files

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


def differing(saved, wanted):
    """The settings that make two runs' settings two different runs, not one run executed or logged
    another way: [(key, saved value, wanted value)]."""
    free = NOT_THE_RUN - DECIDES_THE_FIT if wanted.get('steps_after_fit') else NOT_THE_RUN
    return [(k, saved.get(k, rundir.ADDED.get(k)), v) for k, v in wanted.items()
            if k not in free and saved.get(k, rundir.ADDED.get(k)) != v]


@dataclass
class GridRun:
    """One run of the grid (train.py's Run is one run's settings as it trains): what study.plan makes of it (arm
    to reused), then what the grid learns of it (state to fit_iter)."""
    arm: str                                # its arm (a reused run: this study's arm, not its source's)
    seed: int                               # its training seed, --seed
    dir: str                                # its run dir: grid_dir/<arm>/seed<k>, a branch's <trunk dir>/cooldown<k>
    argv: list                              # train.py's arguments that make it (without --init_from=resume)
    cfg: dict                               # the exact settings train.py will use
    tasks: list                             # its eval tasks
    selected: bool                          # trained by this grid, or (left out by --arms) only summarized
    point: Union[None, str, int] = None     # None; 'trunk' (it has cooldown branches); k (the branch from fit + k,
                                            # or from step k of a trunk at fixed steps)
    trunk: Optional[str] = None             # a cooldown branch's trunk's run dir; None: not a branch
    fixed_steps: bool = False               # a trunk at fixed steps (snapshots_at_iter) or one of its branches
    reused: Optional[str] = None            # 'study/arm' whose run this is (reuse); None: this study's own
    state: Optional[str] = None             # 'new', 'partial', 'done', 'other' (state()), 'evaluating' or
                                            # 'never fit' (a branch of a trunk that never fit: it never trains)
    recorded: bool = False                  # done, recalled from its committed record (study.records.recall)
    records: Optional[list] = None          # its log.jsonl's records, read once, by state() when it is done
    eval: Optional[dict] = None             # its final eval's record (study.evals); None: not cached yet
    evals: dict = field(default_factory=dict)   # {variant: its final eval under a length-scaling variant}
    provenance: Optional[dict] = None       # its committed record's provenance (provenance_of)
    mismatch: Optional[dict] = None         # its train-vs-eval mismatch (study.evals); None: not cached yet
    fit_iter: Optional[int] = None          # the step it fit at (study.outcomes.find_fit); None: never fit


def state(run):
    """'done' (its log's records read into run.records), 'partial' (a checkpoint not finished) or 'new'; a run
    dir of other settings exits (it would be mixed into the results), or is 'other' for a run not selected."""
    path = os.path.join(run.dir, rundir.CKPT)
    if not os.path.exists(path):
        return 'new'
    ckpt = rundir.load_checkpoint(path, f"set it aside (mv {path} {path}.bad) and rerun this command: the run "
                                        f"trains again")
    differ = differing(ckpt['config'], run.cfg)
    if differ and not run.selected:
        return 'other'
    if differ:
        raise SystemExit(f"{run.dir} was trained with other settings ("
                         + ", ".join(f"{k}={a!r}, study: {b!r}" for k, a, b in differ[:4])
                         + f"): pick another grid_dir, or delete {run.dir} to retrain it")
    if not ckpt['finished']:
        return 'partial'
    last = ckpt['iter_num']                    # max_iters, or earlier for a run stopped steps_after_fit after its fit
    log = os.path.join(run.dir, rundir.LOG)
    logged = rundir.read_log(log, float('inf')) if os.path.exists(log) else []
    if not any(r['iter'] == last for r in logged):
        return 'partial'
    why = log_wrong(logged)
    if why:
        raise SystemExit(f"{log} is not the log train.py writes ({why}): restore it, or set the run dir aside "
                         f"(mv {run.dir} {run.dir}.bad) and rerun this command: the run trains again")
    run.records = logged
    return 'done'


def accuracies_wrong(length_eval):
    """What is wrong with a length-eval record ({task: {'<m>x': accuracy in [0, 1] or None}}), or None."""
    if not isinstance(length_eval, dict):
        return f"its length eval is a {type(length_eval).__name__}, not {{task: {{'<m>x': accuracy}}}}"
    for task, by_m in length_eval.items():
        if not isinstance(by_m, dict):
            return f"its length eval of {task!r} is a {type(by_m).__name__}, not {{'<m>x': accuracy}}"
        for m, a in by_m.items():
            if not (isinstance(m, str) and m[:-1].isdigit() and m.endswith('x')):
                return f"its length eval of {task!r} has the length {m!r}, not '<m>x'"
            if not (a is None or isinstance(a, (int, float)) and not isinstance(a, bool) and 0 <= a <= 1):
                return f"its accuracy of {task!r} at {m} is {a!r}, not a number in [0, 1]"
    return None


def log_wrong(log):
    """What is wrong with a run's log records as the summary reads them (iter, fit_iter, length_eval), or None."""
    for r in log:
        if not (isinstance(r, dict) and isinstance(r.get('iter'), int) and 'fit_iter' in r
                and (r['fit_iter'] is None or isinstance(r['fit_iter'], int))):
            return "a log record without an integer iter and fit_iter"
        why = accuracies_wrong(r.get('length_eval'))
        if why:
            return f"the log record of iter {r['iter']}: {why}"
    return None


def tag(run):
    """'[vpad seed 7]', '[vpad seed 7, cooldown at fit + 1000]' ('at step 6000' at fixed steps): a run in the
    grid's messages."""
    point = f", cooldown at {where(run)}" if isinstance(run.point, int) else ''
    return f"[{run.arm} seed {run.seed}{point}]"


def where(run):
    """A branch's snapshot in words: 'fit + 1000', or 'step 6000' at fixed steps."""
    return f"step {run.point}" if run.fixed_steps else f"fit + {run.point}"


def provenance_of(run):
    """What made a finished run's numbers: {'train': each process's rundir.provenance() its log records, 'eval':
    its plain eval's}; a committed record's own where it has one."""
    if run.provenance is not None:
        return run.provenance
    train = []
    for r in run.records or []:
        if isinstance(r.get('provenance'), dict) and r['provenance'] not in train:
            train.append(r['provenance'])
    return {'train': train, 'eval': (run.eval or {}).get('provenance')}


def fit_by_then(run):
    """The step a finished run fit at, by the step it is read at where that is fixed (a trunk's stop, its
    branch's snapshot: a fit found in the branch's decay is not one by then; a run of equal steps' end);
    None: not fit (by then)."""
    fit = run.records[-1]['fit_iter']
    if fit is None or not run.fixed_steps:
        return fit
    return fit if fit <= (run.cfg['max_iters'] if run.point in ('trunk', None) else run.point) else None


def command(run, resume):
    """The run's train.py command: resumed from the checkpoint in its dir (a cooldown branch always is: its
    snapshot)."""
    return [sys.executable, 'train.py', *run.argv, *(['--init_from=resume'] if resume or run.trunk is not None else [])]


def fit_of(trunk):
    """The step a finished trunk fit at (its log's last record), None if it is not finished or never fit."""
    return trunk.records[-1].get('fit_iter') if trunk is not None and trunk.state == 'done' and trunk.records else None


def ready(run):
    """Can the run start? A cooldown branch once its trunk has written its snapshot into its dir."""
    return run.trunk is None or os.path.exists(os.path.join(run.dir, rundir.CKPT))


def lost(run, trunks):
    """A cooldown branch whose snapshot is gone though its finished trunk wrote it (it fit, or keeps its snapshots
    at fixed steps): a clone that recalled its trunk from its record, a deleted folder (trunks: {run dir: trunk})."""
    trunk = trunks.get(run.trunk)
    return (not ready(run) and trunk is not None and trunk.state == 'done'
            and (run.fixed_steps or fit_of(trunk) is not None))


def trunk_to(cfg, k, fixed):
    """The settings that stop a branch's trunk at the branch's snapshot k: cfg, the branch's (whose cooldown_iters
    is its trunk's)."""
    if fixed:
        return {'snapshots_at_iter': str(k), 'max_iters': k}
    return {'snapshots_after_fit': str(k), 'steps_after_fit': max(k, cfg['cooldown_iters'])}


def rebuild_command(branch):
    """A lost snapshot, one shell line: a run is deterministic on one machine, so its trunk trained again from its
    start to fit + k (to step k) into <branch>/rebuild writes the same snapshot, moved into the branch's dir (resumed
    where a rebuild was cut short)."""
    k, out = branch.point, os.path.join(branch.dir, files.REBUILD)
    argv = with_settings(branch.argv, {'out_dir': out, **trunk_to(branch.cfg, k, branch.fixed_steps)})
    resume = ['--init_from=resume'] if os.path.exists(os.path.join(out, rundir.CKPT)) else []
    made = os.path.join(rundir.branch_dir(out, k, branch.fixed_steps), rundir.CKPT)
    return (f"{shlex.join(['python', 'train.py', *argv, *resume])} && mv {shlex.quote(made)} "
            f"{shlex.quote(os.path.join(branch.dir, rundir.CKPT))} && rm -r {shlex.quote(out)}")


def last_progress(run):
    """The last 'iter i/n' line of a running run's train.log, for the progress display."""
    try:
        with open(os.path.join(run.dir, files.TRAIN_LOG), 'rb') as f:
            f.seek(max(0, os.path.getsize(f.name) - 4000))
            lines = [l for l in f.read().decode(errors='replace').splitlines() if l.startswith('iter ')]
        return lines[-1].split(',')[0] if lines else 'starting'
    except OSError:
        return 'starting'


# -----------------------------------------------------------------------------
# the grid's runs together: branches that can never train, how far the grid got, what its runs need first

def no_snapshots(trunk):
    """A finished trunk that never fit wrote no snapshot past its fit: its branches can never train (a trunk
    at fixed steps writes its snapshots fit or not)."""
    return not trunk.fixed_steps and fit_of(trunk) is None


def strand(runs, never):
    """The branches of a trunk that finished without fitting never train: moved from runs to `never`,
    summarized as never fit at their points. -> (runs, never)"""
    stranded = {r.dir for r in runs if r.point == 'trunk' and r.state == 'done' and no_snapshots(r)}
    return ([r for r in runs if r.trunk not in stranded],
            never + [dataclasses.replace(r, state='never fit') for r in runs if r.trunk in stranded])


def where_grid_stands(runs, argv, stopping=0):
    """The line an interrupted ablate.py ends with: how far the grid got (stopping: its processes still stopping),
    and the command that goes on."""
    selected = [r for r in runs if r.selected]
    done = sum(r.state == 'done' for r in selected)
    return (f"{done} of {len(selected)} runs finished"
            + (f", {stopping} stopping at their last checkpoint" if stopping else '')
            + f"; resume with: {shlex.join(['python', 'ablate.py', *argv])}")


def check_sources(runs, cfg):
    """A pending run that starts from another run's weights needs that run finished."""
    study, _, arm = cfg['init_from_study'].partition('/')
    first = (f"python ablate.py {os.path.join(files.STUDY_CONFIGS, study + '.py')} --arms={arm}" if study
             else 'the study it comes from')
    for run in runs:
        source = run.cfg['init_from']
        if run.state == 'done' or not run.selected or source in ('scratch', 'resume'):
            continue
        path = rundir.ckpt_path(source)
        done = os.path.isfile(path) and rundir.load_checkpoint(path, "restore a copy, or retrain that run")['finished']
        if not done:
            raise SystemExit(f"config error: arm '{run.arm}', seed {run.seed}: init_from={source!r} is not a "
                             f"finished run yet; run {first} first")


def prepare_data(runs):
    """Generate each corpus once, here, before the runs start: parallel runs would race to write it
    (and another ablate.py generating it is waited for)."""
    for run in runs:
        if run.selected and run.state != 'done' and run.trunk is None:
            sample_data.make_corpus(run.cfg, "rerun this command (or point data_dir elsewhere)")


# -----------------------------------------------------------------------------
# a run's processes, started and stopped: the local pool's (study/pool.py), a job's (study/launch.py),
# --reproduce's

def to_train(runs):
    """The selected runs not finished, seed by seed across the arms: a grid cut short leaves every
    arm with as many finished seeds."""
    seed_order = list(dict.fromkeys(r.seed for r in runs))
    return sorted((r for r in runs if r.selected and r.state != 'done'), key=lambda r: seed_order.index(r.seed))


def trainer_env(threads, **extra):
    """A trainer's environment: `threads` torch threads, and its output unbuffered so that train.log
    shows each line when it is printed."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED='1',
                **extra)


def open_train_log(run_dir, cmd, name=files.TRAIN_LOG):
    """<run dir>/train.log (or `name`), opened to append a process's output below the line "$ <its command>"."""
    log = open(os.path.join(run_dir, name), 'a')
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    return log


def stop_processes(procs):
    """SIGTERM, which each trainer answers by exiting with its last checkpoint intact; SIGKILL for
    one still running a minute later."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_process(cmd, run_dir, env, log=files.TRAIN_LOG, started=None, **popen):
    """Run a process in a run dir to its end (a trainer, an eval), its output appended to the run dir's `log`
    (started(proc): told once it runs); an exception meanwhile (a Ctrl-C to this process alone, a job's signal)
    stops it as a Ctrl-C would, its last checkpoint intact, rather than leaving it to be killed mid-write.
    -> its exit code"""
    with open_train_log(run_dir, cmd, log) as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, **popen)
        if started:
            started(proc)
        try:
            return proc.wait()
        except BaseException:
            stop_processes([proc])
            raise


def tail(run_dir, name):
    """The last line of a process's log in the run dir."""
    with open(os.path.join(run_dir, name), errors='replace') as f:
        return ' '.join(f.read().strip().splitlines()[-1:])


