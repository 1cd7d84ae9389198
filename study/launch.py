"""
Cluster launchers: each pending run a submitit job (a Slurm job, or a process here for
submitit_local) that runs the run's train.py command, so the child is the local path's. submitit
is optional: ablate.py imports this module only for these launchers.
"""

import contextlib
import dataclasses
import io
import json
import os
import shutil
import subprocess
import time

import torch

from configurator import items
from base import rundir
from study import files
from study.evals import evaluate, evaluated, measure_mismatch
from study.runs import (command, fit_of, last_progress, open_train_log, ready, state, stop_trainers, tag, to_train,
                        trainer_env)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repo root: train.py and the studies' paths

JOB_FILE = {'train': files.TRAIN_JOB, 'eval': files.EVAL_JOB}   # in the run dir: the job that trains / evaluates it


# Slurm states of a job that may still run: such a run is not resubmitted, as two jobs would train one run dir
ACTIVE = {'PENDING', 'RUNNING', 'REQUEUED', 'REQUEUE_FED', 'REQUEUE_HOLD', 'RESIZING', 'SUSPENDED', 'COMPLETING',
          'CONFIGURING', 'SIGNALING', 'STAGE_OUT', 'UNKNOWN'}   # UNKNOWN: neither sacct nor scontrol could be asked
GONE = 'GONE'      # the scheduler no longer knows the job (sacct off and past MinJobAge): it has ended
SAID = set()       # the notes this process has printed, each once


def train_job(fresh, resumed, run_dir, threads):
    """A training job: the run's train.py command as train_grid starts it (cwd the repo root, output
    appended to its train.log). Resumed if the run dir holds a checkpoint when the job starts, so a
    job that Slurm requeues after a preemption continues the run (train.py refuses a fresh start there)."""
    run_dir = os.path.join(ROOT, run_dir)
    cmd = resumed if os.path.exists(os.path.join(run_dir, rundir.CKPT)) else fresh
    os.makedirs(run_dir, exist_ok=True)
    env = trainer_env(threads, RUNDIR_PARENT_PID=str(os.getpid()))   # the trainer ends with its job (die_with_parent)
    with open_train_log(run_dir, cmd) as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            code = proc.wait()
        except BaseException:          # submitit's signal before the time limit raises here: the trainer stops as
            stop_trainers([proc])      # on Ctrl-C (its checkpoint intact) rather than being killed mid-write
            raise
    if code:
        raise subprocess.CalledProcessError(code, cmd)


def eval_job(run, mults, n, threads, variants=()):
    """An eval job: the final evals (plain and under each variant) and the mismatch of one finished run,
    written to its dir's caches exactly as the local path writes them; the summary then reads them."""
    os.chdir(ROOT)                                         # the run dir may be relative to the repo root
    torch.set_num_threads(threads)
    run = dataclasses.replace(run, state='done')
    evaluate([run], mults, n, variants=variants)
    measure_mismatch([run])


def gpus_per_run(cfg, device):
    """slurm_gpus_per_run, or where it is -1 (the default) what the runs' device asks for: cuda one,
    cpu none, auto none (the submitting host cannot know the node's GPUs)."""
    if cfg['slurm_gpus_per_run'] >= 0:
        return cfg['slurm_gpus_per_run']
    return 1 if device.startswith('cuda') else 0


def submit(cfg, kind, calls, runs_device):
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
        extra = items('slurm_extra', cfg['slurm_extra'])           # checked by study.settings.check_launcher
        if extra:
            params['slurm_additional_parameters'] = dict(kv.split('=', 1) for kv in extra)
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


def record_job(run, kind, job, cfg):
    """<run dir>/job.json (eval_job.json): the job's id, written only once the submission succeeded."""
    os.makedirs(run.dir, exist_ok=True)
    info = {'job_id': job.job_id, 'launcher': cfg['launcher'], 'submitted': time.strftime('%Y-%m-%d %H:%M:%S'),
            'folder': str(job.paths.folder)}
    rundir.write_atomic(os.path.join(run.dir, JOB_FILE[kind]), json.dumps(info, indent=1).encode())


def recorded_job(run, kind):
    """The submitit Job that job.json (eval_job.json) in the run dir names, or None."""
    path = os.path.join(run.dir, JOB_FILE[kind])
    if not os.path.exists(path):
        return None
    import submitit
    with open(path) as f:
        info = json.load(f)
    return (submitit.SlurmJob if info['launcher'] == 'slurm' else submitit.LocalJob)(info['folder'], info['job_id'])


def local_alive(job):
    """Is a local job started by an earlier ablate.py still running? Its id is its controller's pid;
    /proc tells a live controller of this folder from a reused pid or a zombie."""
    pid = int(job.job_id)
    if not os.path.isdir('/proc'):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            cmdline = f.read()
    except OSError:
        return False
    return b'submitit.local._local' in cmdline and str(job.paths.folder).encode() in cmdline


def scheduler(cmd):
    """-> (exit code, stdout, stderr) of a Slurm command; (127, '', why) where it is not installed."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, '', str(e)
    return out.returncode, out.stdout, out.stderr


def slurm_states(job_ids):
    """{job id: Slurm's word for it} for job ids like '4242_0': from sacct, or where sacct cannot
    answer (accounting off: "Slurm accounting storage is disabled") or does not list a job (too new,
    or purged) from scontrol, which keeps an ended job for MinJobAge; GONE for a job neither knows."""
    states = {}
    code, out, err = scheduler(['sacct', '-o', 'JobID,State,NodeList', '--parsable2', '-X', '-j', ','.join(job_ids)])
    if code == 0:
        for line in out.splitlines()[1:]:                            # below the header JobID|State|NodeList
            fields = line.split('|')
            if len(fields) >= 2 and fields[0] in job_ids:
                states[fields[0]] = (fields[1].split() or ['UNKNOWN'])[0]   # 'CANCELLED by 0' -> CANCELLED
    elif 'sacct' not in SAID:
        SAID.add('sacct')
        print(f"sacct cannot answer ({(err.strip().splitlines() or ['exit %d' % code])[-1]}): asking scontrol for the "
              f"jobs' states instead")
    for job_id in (j for j in job_ids if j not in states):
        code, out, err = scheduler(['scontrol', '-o', 'show', 'job', job_id])
        found = [w.split('=', 1)[1] for w in out.split() if w.startswith('JobState=')]
        states[job_id] = found[0] if code == 0 and found else GONE if 'Invalid job id' in err else 'UNKNOWN'
    return states


def job_states(jobs):
    """The state of each job, as the scheduler says it: Slurm's (CANCELLED, TIMEOUT, FAILED,
    OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, ...) before the result file, so a cancelled job that left
    one is CANCELLED; FINISHED where its function returned or raised and the scheduler says it ended
    well or no longer knows it; a local job's RUNNING / FINISHED / FAILED (its function raised) / ENDED."""
    import submitit
    slurm = slurm_states([j.job_id for j in jobs if isinstance(j, submitit.SlurmJob)]) \
        if any(isinstance(j, submitit.SlurmJob) for j in jobs) else {}
    out = []
    for job in jobs:
        done = job.paths.result_pickle.exists()
        if isinstance(job, submitit.SlurmJob):
            st = slurm[job.job_id]
            if st == 'FAILED' and done and timed_out(job):
                st = 'TIMEOUT'           # submitit ends a job at its time limit itself, so Slurm says FAILED
            out.append('FINISHED' if done and st in ('COMPLETED', GONE) else
                       'ENDED (the scheduler no longer knows it, and it left no result)' if st == GONE else st)
        elif done:               # returned, or raised: a trainer that died is no FINISHED job
            out.append('FAILED' if job_error(job) is not None else 'FINISHED')
        else:
            st = job.state
            out.append(('RUNNING' if local_alive(job) else 'ENDED') if st.startswith('NO PROCESS') else st)  # not ours
    return out


def job_error(job):
    """The error a finished job's function raised (its result file holds it), or None: a trainer that
    exited non-zero (SIGKILLed, diverged) raised CalledProcessError in train_job."""
    import pickle
    try:
        # submitit's own file: ('error', traceback) or ('success', value)
        with open(job.paths.result_pickle, 'rb') as f:
            kind, value = pickle.load(f)
    except Exception:
        return None
    return str(value) if kind == 'error' else None


def timed_out(job):
    """Did submitit end this job at its time limit? Its signal shortly before the limit makes a job
    that cannot checkpoint itself fail with 'timed-out' in the error its result file holds."""
    return 'timed-out' in (job_error(job) or '')


def is_running(st):
    return (st.split() or ['UNKNOWN'])[0] in ACTIVE


def dispatch(runs, cfg, kind, args_of):
    """Submit a `kind` job for each run, unless the job its dir records is still queued or running;
    record the new job ids. -> [(run, job)] of every job now queued or running."""
    jobs = {run.dir: recorded_job(run, kind) for run in runs}
    recorded = [j for j in jobs.values() if j is not None]
    states = dict(zip(map(id, recorded), job_states(recorded)))      # one sacct for all of them
    live, todo = [], []
    for run in runs:
        job = jobs[run.dir]
        st = job and states[id(job)]
        if st and is_running(st):
            print(f"{tag(run)} {kind} job {job.job_id} is {st}: not resubmitted"
                  + (f" (if it is long gone, delete {run.dir}/{JOB_FILE[kind]})" if st.startswith('UNKNOWN') else ''))
            live.append((run, job))
        else:
            if st:
                print(f"{tag(run)} {kind} job {job.job_id} ended ({st}) with its work not done: resubmitting")
            todo.append(run)
    device = next((r.cfg['device'] for r in todo if r.cfg['device'].startswith('cuda')), 'cpu')
    for run, job in zip(todo, submit(cfg, kind, [args_of(run) for run in todo], device)):
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
        states = job_states([job for _, job in live])
        for (run, job), st in zip(live, states):
            if not is_running(st):
                print(f"{tag(run)} {kind} job {job.job_id} ended ({st}) after "
                      f"{(time.time() - t0) / 60:.1f} min")
        live = [p for p, st in zip(live, states) if is_running(st)]
        if live:
            time.sleep(poll)
            poll = min(most, poll * 1.5)
        if live and kind == 'train' and time.time() - last_status > 60:
            last_status = time.time()
            print("  " + "; ".join(f"{tag(r)[1:-1]}: {last_progress(r)}" for r, _ in live))


def launch(runs, cfg):
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
        live = dispatch(todo, cfg, 'train', lambda r: (command(r, False, fit_of(trunks.get(r.trunk))), command(r, True),
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


def launch_evals(runs, cfg, mults, variants=()):
    """With eval_on=<launcher>: an eval job per finished run whose final evals or mismatch are not
    cached yet, unless one is queued or running; with --wait, wait for them. -> the runs still being evaluated."""
    evaluate(runs, mults, cfg['eval_samples'], compute=False, variants=variants)
    measure_mismatch(runs, compute=False)
    todo = [r for r in runs if r.state == 'done' and not evaluated(r, variants)]
    # what the job needs of a run, pickled: none of what the grid added (the log's records, a process, a lock)
    # what a job needs of a run, picklable: no log records, no trainer, lock or open file
    slim = lambda r: dataclasses.replace(r, records=None, proc=None, train_log=None, lock=None)  # noqa: E731
    live = dispatch(todo, cfg, 'eval', lambda r: (slim(r), mults, cfg['eval_samples'], cfg['slurm_cpus_per_run'],
                                                   variants))
    if not cfg['wait']:
        return [run for run, _ in live]
    wait_jobs(live, cfg, 'eval')
    evaluate(todo, mults, cfg['eval_samples'], compute=False, variants=variants)
    measure_mismatch(todo, compute=False)
    for run, job in live:
        if not evaluated(run, variants):
            print(f"{tag(run)} FAILED: its eval job {job.job_id} ended without writing the eval; "
                  f"see {job.paths.stderr}; rerun this command to resubmit it")
    return []
