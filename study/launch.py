"""
Cluster launchers: each pending run a submitit job (a Slurm job, or a process here for submitit_local) that runs
what the local pool runs: the run's train.py command, then with eval_on=<launcher> its final eval (a finished run
not evaluated yet: a job of its eval alone). The job's id goes to <run dir>/job.json; its state is what submitit's
job object reports (job.done(), job.state, job.exception()), on Slurm from its accounting (sacct): a cluster
without accounting is refused in one line. submitit is optional: this module is imported only for these launchers.
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import time

from base import rundir
from study import files
from study.evals import eval_command, evaluated, samples_of
from study.runs import (command, last_progress, lost, ready, rebuild_command, run_process, state, tag, to_train,
                        trainer_env)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repo root: train.py and the studies' paths


def run_job(cmds, run_dir, threads):
    """A job: each of a run's commands in turn, as the local pool runs them (cwd the repo root, output appended
    to the run dir's train.log, an eval's to eval.log). A train.py command starts fresh, or resumes where the run
    dir holds a checkpoint when the job starts, so that a job Slurm requeues after a preemption continues the run
    (train.py refuses a fresh start there). The trainer ends with its job (die_with_parent)."""
    run_dir = os.path.join(ROOT, run_dir)
    os.makedirs(run_dir, exist_ok=True)
    env = trainer_env(threads, RUNDIR_PARENT_PID=str(os.getpid()))
    for cmd in cmds:
        if cmd[1] == 'train.py' and os.path.exists(os.path.join(run_dir, rundir.CKPT)):
            cmd = [c for c in cmd if c != '--init_from=resume'] + ['--init_from=resume']
        log = files.EVAL_LOG if cmd[1:3] == ['-m', 'study.evals'] else files.TRAIN_LOG
        code = run_process(cmd, run_dir, env, log, cwd=ROOT)   # (submitit's signal before its time limit: stopped)
        if code:
            raise subprocess.CalledProcessError(code, cmd)


def gpus_per_run(cfg, device):
    """slurm_gpus_per_run, or where it is -1 (the default) what the runs' device asks for: cuda one,
    cpu none, auto none (the submitting host cannot know the node's GPUs)."""
    if cfg['slurm_gpus_per_run'] >= 0:
        return cfg['slurm_gpus_per_run']
    return 1 if device.startswith('cuda') else 0


def submit(cfg, lists, calls, runs_device):
    """Submit run_job with each args in calls, as one job array (on Slurm one sbatch: all or none). -> the jobs.
    A refusal exits with the scheduler's message on one line and leaves grid_dir as it was: submitit writes its
    pickles and batch file before it calls sbatch."""
    if not calls:
        return []
    import submitit
    folder = os.path.abspath(os.path.join(cfg['grid_dir'], 'submitit'))
    new = folder                                     # the outermost folder this submission creates, if any
    while not os.path.exists(os.path.dirname(new)):
        new = os.path.dirname(new)
    new = None if os.path.exists(new) else new
    before = set() if new else set(os.listdir(folder))
    params = {'name': f"{os.path.basename(os.path.normpath(cfg['grid_dir']))}_run",
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
            return executor.map_array(run_job, *zip(*calls))
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
        raise SystemExit(f"{cfg['launcher']} refused the submission of {len(calls)} job(s): {msg}") from None


SUBMITTED = {}     # job id -> the submitit job this process submitted (a local job's process is known only to it)


def recorded_job(run):
    """The submitit job that <run dir>/job.json names, or None."""
    path = os.path.join(run.dir, files.RUN_JOB)
    if not os.path.exists(path):
        return None
    import submitit
    info = files.read_json(path, "delete it: the run's job is submitted again")
    return SUBMITTED.get(info['job_id']) or (
        submitit.SlurmJob if info['launcher'] == 'slurm' else submitit.LocalJob)(info['folder'], info['job_id'])


def ended(job):
    """None while a job may still run (submitit's job.done(): a Slurm job whose state the scheduler does not know
    yet is not done), else how it ended in words: its state, or where it ended as completed or failed with an
    error its function raised (a trainer that died, a job submitit stopped at its time limit), that error's last
    line, from job.exception()."""
    if not job.done():
        return None
    word = (job.state or 'UNKNOWN').split(' by ')[0]        # 'CANCELLED by 0' -> CANCELLED
    # (a job killed outright left no result: exception() would wait for one, and has nothing to add to its state)
    ran = word in ('COMPLETED', 'FINISHED', 'FAILED') and job.paths.result_pickle.exists()
    error = job.exception() if ran else None
    if error is None:
        return word
    trace = str(error).split('-' * 22)       # submitit's FailedJobError: the function's traceback between rules
    why = re.sub(r"Command '.*' returned", 'returned', (trace[1] if len(trace) > 2 else str(error)).strip()
                 .splitlines()[-1])           # (a CalledProcessError's command is the run's, in its train.log)
    return 'TIMEOUT' if 'timed-out' in why else f"FAILED: {why}"


def refresh(jobs):
    """Slurm's states of these jobs asked once (one sacct, submitit's watcher), not at its own pace."""
    import submitit
    if any(isinstance(job, submitit.SlurmJob) for job in jobs):
        submitit.SlurmJob.watcher.update()


def check_accounting(cfg):
    """A Slurm cluster whose accounting (sacct) does not answer cannot say how its jobs ended: refused in one line."""
    if cfg['launcher'] != 'slurm':
        return
    try:
        out = subprocess.run(['sacct', '-n', '-X', '-j', '1'], capture_output=True, text=True, timeout=60)
        why = out.returncode and (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired) as e:
        why = rundir.first_line(e)
    if why:
        raise SystemExit(f"--launcher=slurm reads each job's state from Slurm's accounting, and sacct does not answer "
                         f"here ({why}): turn accounting on (AccountingStorageType), or run the commands "
                         f"--dry_run prints")


def dispatch(runs, cfg, lists, calls_of):
    """Submit a job for each run, unless the job its dir records may still run; record each new job's id in its
    run dir. -> [(run, job)] of every job that may still run."""
    recorded = [(run, recorded_job(run)) for run in runs]
    refresh([job for _, job in recorded if job])
    live, todo = [], []
    for run, job in recorded:
        how = job and ended(job)
        if job and how is None:
            print(f"{tag(run)} job {job.job_id} is {job.state}: not resubmitted")
            live.append((run, job))
            continue
        if job:
            print(f"{tag(run)} job {job.job_id} ended ({how}) with its work not done: resubmitting")
        todo.append(run)
    device = next((r.cfg['device'] for r in todo if r.cfg['device'].startswith('cuda')), 'cpu')
    for run, job in zip(todo, submit(cfg, lists, [calls_of(run) for run in todo], device)):
        os.makedirs(run.dir, exist_ok=True)
        SUBMITTED[job.job_id] = job
        info = {'job_id': job.job_id, 'launcher': cfg['launcher'], 'submitted': time.strftime('%Y-%m-%d %H:%M:%S'),
                'folder': str(job.paths.folder)}
        rundir.write_atomic(os.path.join(run.dir, files.RUN_JOB), json.dumps(info, indent=1).encode())
        resumes = ', resumes from its checkpoint' if run.state == 'partial' else ''
        print(f"{tag(run)} submitted job {job.job_id}{resumes} -> {run.dir}/"
              + (files.TRAIN_LOG if run.state != 'done' else files.EVAL_LOG))
        live.append((run, job))
    return live


def wait_jobs(live, cfg):
    """Wait until none of the jobs may still run, saying how each ended."""
    poll, most = 1.0, 5 if cfg['launcher'] == 'submitit_local' else 30   # fast at first, then every `most` s
    print(f"waiting for {len(live)} job(s)")
    t0 = last_status = time.time()
    while live:
        refresh([job for _, job in live])
        for run, job in live:
            how = ended(job)
            if how is not None:
                print(f"{tag(run)} job {job.job_id} ended ({how}) after {(time.time() - t0) / 60:.1f} min")
        live = [(run, job) for run, job in live if not job.done()]
        if live:
            time.sleep(poll)
            poll = min(most, poll * 1.5)
        if live and time.time() - last_status > 60:
            last_status = time.time()
            print("  " + "; ".join(f"{tag(r)[1:-1]}: {last_progress(r)}" for r, _ in live))


def launch(grid, read_evals):
    """The launchers' local pool: a job for each pending run (its eval after, with eval_on=<launcher>) and, with
    eval_on=<launcher>, for each finished run not evaluated yet, none whose job may still run; with --wait, wait for
    them all, a cooldown branch's job submitted once its trunk has written its snapshot. read_evals(runs): the
    evals the jobs cached, read. -> the runs whose job may still run (none after --wait)."""
    cfg, lists = grid.cfg, grid.lists
    check_accounting(cfg)
    in_job = cfg['eval_on'] == cfg['launcher']
    read_evals(grid.runs)
    pending = to_train(grid.runs) + [r for r in grid.runs if in_job and r.selected and r.state == 'done'
                                     and not r.recorded and not evaluated(r, lists.variants)]
    trunks = {r.dir: r for r in grid.runs if r.point == 'trunk'}
    print(f"grid: {sum(r.selected for r in grid.runs)} runs, {sum(r.selected and r.state == 'done' for r in grid.runs)}"
          f" finished, {len(pending)} to train or evaluate as {cfg['launcher']} jobs (submitit's logs: "
          f"{os.path.join(cfg['grid_dir'], 'submitit')})")

    def calls_of(run):       # run_job's arguments: what a job needs of a run, picklable
        cmds = [] if run.state == 'done' else [command(run, run.state == 'partial')]
        cmds += [eval_command(run, lists.multiples, samples_of(cfg), lists.variants)] if in_job else []
        return cmds, run.dir, cfg['slurm_cpus_per_run']
    submitted = []
    while True:
        todo = [r for r in pending if ready(r) and r not in submitted]
        live = dispatch(todo, cfg, lists, calls_of)
        submitted += todo
        waiting = [r for r in pending if r not in submitted and not lost(r, trunks)]
        if waiting:
            print(f"{len(waiting)} cooldown branch(es) wait for the snapshot of their trunk"
                  + ("" if cfg['wait'] else ": rerun this command once the trunks have written them"))
        if not cfg['wait']:
            break
        wait_jobs(live, cfg)
        for run in waiting:                       # a trunk that finished in the wait: its state, for lost()
            if run.trunk in trunks:
                trunks[run.trunk].state = state(trunks[run.trunk])
        if not any(ready(r) for r in waiting):
            break
    for run in pending:
        if lost(run, trunks):
            print(f"{tag(run)} its snapshot is gone: rebuild it with `{rebuild_command(run)}`, then rerun this command")
    if not cfg['wait']:
        return [run for run, _ in live]
    for run in pending:
        run.state = state(run)
    read_evals(pending)
    for run in pending:
        if not lost(run, trunks) and (run.state != 'done' or in_job and not evaluated(run, lists.variants)):
            job = recorded_job(run)
            print(f"{tag(run)} not trained: its trunk ({run.trunk}) has not finished (its job failed, or it never "
                  f"fit); rerun this command" if job is None else f"{tag(run)} FAILED: its job {job.job_id} ended "
                  f"before its work was done; see {run.dir}/{files.TRAIN_LOG} and {job.paths.stderr}; rerun this "
                  f"command to resubmit it")
    return []
