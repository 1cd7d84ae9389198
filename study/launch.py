"""
Cluster launchers: each pending run a submitit job (a Slurm job, or a process here for submitit_local) that
runs the run's train.py command, so the child is the local path's; each job's state is what submitit's job
object reports. submitit is optional: ablate.py imports this module only for these launchers.
"""

import contextlib
import dataclasses
import io
import json
import os
import pickle
import shutil
import subprocess
import time

import torch

from base import rundir
from study import files
from study.evals import evaluate, evaluated, samples_of
from study.runs import command, fit_of, last_progress, ready, run_trainer, state, tag, to_train, trainer_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repo root: train.py and the studies' paths
JOB_FILE = {'train': files.TRAIN_JOB, 'eval': files.EVAL_JOB}   # in the run dir: the job that trains / evaluates it
# the states of a job that may still run: such a run is not resubmitted, as two jobs would train one run dir
ACTIVE = {'PENDING', 'RUNNING', 'REQUEUED', 'REQUEUE_FED', 'REQUEUE_HOLD', 'RESIZING', 'SUSPENDED', 'COMPLETING',
          'CONFIGURING', 'SIGNALING', 'STAGE_OUT', 'STARTING'}
# where the scheduler cannot say: a job whose log exists but whose trainer has not yet taken the run dir is
# starting (unpickling, importing torch) while its log or the run's train.log was written this recently
STARTING_S = 120


def train_job(fresh, resumed, run_dir, threads):
    """A training job: the run's train.py command as train_grid starts it (cwd the repo root, output
    appended to its train.log). Resumed if the run dir holds a checkpoint when the job starts, so a
    job that Slurm requeues after a preemption continues the run (train.py refuses a fresh start there)."""
    run_dir = os.path.join(ROOT, run_dir)
    cmd = resumed if os.path.exists(os.path.join(run_dir, rundir.CKPT)) else fresh
    os.makedirs(run_dir, exist_ok=True)
    env = trainer_env(threads, RUNDIR_PARENT_PID=str(os.getpid()))   # the trainer ends with its job (die_with_parent)
    code = run_trainer(cmd, run_dir, env, cwd=ROOT)      # (submitit's signal before its time limit: stopped there)
    if code:
        raise subprocess.CalledProcessError(code, cmd)


def eval_job(run, mults, n, threads, variants=()):
    """An eval job: the final evals (plain and under each variant) and the mismatch of one finished run,
    written to its dir's caches exactly as the local path writes them; the summary then reads them. It holds
    the run dir meanwhile, as a trainer does (job_state reads that where the scheduler cannot say)."""
    os.chdir(ROOT)                                         # the run dir may be relative to the repo root
    rundir.own(run.dir)
    torch.set_num_threads(threads)
    run = dataclasses.replace(run, state='done')
    evaluate([run], mults, n, variants=variants)


def gpus_per_run(cfg, device):
    """slurm_gpus_per_run, or where it is -1 (the default) what the runs' device asks for: cuda one,
    cpu none, auto none (the submitting host cannot know the node's GPUs)."""
    if cfg['slurm_gpus_per_run'] >= 0:
        return cfg['slurm_gpus_per_run']
    return 1 if device.startswith('cuda') else 0


def submit(cfg, lists, kind, calls, runs_device):
    """Submit train_job or eval_job (by kind) with each args in calls, as one job array (on Slurm one
    sbatch: all or none). -> the jobs. A refusal exits with the scheduler's message on one line and
    leaves grid_dir as it was: submitit writes its pickles and batch file before it calls sbatch."""
    if not calls:
        return []
    import submitit
    folder = os.path.abspath(os.path.join(cfg['grid_dir'], 'submitit'))
    new = folder                                     # the outermost folder this submission creates, if any
    while not os.path.exists(os.path.dirname(new)):
        new = os.path.dirname(new)
    new = None if os.path.exists(new) else new
    before = set() if new else set(os.listdir(folder))
    params = {'name': f"{os.path.basename(os.path.normpath(cfg['grid_dir']))}_{kind}",
              'timeout_min': cfg['slurm_time_min'], 'cpus_per_task': cfg['slurm_cpus_per_run']}
    if gpus_per_run(cfg, runs_device):
        params['gpus_per_node'] = gpus_per_run(cfg, runs_device)
    if cfg['slurm_mem_gb']:
        params['mem_gb'] = cfg['slurm_mem_gb']
    if cfg['launcher'] == 'slurm':
        params['slurm_partition'] = cfg['slurm_partition']
        # Slurm's warning signal before the time limit (submitit stops the job on it, its trainer checkpointing):
        # submitit's 90 s, though not more than a quarter of a short limit, which Slurm may send up to 60 s early
        params['slurm_signal_delay_s'] = min(90, 15 * cfg['slurm_time_min'])
        if lists.slurm_extra:
            params['slurm_additional_parameters'] = lists.slurm_extra
    try:
        with contextlib.redirect_stderr(io.StringIO()):   # submitit prints sbatch's stderr, then raises it
            executor = submitit.AutoExecutor(folder=folder, cluster='slurm' if cfg['launcher'] == 'slurm' else 'local')
            executor.update_parameters(**params)
            return executor.map_array({'train': train_job, 'eval': eval_job}[kind], *zip(*calls))
    except Exception as e:
        if new:
            shutil.rmtree(new, ignore_errors=True)
        elif os.path.isdir(folder):
            for name in set(os.listdir(folder)) - before:
                path = os.path.join(folder, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.remove(path)
        msg = '; '.join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        if 'gres' in msg.lower():
            msg += (f" (each job asked for {gpus_per_run(cfg, runs_device)} GPU(s): --slurm_gpus_per_run=N sets it, "
                    f"0 for a CPU partition)")
        raise SystemExit(f"{cfg['launcher']} refused the submission of {len(calls)} {kind} job(s): {msg}") from None


SUBMITTED = {}     # job id -> the submitit job this process submitted (a local job's process is known only to it)


def record_job(run, kind, job, cfg):
    """<run dir>/job.json (eval_job.json): the job's id, written only once the submission succeeded."""
    os.makedirs(run.dir, exist_ok=True)
    SUBMITTED[job.job_id] = job
    info = {'job_id': job.job_id, 'launcher': cfg['launcher'], 'submitted': time.strftime('%Y-%m-%d %H:%M:%S'),
            'folder': str(job.paths.folder)}
    rundir.write_atomic(os.path.join(run.dir, JOB_FILE[kind]), json.dumps(info, indent=1).encode())


def recorded_job(run, kind):
    """The submitit job that job.json (eval_job.json) in the run dir names, or None."""
    path = os.path.join(run.dir, JOB_FILE[kind])
    if not os.path.exists(path):
        return None
    import submitit
    info = files.read_json(path, f"delete it: the run's {kind} job is submitted again")
    return SUBMITTED.get(info['job_id']) or (
        submitit.SlurmJob if info['launcher'] == 'slurm' else submitit.LocalJob)(info['folder'], info['job_id'])


def job_error(job):
    """The error a finished job's function raised (its result file holds it), or None: a trainer that
    exited non-zero (SIGKILLed, diverged) raised CalledProcessError in train_job."""
    try:
        with open(job.paths.result_pickle, 'rb') as f:      # submitit's: ('error', traceback) or ('success', value)
            kind, value = pickle.load(f)
    except Exception:
        return None
    return str(value) if kind == 'error' else None


def job_state(job, run):
    """A job's state as its submitit object reports it (Slurm's word, from sacct; a local job's RUNNING,
    FINISHED, INTERRUPTED), read with its result file: a job whose function raised is FAILED (a trainer that
    died), TIMEOUT where submitit ended it at its time limit (Slurm says FAILED). Where the scheduler cannot
    say (accounting off; a local job of an earlier ablate.py; sacct before it knows the job) the job's own files
    do: PENDING before it writes its log, RUNNING while its process holds the run dir, STARTING until its
    trainer first takes the run dir (while its files are fresh), then FINISHED where it left a result, else
    ENDED."""
    st = (job.state or 'UNKNOWN').split()[0]               # 'CANCELLED by 0' -> CANCELLED
    done, error = job.paths.result_pickle.exists(), job_error(job)
    if st in ('UNKNOWN', 'NO') and not done:     # sacct lags a job's start by seconds, or has no accounting
        if rundir.busy(run.dir):
            return 'RUNNING'
        if not job.paths.stdout.exists():
            return 'PENDING'
        if not (claimed_since(run.dir, job.paths.submitted_pickle) or quiet(job.paths.stdout, run.dir)):
            return 'STARTING'
        return 'ENDED (the scheduler does not know it, and it left no result)'
    if st == 'FAILED' and error and 'timed-out' in error:
        return 'TIMEOUT'
    if st in ('COMPLETED', 'FINISHED', 'UNKNOWN', 'NO') and done:
        return 'FAILED' if error is not None else 'FINISHED'
    return st


def claimed_since(run_dir, submitted):
    """Whether a process took run_dir after the job was submitted (the lock file is rewritten on each claim):
    then the job's trainer has started, and a run dir no longer held means it has ended."""
    try:
        return os.path.getmtime(os.path.join(run_dir, rundir.LOCK)) >= os.path.getmtime(submitted)
    except OSError:
        return False


def quiet(log, run_dir):
    """Neither the job's log nor the run's train.log written in the last STARTING_S seconds."""
    paths = [p for p in (log, os.path.join(run_dir, files.TRAIN_LOG)) if os.path.exists(p)]
    return time.time() - max(map(os.path.getmtime, paths)) >= STARTING_S


def states(pairs):
    """The state of each (run, job): one sacct for all of them (submitit's watcher, asked now)."""
    import submitit
    slurm = [job for _, job in pairs if isinstance(job, submitit.SlurmJob)]
    if slurm:
        slurm[0].watcher.update()
    return [job_state(job, run) for run, job in pairs]


def dispatch(runs, cfg, lists, kind, args_of):
    """Submit a `kind` job for each run, unless the job its dir records is still queued or running;
    record the new job ids. -> [(run, job)] of every job now queued or running."""
    recorded = [(run, recorded_job(run, kind)) for run in runs]
    known = [(run, job) for run, job in recorded if job]
    found = dict(zip((id(job) for _, job in known), states(known)))
    live, todo = [], []
    for run, job in recorded:
        st = job and found[id(job)]
        if st in ACTIVE:
            print(f"{tag(run)} {kind} job {job.job_id} is {st}: not resubmitted")
            live.append((run, job))
        else:
            if st:
                print(f"{tag(run)} {kind} job {job.job_id} ended ({st}) with its work not done: resubmitting")
            todo.append(run)
    device = next((r.cfg['device'] for r in todo if r.cfg['device'].startswith('cuda')), 'cpu')
    for run, job in zip(todo, submit(cfg, lists, kind, [args_of(run) for run in todo], device)):
        record_job(run, kind, job, cfg)
        resumes = ', resumes from its checkpoint' if kind == 'train' and run.state == 'partial' else ''
        print(f"{tag(run)} submitted {kind} job {job.job_id}{resumes} -> {run.dir}/"
              + (files.TRAIN_LOG if kind == 'train' else JOB_FILE[kind]))
        live.append((run, job))
    return live


def wait_jobs(live, cfg, kind):
    """Wait until none of the jobs is queued or running, saying which ended."""
    if not live:
        return
    poll, most = 1.0, 5 if cfg['launcher'] == 'submitit_local' else 30   # fast at first, then every `most` s
    print(f"waiting for {len(live)} {kind} job(s)")
    t0 = last_status = time.time()
    while live:
        now = states(live)
        for (run, job), st in zip(live, now):
            if st not in ACTIVE:
                print(f"{tag(run)} {kind} job {job.job_id} ended ({st}) after {(time.time() - t0) / 60:.1f} min")
        live = [p for p, st in zip(live, now) if st in ACTIVE]
        if live:
            time.sleep(poll)
            poll = min(most, poll * 1.5)
        if live and kind == 'train' and time.time() - last_status > 60:
            last_status = time.time()
            print("  " + "; ".join(f"{tag(r)[1:-1]}: {last_progress(r)}" for r, _ in live))


def launch(runs, cfg, lists):
    """The launchers' train_grid: each pending run submitted as a job (resuming where it has a
    checkpoint), none whose job is queued or running; with --wait, wait for every job. -> the runs
    whose job is still queued or running (none after --wait)."""
    pending = to_train(runs)                                       # seed by seed, as train_grid goes
    n_done = sum(r.selected and r.state == 'done' for r in runs)
    print(f"grid: {sum(r.selected for r in runs)} runs, {n_done} finished, {len(pending)} to train as "
          f"{cfg['launcher']} jobs (submitit's logs: {os.path.join(cfg['grid_dir'], 'submitit')})")
    submitted, trunks = [], {r.dir: r for r in runs if r.point == 'trunk'}
    while True:      # a cooldown branch is submitted once its trunk has written the snapshot it resumes (or has
        # finished: a snapshot lost since is rebuilt in the branch's job)
        todo = [r for r in pending if ready(r, trunks) and r not in submitted]
        live = dispatch(todo, cfg, lists, 'train', lambda r: (command(r, False, fit_of(trunks.get(r.trunk))), command(r, True),
                                                       r.dir, cfg['slurm_cpus_per_run']))
        submitted += todo
        waiting = [r for r in pending if r not in submitted]
        if waiting:
            print(f"{len(waiting)} cooldown branch(es) wait for the snapshot of their trunk"
                  + ("" if cfg['wait'] else ": rerun this command once the trunks have written them"))
        if not cfg['wait']:
            return [run for run, _ in live]
        wait_jobs(live, cfg, 'train')
        for run in waiting:                       # a trunk that finished in this wait: its state, for ready()
            if run.trunk in trunks and trunks[run.trunk].state != 'done':
                trunks[run.trunk].state = state(trunks[run.trunk])
        if not any(ready(r, trunks) for r in waiting):
            break
    for run in pending:
        run.state = state(run)
        if run.state != 'done':
            job = recorded_job(run, 'train')
            print(f"{tag(run)} not trained: its trunk ({run.trunk}) has not finished (its job failed, or it never "
                  f"fit); rerun this command"
                  if job is None else f"{tag(run)} FAILED: its job {job.job_id} ended before the run finished; see "
                  f"{run.dir}/{files.TRAIN_LOG} and {job.paths.stderr}; rerun this command to resubmit it")
    return []


def launch_evals(runs, cfg, lists):
    """With eval_on=<launcher>: an eval job per finished run whose final evals or mismatch are not
    cached yet, unless one is queued or running; with --wait, wait for them. -> the runs still being evaluated."""
    mults, variants = lists.multiples, lists.variants
    evaluate(runs, mults, samples_of(cfg), compute=False, variants=variants)
    todo = [r for r in runs if r.state == 'done' and not evaluated(r, variants)]
    # what a job needs of a run, picklable: no log records, no trainer, lock or open file
    slim = lambda r: dataclasses.replace(r, records=None, proc=None, train_log=None, lock=None)  # noqa: E731
    live = dispatch(todo, cfg, lists, 'eval', lambda r: (slim(r), mults, samples_of(cfg), cfg['slurm_cpus_per_run'],
                                                   variants))
    if not cfg['wait']:
        return [run for run, _ in live]
    wait_jobs(live, cfg, 'eval')
    evaluate(todo, mults, samples_of(cfg), compute=False, variants=variants)
    for run, job in live:
        if not evaluated(run, variants):
            print(f"{tag(run)} FAILED: its eval job {job.job_id} ended without writing the eval; "
                  f"see {job.paths.stderr}; rerun this command to resubmit it")
    return []
