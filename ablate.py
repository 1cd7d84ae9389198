"""
A study in one command: a grid of arms x seeds, each an ordinary train.py run, then every run
evaluated on the same held-out examples and the grid summarized.

    python ablate.py config/ablate_sites.py
    python ablate.py config/ablate_sites.py --arms=none,vpad --seeds=1,2 --max_iters=300
    python ablate.py config/ablate_sites.py --dry_run       # the train.py commands, for a cluster
    python ablate.py config/ablate_sites.py --launcher=slurm --slurm_partition=gpu [--wait]   # Slurm jobs, via submitit

A study config sets `base_config` (a train.py config), `arms` (name -> train.py overrides),
`common` (overrides for every arm), `seeds` and `out_dir`. Any other --key=value that train.py knows
is passed to every run; `multiples` and `num_samples` set the final eval (eval_lengths.py's names).
Run (arm, seed k) trains into out_dir/<arm>/seed<k>/ with --seed=k: seeds vary initial weights,
dropout masks and batch order, never the corpus (that is data_seed). A string override may name
the seed, e.g. init_from='out/ablate_sites/none/seed{seed}'.

Rerunning the same command skips finished runs and resumes interrupted ones, so a long grid
outlives a terminal. With --dry_run nothing is trained or written (but a missing corpus, which the
runs would race to generate): it prints one train.py command per pending run (each run dir is
independent: a scheduler's job array can run them anywhere) and the summary of the runs evaluated.

With --launcher=slurm every pending run is submitted as a Slurm job (one job array, through
submitit: `pip install submitit`) that runs the run's train.py command; its job id goes to
<run dir>/job.json, submitit's logs to out_dir/submitit/. The command returns, or with --wait waits
for the jobs. A rerun skips finished runs and runs whose job is still queued or running, resubmits
the others (a run with a checkpoint resumes from it) and summarizes what has finished.
--eval_on=slurm makes each finished run's final eval a job too (it writes the eval the summary
reads). --launcher=submitit_local runs the same jobs as processes on this machine.

The summary goes to results_dir (default: out_dir): results.json (per arm its overrides; per task
and length multiple the per-seed accuracies, mean and standard deviation; the train-vs-eval
mismatch at the arm's dropout site; its outcomes under the pre-registered rule below and their
exact tests against the control arm), results.md, accuracy_vs_length.png and accuracy_vs_step.png
(the quick length eval in each run's log.jsonl, mean over seeds: does extrapolation rise, then
fall, during training?). The PNGs need matplotlib.

A run nearly always either extrapolates or collapses, so the summary also counts outcomes, under a
rule set in the study config before the runs (control, fit_accuracy, extrap_*): a run fits at its
first quick eval with every task's 1x accuracy >= fit_accuracy (else it "never fit": counted apart,
out of the extrapolation statistics), and a fit run extrapolates when its final-eval accuracy at
extrap_multiple x is >= extrap_threshold. Per arm: fit count, steps to fit, the share that
extrapolates (Wilson interval), the mean accuracy at extrap_multiple x (t interval); per arm against
the control: Fisher's exact test (Holm-corrected over the arms), a permutation test of the mean, a
paired sign-flip test where both arms continue the same runs, and the seeds 80% power would need.
"""

import contextlib
import importlib
import io
import itertools
import json
import math
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import time


# -----------------------------------------------------------------------------
base_config = 'config/vpad.py'   # the train.py config every run starts from
arms = {}                  # arm name -> dict of train.py overrides; --arms=a,b trains only those
                           # (the summary, in out_dir, still covers every arm's finished runs)
common = {}                # train.py overrides for every arm of the study
seeds = '1,2,3'            # training seeds, comma-separated
out_dir = 'out/ablate'     # run (arm, seed k) trains into out_dir/<arm>/seed<k>/
results_dir = ''           # where results.* and the plots go; '' = out_dir
workers = 1                # runs trained at a time; the CPU threads are split between them
dry_run = False            # print the train.py command of each pending run, train nothing
launcher = 'local'         # local: train here, `workers` at a time; slurm: a Slurm job per pending run (via submitit); submitit_local: those jobs as processes here
wait = False               # slurm / submitit_local: wait for the jobs, then evaluate and summarize (else submit, summarize what has finished, return)
eval_on = 'local'          # the final eval: 'local' (here, after the runs) or the launcher's name (a job per finished run)
slurm_partition = ''       # the Slurm partition (required with launcher=slurm)
slurm_gpus_per_run = 1     # GPUs per job; 0 = a CPU job
slurm_cpus_per_run = 4     # CPU cores per job, and the job's torch threads
slurm_time_min = 60        # time limit per job, minutes (submitit_local enforces it too); a run cut off resumes when resubmitted
slurm_mem_gb = 0           # memory per job, GB; 0 = the partition's default
slurm_extra = ''           # other sbatch options, comma-separated key=value, e.g. account=abc,qos=high
multiples = '1,2,4,8,16,32,64'   # final eval lengths, in multiples of each run's block_size
num_samples = 100          # held-out examples per task and length in the final eval
# the pre-registered outcome rule and tests (set before the runs, not chosen after seeing them):
control = 'none'           # the arm every other arm is tested against; '' = no tests
fit_accuracy = 0.95        # a run fits at its first quick eval with every task's 1x accuracy >= this (an unfit run says nothing of length)
extrap_multiple = 16       # the length (x block_size) where extrapolation is judged: one length fixed in advance, not the best of many
extrap_threshold = 0.9     # a fit run extrapolates when its final-eval accuracy at extrap_multiple x is >= this (runs are near binary)
extrap_task = ''           # the one task that decides it, fixed in advance; '' = the first of each run's eval tasks
range_threshold = 0.5      # a run's range: the largest multiple with accuracy >= this there and at every shorter one
# -----------------------------------------------------------------------------
from configurator import configure, settings_of, unknown_key  # noqa: E402
import eval_lengths  # noqa: E402
import rundir  # noqa: E402
import sample_data  # noqa: E402
import train  # noqa: E402  (its settings and checks; its training loop runs in a subprocess)
import torch  # noqa: E402
from model import dropout_mismatch  # noqa: E402

# ablate.py's keys that say how the runs are scheduled, not what they are: left out of the results' command
# (--arms is not among them: a grid of some arms is another grid, whose summary never replaces the study's)
SCHEDULING = {'workers', 'dry_run', 'launcher', 'wait', 'eval_on', 'slurm_partition', 'slurm_gpus_per_run',
              'slurm_cpus_per_run', 'slurm_time_min', 'slurm_mem_gb', 'slurm_extra'}

# train.py keys added after the first runs, at the value that does what the runs before them did
BEFORE_THE_KEY = {'data_seed': 1337, 'eval_tasks': '', 'min_doc_len': 0, 'nope_first': False, 'short_conv': 0,
                  'fit_accuracy': 0.95, 'steps_after_fit': 0}

# settings that change how a run is executed or logged, not what it learns: a rerun may change them
NOT_THE_RUN = {'init_from', 'out_dir', 'device', 'compile', 'dtype', 'log_interval', 'peak_flops', 'eval_interval',
               'eval_iters', 'eval_tasks', 'eval_multiples', 'final_multiples', 'eval_samples', 'eval_batch_size'}


def flags(overrides, seed):
    """{'dropout': 0.1, 'init_from': 'runs/seed{seed}'} -> ['--dropout=0.1', '--init_from=runs/seed1']."""
    out = []
    for k, v in overrides.items():
        v = (v.replace('{seed}', str(seed)) if isinstance(v, str) else repr(v))
        out.append(f'--{k}={v}')
    return out


def split_argv(argv, study_keys, train_keys):
    """-> (ablate's own argv, train.py overrides for every run, the --arms selection or None)."""
    own, passed, selected = [], [], None
    for arg in argv:
        key = arg[2:].split('=', 1)[0] if arg.startswith('--') else None
        if key == 'arms':
            selected = [a for a in arg.split('=', 1)[1].split(',') if a.strip()] if '=' in arg else []
        elif key is None or key in study_keys or key in ('help', ''):
            own.append(arg)
        elif key in train_keys:
            passed.append(arg)                # '{seed}' in it is filled in per run, as in a config's overrides
        else:
            raise SystemExit("config error: " + unknown_key(key, list(study_keys) + list(train_keys)))
    return own, passed, selected


def plan(cfg, passed, selected, train_settings):
    """Check the whole grid before anything runs. -> [run dicts], in arm-major order; those of
    arms left out by --arms are marked 'selected': False (summarized if finished, never trained)."""
    def fail(msg):
        raise SystemExit(f"config error: {msg}")
    if not cfg['arms']:
        fail("the study sets no arms: a study config needs arms = {'name': {train.py overrides}, ...}")
    if selected is not None:
        if not selected:
            fail("--arms is empty: name arms of the study, e.g. --arms=" + ','.join(list(cfg['arms'])[:2]))
        for a in selected:
            if a not in cfg['arms']:
                fail(f"unknown arm '{a}' in --arms; arms of this study: {', '.join(cfg['arms'])}")
    try:
        seed_list = [int(s) for s in cfg['seeds'].split(',') if s.strip()]
    except ValueError:
        seed_list = None
    if not seed_list:
        fail(f"seeds={cfg['seeds']!r}: give integers separated by commas, e.g. --seeds=1,2,3")
    if not os.path.isfile(cfg['base_config']):
        fail(f"base_config '{cfg['base_config']}' not found (run from the repository root)")
    if cfg['workers'] < 1 or cfg['num_samples'] < 1:
        fail("workers and num_samples must be positive")
    for k in ('out_dir', 'results_dir'):
        if os.path.exists(cfg[k]) and not os.path.isdir(cfg[k]):
            fail(f"{k}={cfg[k]!r} is a file, not a folder: give a folder")
    try:
        mults = eval_lengths.parse_multiples('multiples', cfg['multiples'])
    except ValueError as e:
        fail(str(e))
    if cfg['control'] and cfg['control'] not in cfg['arms']:
        fail(f"control={cfg['control']!r} is not an arm of this study ({', '.join(cfg['arms'])}); name one, or '' for no tests")
    for k in ('fit_accuracy', 'extrap_threshold'):
        if not 0 < cfg[k] <= 1:
            fail(f"{k}={cfg[k]} must be in (0, 1]: it is an accuracy")
    if cfg['extrap_multiple'] not in mults:
        fail(f"extrap_multiple={cfg['extrap_multiple']} is not in multiples={cfg['multiples']!r}: the final eval would not measure it")
    runs = []
    for arm in cfg['arms']:
        overrides = cfg['arms'][arm]
        if not isinstance(overrides, dict):
            fail(f"arm '{arm}' must map to a dict of train.py overrides, got {type(overrides).__name__}")
        # one fit rule: train.py's (it logs fit_iter, and stops steps_after_fit after it) is the study's
        fit_rule = [f"--fit_accuracy={cfg['fit_accuracy']}"] if 'fit_accuracy' in train_settings else []
        if any(o.get('fit_accuracy', cfg['fit_accuracy']) != cfg['fit_accuracy'] for o in (cfg['common'], overrides)):
            fail(f"arm '{arm}': fit_accuracy is the study's pre-registered fit rule: set it once, at the top of the "
                 f"study config, not in common or an arm")
        for seed in seed_list:
            run_dir = os.path.join(cfg['out_dir'], arm, f'seed{seed}')
            argv = [cfg['base_config'], *flags(cfg['common'], seed), *flags(overrides, seed),
                    *(p.replace('{seed}', str(seed)) for p in passed), *fit_rule, f'--seed={seed}', f'--out_dir={run_dir}']
            try:  # the exact settings train.py will use, checked as train.py checks them
                with contextlib.redirect_stdout(io.StringIO()):
                    run_cfg = configure(train_settings, argv)
            except SystemExit as e:
                fail(f"arm '{arm}': {str(e).removeprefix('config error: ')}")
            try:
                eval_tasks, _, _ = train.check_config({**run_cfg, 'init_from': 'scratch'})   # init_from: see check_sources
            except SystemExit as e:
                fail(f"arm '{arm}': {str(e).removeprefix('config error: ')}")
            if cfg['extrap_task'] and cfg['extrap_task'] not in eval_tasks:
                fail(f"arm '{arm}': extrap_task={cfg['extrap_task']!r} is not among its eval tasks ({', '.join(eval_tasks)})")
            runs.append({'arm': arm, 'seed': seed, 'dir': run_dir, 'argv': argv, 'cfg': run_cfg, 'tasks': eval_tasks,
                         'selected': selected is None or arm in selected})
    return runs


def state(run):
    """'done', 'partial' (a checkpoint of a run not finished) or 'new'; exits if the run dir holds a
    run with other settings (it would be mixed into this study's results), unless the run is not
    selected: then it is 'other', left out of the summary."""
    path = os.path.join(run['dir'], 'ckpt.pt')
    if not os.path.exists(path):
        return 'new'
    ckpt = rundir.load_checkpoint(path, f"set it aside (mv {path} {path}.bad) and rerun this command: the run trains again")
    saved, wanted = ckpt['config'], run['cfg']
    # a key the checkpoint lacks came to train.py after the run: the run did what it meant when it came
    differ = [k for k in wanted if k not in NOT_THE_RUN and saved.get(k, BEFORE_THE_KEY.get(k)) != wanted[k]]
    if differ and not run['selected']:
        return 'other'
    if differ:
        raise SystemExit(f"{run['dir']} was trained with other settings ("
                         + ", ".join(f"{k}={saved.get(k)!r}, study: {wanted[k]!r}" for k in differ[:4])
                         + f"): pick another out_dir, or delete {run['dir']} to retrain it")
    if not finished(ckpt):
        return 'partial'
    last = ckpt['iter_num']                    # max_iters, or earlier for a run stopped steps_after_fit after its fit
    logged = rundir.read_log(os.path.join(run['dir'], 'log.jsonl'), last) \
        if os.path.exists(os.path.join(run['dir'], 'log.jsonl')) else []
    return 'done' if any(r['iter'] == last for r in logged) else 'partial'


def finished(ckpt):
    """train.py marks the checkpoint of a run that ended; older checkpoints only say where they stopped."""
    return ckpt.get('finished', ckpt['iter_num'] >= ckpt['config']['max_iters'])


def check_sources(runs):
    """A pending run that starts from another run's weights needs that run finished."""
    for run in runs:
        source = run['cfg']['init_from']
        if run['state'] == 'done' or not run['selected'] or source in ('scratch', 'resume'):
            continue
        path = train.init_path(source)
        done = os.path.isfile(path) and finished(rundir.load_checkpoint(path, "restore a copy, or retrain that run"))
        if not done:
            raise SystemExit(f"config error: arm '{run['arm']}', seed {run['seed']}: init_from={source!r} is not a "
                             f"finished run yet; run the study it comes from first")


def command(run, resume):
    return [sys.executable, 'train.py', *run['argv'], *(['--init_from=resume'] if resume else [])]


def last_progress(run):
    """The last 'iter i/n' line of a running run's train.log, for the progress display."""
    try:
        with open(os.path.join(run['dir'], 'train.log'), 'rb') as f:
            f.seek(max(0, os.path.getsize(f.name) - 4000))
            lines = [l for l in f.read().decode(errors='replace').splitlines() if l.startswith('iter ')]
        return lines[-1].split(',')[0] if lines else 'starting'
    except OSError:
        return 'starting'


def prepare_data(runs):
    """Generate each corpus once, here, before the runs start: parallel runs would race to write it
    (and another ablate.py generating it is waited for)."""
    for run in runs:
        c = run['cfg']
        meta = os.path.join(c['data_dir'], 'meta.json')

        def generate():
            print(f"generating {c['data_dir']} ({c['tasks']}, {c['num_tokens']:,} tokens)")
            sample_data.prepare(c['data_dir'], c['block_size'], c['num_tokens'], tasks=c['tasks'],
                                data_seed=c['data_seed'], tokenizer=c['tokenizer'], min_doc_len=c['min_doc_len'])
        if run['selected'] and run['state'] != 'done' and not os.path.exists(meta):
            with rundir.writing(c['data_dir'], 'the corpus', "rerun this command (or point data_dir elsewhere)"):
                rundir.make_once(c['data_dir'], lambda: os.path.exists(meta), generate)


def train_grid(runs, workers, then):
    """Train the pending runs, `workers` at a time, each a train.py subprocess writing train.log in
    its run dir. Each run dir is locked while its trainer runs, and the trainer is handed the lock:
    a run another process holds (a second ablate.py, a train.py) is skipped. The trainers end with
    this process: stopped here if it is interrupted, and by their parent-death signal if it is
    killed. then: how to go on after a disk error. -> the runs that failed."""
    # seed by seed across the arms: a grid cut short leaves every arm with as many finished seeds
    seed_order = list(dict.fromkeys(r['seed'] for r in runs))
    pending = sorted((r for r in runs if r['selected'] and r['state'] != 'done'),
                     key=lambda r: seed_order.index(r['seed']))
    # the cores split over the workers, unless OMP_NUM_THREADS says how many (on cores other jobs share)
    threads = int(os.environ.get('OMP_NUM_THREADS') or 0) or max(1, (os.cpu_count() or 1) // workers)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED='1')
    running, failed, n_done = [], [], sum(r['selected'] and r['state'] == 'done' for r in runs)
    t0, last_status = time.time(), time.time()
    n_runs = sum(r['selected'] for r in runs)
    print(f"grid: {n_runs} runs, {n_done} finished, {len(pending)} to train, {workers} at a time "
          f"({threads} thread(s) each)")
    try:
        while pending or running:
            while pending and len(running) < workers:
                run = pending.pop(0)
                if start(run, env, then):
                    running.append(run)
                elif run['state'] == 'done':
                    n_done += 1
            time.sleep(0.5)
            for run in [r for r in running if r['proc'].poll() is not None]:
                running.remove(run)
                run['log'].close()
                run['lock'].release()
                minutes = (time.time() - run['t0']) / 60
                if run['proc'].returncode == 0 and state(run) == 'done':
                    n_done += 1
                    run['state'] = 'done'
                    print(f"[{run['arm']} seed {run['seed']}] done in {minutes:.1f} min")
                else:
                    failed.append(run)
                    with open(os.path.join(run['dir'], 'train.log')) as f:
                        tail = f.read().strip().splitlines()[-1:]
                    print(f"[{run['arm']} seed {run['seed']}] FAILED after {minutes:.1f} min: {' '.join(tail)}")
                elapsed = (time.time() - t0) / 60
                print(f"grid: {n_done}/{n_runs} done, {len(running)} running, {len(pending)} waiting, "
                      f"{len(failed)} failed; {elapsed:.1f} min so far")
            if running and time.time() - last_status > 60:
                last_status = time.time()
                print("  " + "; ".join(f"{r['arm']} seed {r['seed']}: {last_progress(r)}" for r in running))
    finally:
        stop(running)
    return failed


def start(run, env, then):
    """Start a run's trainer unless another process holds its dir, or finished it since the grid
    was planned. -> whether it started."""
    tag = f"[{run['arm']} seed {run['seed']}]"
    with rundir.writing(os.path.join(run['dir'], rundir.LOCK), 'the lock file', then):
        try:
            lock = rundir.DirLock(run['dir'])
        except rundir.Held as e:
            print(f"{tag} skipped: {run['dir']} is in use by {e}; rerun this command once it has ended")
            return False
    run['state'] = state(run)
    if run['state'] == 'done':
        lock.release()
        print(f"{tag} finished meanwhile by another process")
        return False
    cmd = command(run, run['state'] == 'partial')
    handed, fds = lock.child()
    with rundir.writing(os.path.join(run['dir'], 'train.log'), 'the train log', then):
        log = open(os.path.join(run['dir'], 'train.log'), 'a')
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
    run['proc'] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env | handed, pass_fds=fds)
    run['log'], run['lock'], run['t0'] = log, lock, time.time()
    print(f"{tag} {'resuming' if run['state'] == 'partial' else 'starting'} -> {run['dir']}/train.log")
    return True


def stop(running):
    """End the trainers still running when this process is interrupted: SIGTERM, which each
    answers by exiting with its last checkpoint intact (SIGKILL after a minute)."""
    for run in running:
        run['proc'].terminate()
    for run in running:
        try:
            run['proc'].wait(60)
        except subprocess.TimeoutExpired:
            run['proc'].kill()
            run['proc'].wait()
        run['lock'].release()


# -----------------------------------------------------------------------------
# Cluster launchers: each pending run a submitit job (a Slurm job, or a process here for
# submitit_local) that runs the run's train.py command, so the child is the local path's. submitit
# is optional: imported only for these launchers.

LAUNCHERS = ('local', 'slurm', 'submitit_local')
JOB_FILE = {'train': 'job.json', 'eval': 'eval_job.json'}   # in the run dir: the job that trains / evaluates it
# Slurm states (sacct) of a job that may still run: such a run is not resubmitted, as two jobs would train one
# run dir. UNKNOWN too: sacct failed, or does not list a job that new; a job purged from sacct needs its job.json deleted
ACTIVE = {'PENDING', 'RUNNING', 'REQUEUED', 'REQUEUE_FED', 'REQUEUE_HOLD', 'RESIZING', 'SUSPENDED', 'COMPLETING',
           'CONFIGURING', 'SIGNALING', 'STAGE_OUT', 'UNKNOWN'}


def check_launcher(cfg):
    """The launcher settings, checked before anything is written; -> the sbatch options of slurm_extra."""
    def fail(msg):
        raise SystemExit(f"config error: {msg}")
    launcher = cfg['launcher']
    if launcher not in LAUNCHERS:
        fail(f"unknown launcher {launcher!r}: local (train here, the default), slurm (a Slurm job per run, via "
             f"submitit) or submitit_local (those jobs as processes here)")
    if cfg['eval_on'] not in ('local', launcher):
        fail(f"eval_on={cfg['eval_on']!r}: eval jobs go through the runs' launcher, so eval_on is 'local' (the "
             f"default) or the launcher's name (--launcher={launcher})")
    if launcher == 'local':
        return {}
    if launcher == 'slurm' and not cfg['slurm_partition']:
        fail("--launcher=slurm needs --slurm_partition=NAME (`sinfo -s` lists the partitions)")
    for key, least in (('slurm_gpus_per_run', 0), ('slurm_cpus_per_run', 1), ('slurm_time_min', 1), ('slurm_mem_gb', 0)):
        if cfg[key] < least:
            fail(f"{key}={cfg[key]} must be >= {least}")
    extra = [kv.strip() for kv in cfg['slurm_extra'].split(',') if kv.strip()]
    if any('=' not in kv or not kv.split('=', 1)[0].strip() for kv in extra):
        fail(f"slurm_extra={cfg['slurm_extra']!r}: give sbatch options as key=value separated by commas, e.g. account=abc,qos=high")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise SystemExit(f"--launcher={launcher} needs the submitit package, which is not installed: pip install submitit") from None
    return dict(kv.split('=', 1) for kv in extra)


def train_job(fresh, resumed, run_dir, threads):
    """A training job: the run's train.py command as train_grid starts it (cwd the repo root, output
    appended to its train.log). Resumed if the run dir holds a checkpoint when the job starts, so a
    job that Slurm requeues after a preemption continues the run (train.py refuses a fresh start there)."""
    root = os.path.dirname(os.path.abspath(__file__))      # train.py and the study's relative paths live here
    run_dir = os.path.join(root, run_dir)
    cmd = resumed if os.path.exists(os.path.join(run_dir, 'ckpt.pt')) else fresh
    os.makedirs(run_dir, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED='1',
               RUNDIR_PARENT_PID=str(os.getpid()))            # the trainer ends with its job (rundir.die_with_parent)
    with open(os.path.join(run_dir, 'train.log'), 'a') as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        subprocess.run(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env, check=True)


def eval_job(run, mults, n, threads):
    """An eval job: the final eval and the mismatch of one finished run, written to its dir's caches
    exactly as the local path writes them; the summary then reads them."""
    os.chdir(os.path.dirname(os.path.abspath(__file__)))  # the run dir may be relative to the repo root
    torch.set_num_threads(threads)
    run = dict(run, state='done')
    evaluate([run], mults, n)
    measure_mismatch([run])


def job_function(name):
    """ablate.<name> by reference: a job imports this file (its working directory is the repo root)
    rather than unpickling copies of __main__'s functions, as it would from `python ablate.py`."""
    return getattr(importlib.import_module('ablate'), name)


def submit(cfg, kind, calls, extra):
    """Submit job_function(kind + '_job')(*args) for each args in calls, as one job array (on Slurm one
    sbatch: all or none). -> the jobs. A refusal exits with the scheduler's message on one line and
    leaves out_dir as it was: submitit writes its pickles and batch file before it calls sbatch."""
    if not calls:
        return []
    import submitit
    folder = os.path.abspath(os.path.join(cfg['out_dir'], 'submitit'))
    new = folder                                     # the outermost folder this submission creates, if any
    while not os.path.exists(os.path.dirname(new)):
        new = os.path.dirname(new)
    new = None if os.path.exists(new) else new
    before = set() if new else set(os.listdir(folder))
    params = {'name': f"{os.path.basename(os.path.normpath(cfg['out_dir']))}_{kind}",
              'timeout_min': cfg['slurm_time_min'], 'cpus_per_task': cfg['slurm_cpus_per_run']}
    if cfg['slurm_gpus_per_run']:
        params['gpus_per_node'] = cfg['slurm_gpus_per_run']
    if cfg['slurm_mem_gb']:
        params['mem_gb'] = cfg['slurm_mem_gb']
    if cfg['launcher'] == 'slurm':
        params['slurm_partition'] = cfg['slurm_partition']
        if extra:
            params['slurm_additional_parameters'] = extra
    try:
        with contextlib.redirect_stderr(io.StringIO()):   # submitit prints sbatch's stderr, then raises it
            executor = submitit.AutoExecutor(folder=folder, cluster='slurm' if cfg['launcher'] == 'slurm' else 'local')
            executor.update_parameters(**params)
            return executor.map_array(job_function(f'{kind}_job'), *zip(*calls))
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
        raise SystemExit(f"{cfg['launcher']} refused the submission of {len(calls)} {kind} job(s): {msg}") from None


def record_job(run, kind, job, cfg):
    """<run dir>/job.json (eval_job.json): the job's id, written only once the submission succeeded."""
    os.makedirs(run['dir'], exist_ok=True)
    info = {'job_id': job.job_id, 'launcher': cfg['launcher'], 'submitted': time.strftime('%Y-%m-%d %H:%M:%S'),
            'folder': str(job.paths.folder)}
    rundir.write_atomic(os.path.join(run['dir'], JOB_FILE[kind]), json.dumps(info, indent=1).encode())


def recorded_job(run, kind):
    """The submitit Job that job.json (eval_job.json) in the run dir names, or None."""
    path = os.path.join(run['dir'], JOB_FILE[kind])
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


def job_state(job):
    """Slurm's word for a job (sacct: PENDING, RUNNING, FAILED, PREEMPTED, ...) or, for a local job,
    RUNNING / FINISHED / INTERRUPTED / ENDED; FINISHED once its function returned or raised."""
    if job.paths.result_pickle.exists():
        return 'FINISHED'
    st = job.state
    if st.startswith('NO PROCESS'):        # a LocalJob this process did not start
        return 'RUNNING' if local_alive(job) else 'ENDED'
    return st


def is_running(st):
    return (st.split() or ['UNKNOWN'])[0] in ACTIVE


def dispatch(runs, cfg, kind, args_of, extra):
    """Submit a `kind` job for each run, unless the job its dir records is still queued or running;
    record the new job ids. -> [(run, job)] of every job now queued or running."""
    import submitit
    jobs = {run['dir']: recorded_job(run, kind) for run in runs}
    if any(isinstance(j, submitit.SlurmJob) for j in jobs.values()):
        submitit.SlurmJob.watcher.update()           # one sacct for all of them (a fresh one, not the watcher's cache)
    live, todo = [], []
    for run in runs:
        job, tag = jobs[run['dir']], f"[{run['arm']} seed {run['seed']}]"
        st = job and job_state(job)
        if st and is_running(st):
            print(f"{tag} {kind} job {job.job_id} is {st}: not resubmitted"
                  + (f" (if it is long gone, delete {run['dir']}/{JOB_FILE[kind]})" if st.startswith('UNKNOWN') else ''))
            live.append((run, job))
        else:
            if st:
                print(f"{tag} {kind} job {job.job_id} ended ({st}) with its work not done: resubmitting")
            todo.append(run)
    for run, job in zip(todo, submit(cfg, kind, [args_of(run) for run in todo], extra)):
        record_job(run, kind, job, cfg)
        resumes = ', resumes from its checkpoint' if kind == 'train' and run['state'] == 'partial' else ''
        print(f"[{run['arm']} seed {run['seed']}] submitted {kind} job {job.job_id}{resumes} -> {run['dir']}/"
              + ('train.log' if kind == 'train' else JOB_FILE[kind]))
        live.append((run, job))
    return live


def wait_jobs(live, cfg, kind):
    """Wait until none of the jobs is queued or running, saying which ended."""
    if not live:
        return
    poll = 1 if cfg['launcher'] == 'submitit_local' else 30      # Slurm: sacct is asked less often still
    print(f"waiting for {len(live)} {kind} job(s)")
    t0 = last_status = time.time()
    while live:
        states = [job_state(job) for _, job in live]
        for (run, job), st in zip(live, states):
            if not is_running(st):
                print(f"[{run['arm']} seed {run['seed']}] {kind} job {job.job_id} ended ({st}) after "
                      f"{(time.time() - t0) / 60:.1f} min")
        live = [p for p, st in zip(live, states) if is_running(st)]
        if live:
            time.sleep(poll)
        if live and kind == 'train' and time.time() - last_status > 60:
            last_status = time.time()
            print("  " + "; ".join(f"{r['arm']} seed {r['seed']}: {last_progress(r)}" for r, _ in live))


def launch(runs, cfg, extra):
    """The launchers' train_grid: each pending run submitted as a job (resuming where it has a
    checkpoint), none whose job is queued or running; with --wait, wait for every job. -> the runs
    whose job is still queued or running (none after --wait)."""
    seed_order = list(dict.fromkeys(r['seed'] for r in runs))          # seed by seed, as train_grid goes
    pending = sorted((r for r in runs if r['selected'] and r['state'] != 'done'), key=lambda r: seed_order.index(r['seed']))
    n_done = sum(r['selected'] and r['state'] == 'done' for r in runs)
    print(f"grid: {sum(r['selected'] for r in runs)} runs, {n_done} finished, {len(pending)} to train as "
          f"{cfg['launcher']} jobs (submitit's logs: {os.path.join(cfg['out_dir'], 'submitit')})")
    live = dispatch(pending, cfg, 'train', lambda r: (command(r, False), command(r, True), r['dir'],
                                                      cfg['slurm_cpus_per_run']), extra)
    if not cfg['wait']:
        return [run for run, _ in live]
    wait_jobs(live, cfg, 'train')
    for run in pending:
        run['state'] = state(run)
        if run['state'] != 'done':
            job = recorded_job(run, 'train')
            print(f"[{run['arm']} seed {run['seed']}] FAILED: its job {job.job_id} ended before the run finished; see "
                  f"{run['dir']}/train.log and {job.paths.stderr}; rerun this command to resubmit it")
    return []


def launch_evals(runs, cfg, mults, extra):
    """With eval_on=<launcher>: an eval job per finished run whose final eval or mismatch is not cached
    yet, unless one is queued or running; with --wait, wait for them. -> the runs still being evaluated."""
    evaluate(runs, mults, cfg['num_samples'], compute=False)
    measure_mismatch(runs, compute=False)
    todo = [r for r in runs if r['state'] == 'done' and not ('eval' in r and 'mismatch' in r)]
    slim = lambda r: {k: r[k] for k in ('arm', 'seed', 'dir', 'cfg', 'tasks')}  # noqa: E731
    live = dispatch(todo, cfg, 'eval', lambda r: (slim(r), mults, cfg['num_samples'], cfg['slurm_cpus_per_run']), extra)
    if not cfg['wait']:
        return [run for run, _ in live]
    wait_jobs(live, cfg, 'eval')
    evaluate(todo, mults, cfg['num_samples'], compute=False)
    measure_mismatch(todo, compute=False)
    for run, job in live:
        if not ('eval' in run and 'mismatch' in run):
            print(f"[{run['arm']} seed {run['seed']}] FAILED: its eval job {job.job_id} ended without writing the eval; "
                  f"see {job.paths.stderr}; rerun this command to resubmit it")
    return []


def cached(run, name, key, compute):
    """compute() once per run and key: kept in the run dir as `name`; other settings recompute it.
    compute=None only reads what an eval job cached, whatever device its node had: -> None if absent."""
    path = os.path.join(run['dir'], name)
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        same = (lambda k: k) if compute else (lambda k: {a: v for a, v in (k or {}).items() if a != 'device'})  # noqa: E731
        if same(saved.get('key')) == same(key):
            return saved['record']
    if compute is None:
        return None
    record = compute()
    with rundir.writing(path, f"the cached {name}", "rerun this command"):
        rundir.write_atomic(path, json.dumps({'key': key, 'record': record}, indent=1).encode())
    return record


def evaluate(runs, mults, n, compute=True):
    """The final eval of every finished run, cached in its dir (ablate_eval.json) for these settings;
    compute=False only reads what eval jobs cached (a run without it gets no 'eval')."""
    for run in runs:
        if run['state'] != 'done':
            continue
        tasks = run['tasks']                         # the run's eval_tasks, or the tasks it trained on
        device = rundir.pick_device(run['cfg']['device'])
        key = {'multiples': mults, 'num_samples': n, 'tasks': tasks, 'iter': run['cfg']['max_iters'], 'seed': 0,
               'device': device.split(':')[0], 'record': 'length_eval'}   # older caches held a list of rows

        def final_eval():
            print(f"[{run['arm']} seed {run['seed']}] final eval: {n} examples per task and length")
            with contextlib.redirect_stdout(io.StringIO()):          # the model summary line, for every run
                return eval_lengths.evaluate_run(run['dir'], tasks, mults, n, run['cfg']['eval_batch_size'], device)
        record = cached(run, 'ablate_eval.json', key, final_eval if compute else None)
        if record is not None:
            run['eval'] = record


MISMATCH = ('mean_shift', 'var_ratio', 'pre_act_mean_shift', 'pre_act_var_ratio')
MISMATCH_ROWS = 16   # validation rows per run for the mismatch; in its cache key (it fixes the rows for a corpus)


def measure_mismatch(runs, compute=True):
    """Train-vs-eval mismatch of every finished run at its own dropout site: model.dropout_mismatch
    on (up to) MISMATCH_ROWS rows of its validation data, averaged over the linear layers; cached in the run dir
    (ablate_mismatch.json; compute=False only reads it). `python model.py RUN_DIR` prints the per-layer values for every site."""
    for run in runs:
        if run['state'] != 'done':
            continue

        def mean_over_layers():               # the data is read only here: a cached run needs none
            T = run['cfg']['block_size']
            ids, _ = sample_data.load_split(run['cfg']['data_dir'], 'val')
            idx = torch.from_numpy(ids[:min(MISMATCH_ROWS, len(ids) // T) * T].astype('int64')).view(-1, T)   # (<= MISMATCH_ROWS, T)
            with contextlib.redirect_stdout(io.StringIO()):
                model, _, _ = eval_lengths.load_run(run['dir'], 'cpu')
            rows = dropout_mismatch(model, idx)
            return {k: sum(r[k] for r in rows) / len(rows) for k in MISMATCH}
        record = cached(run, 'ablate_mismatch.json', {'iter': run['cfg']['max_iters'], 'max_rows': MISMATCH_ROWS},
                        mean_over_layers if compute else None)
        if record is not None:
            run['mismatch'] = record


def mean_std(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return m, sd


# -----------------------------------------------------------------------------
# Outcomes and their tests. A run nearly always either extrapolates or collapses, and a study has
# 2-5 seeds per arm: so per-run outcomes and exact tests, not a mean ± std over seeds alone.
# Plain Python (math.comb), no scipy; tests/test_ablate.py checks them against scipy's numbers.

TESTS = {'alpha': 0.05, 'power': 0.8}     # a dict, not config keys: fixed with the tests they size
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # t_0.975, df 1..30


def fisher_exact(a, b, c, d):
    """Two-sided Fisher exact test of the 2x2 table [[a, b], [c, d]]: with the margins fixed, the
    probability of a table no likelier than this one. The weights are integers, so ties are exact."""
    r1, r2, c1 = a + b, c + d, a + c
    weight = lambda x: math.comb(r1, x) * math.comb(r2, c1 - x)  # noqa: E731
    observed = weight(a)
    return sum(w for w in map(weight, range(max(0, c1 - r2), min(r1, c1) + 1)) if w <= observed) / math.comb(r1 + r2, c1)


def smallest_fisher_p(n1, n2):
    """The smallest p Fisher's test can give with n1 and n2 runs: above alpha, no outcome is significant."""
    return min(fisher_exact(a, n1 - a, c, n2 - c) for a in range(n1 + 1) for c in range(n2 + 1))


def wilson(k, n, z=1.959963984540054):
    """95% Wilson score interval of a share k/n: unlike k/n ± 1.96 se it stays in [0, 1] and is not
    zero-width at 0/n or n/n, which are the common shares here."""
    if n == 0:
        return None
    p, z2 = k / n, z * z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [0.0 if k == 0 else centre - half, 1.0 if k == n else centre + half]   # exact ends, no float dust


def mean_ci(xs):
    """-> (mean, 95% Student t interval clipped to [0, 1] (accuracies)); the interval needs 2 values."""
    if not xs:
        return None, None
    m, sd = mean_std(xs)
    if sd is None:
        return m, None
    df = len(xs) - 1
    z = 1.959963984540054
    t = T975[df - 1] if df <= len(T975) else z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
    half = t * sd / math.sqrt(len(xs))
    return m, [max(0.0, m - half), min(1.0, m + half)]


def holm(ps):
    """Holm's step-down adjustment of p-values (same order): controls the family-wise error over the arms."""
    adjusted, running = [None] * len(ps), 0.0
    for rank, i in enumerate(sorted(range(len(ps)), key=lambda i: ps[i])):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def permutation_test(x, y, max_exact=200_000, n_random=20_000, seed=0):
    """Two-sided permutation test of mean(x) = mean(y): the share of the splits of the pooled values
    into groups of len(x) and len(y) whose |difference of means| is at least the observed one.
    Every split when there are at most max_exact, else n_random random ones. -> (p, method)."""
    pooled, n = list(x) + list(y), len(x)
    total = sum(pooled)
    diff = lambda sx: abs(sx / n - (total - sx) / len(y))  # noqa: E731
    observed = diff(sum(x)) - 1e-9               # a tie in exact arithmetic must count despite float noise
    splits = math.comb(len(pooled), n)
    if splits <= max_exact:
        hits = sum(diff(sum(pooled[i] for i in idx)) >= observed for idx in itertools.combinations(range(len(pooled)), n))
        return hits / splits, f"exact: all {splits:,} splits"
    rng = random.Random(seed)
    hits = sum(diff(sum(rng.sample(pooled, n))) >= observed for _ in range(n_random))
    return (hits + 1) / (n_random + 1), f"Monte Carlo: {n_random:,} random splits (seed {seed}), p = (hits + 1) / (draws + 1)"


def sign_flip_test(d, max_exact=2 ** 16, n_random=20_000, seed=0):
    """Two-sided paired test of mean(d) = 0 over per-seed differences d: under the null each
    difference is as likely negated, so p is the share of sign patterns whose |sum| is at least the
    observed one. Every pattern when there are at most max_exact, else n_random random ones. -> (p, method)."""
    observed = abs(sum(d)) - 1e-9
    if 2 ** len(d) <= max_exact:
        hits = sum(abs(sum(s * v for s, v in zip(signs, d))) >= observed for signs in itertools.product((1, -1), repeat=len(d)))
        return hits / 2 ** len(d), f"exact: all {2 ** len(d):,} sign patterns"
    rng = random.Random(seed)
    hits = sum(abs(sum(v if rng.random() < 0.5 else -v for v in d)) >= observed for _ in range(n_random))
    return (hits + 1) / (n_random + 1), f"Monte Carlo: {n_random:,} random sign patterns (seed {seed}), p = (hits + 1) / (draws + 1)"


def power_fisher(p1, p2, n, alpha=0.05):
    """Power of the two-sided Fisher test at level alpha, n runs per arm, true rates p1 and p2:
    the chance of a significant table, summed exactly over both binomials. Given the total t of
    successes the test rejects the least likely tables (hypergeometric) while their mass is <= alpha."""
    comb = [math.comb(n, k) for k in range(n + 1)]
    b1 = [comb[k] * p1 ** k * (1 - p1) ** (n - k) for k in range(n + 1)]
    b2 = [comb[k] * p2 ** k * (1 - p2) ** (n - k) for k in range(n + 1)]
    power = 0.0
    for t in range(2 * n + 1):
        weights = sorted((comb[x] * comb[t - x], x) for x in range(max(0, t - n), min(n, t) + 1))
        total, mass = math.comb(2 * n, t), 0
        for w, tied in itertools.groupby(weights, key=lambda wx: wx[0]):   # equally likely tables share a p
            tied = [x for _, x in tied]
            mass += w * len(tied)
            if mass / total > alpha:
                break
            power += sum(b1[x] * b2[t - x] for x in tied)
    return power


def seeds_for_power(p1, p2, power=0.8, alpha=0.05, n_max=200):
    """The smallest n per arm at which power_fisher reaches `power`: an int, f'>{n_max}', or None
    when p1 == p2 (no effect: no n suffices)."""
    if p1 == p2:
        return None
    return next((n for n in range(1, n_max + 1) if power_fisher(p1, p2, n, alpha) >= power), f'>{n_max}')


def fit_iter_of(records, fit_accuracy):
    """The first eval iteration at which the run fit, or None. train.py notes it in its eval records
    ('fit_iter'); a log written before it did is read with the same rule: the first record whose 1x
    accuracy is >= fit_accuracy for every task of its length eval."""
    if records and 'fit_iter' in records[-1]:
        return records[-1]['fit_iter']
    for rec in records:
        accs = rec.get('length_eval') or {}
        if accs and train.fits(accs, fit_accuracy):     # train.py's own rule
            return rec['iter']
    return None


def find_fit(runs, fit_accuracy):
    """run['fit_iter'] of every finished run, from its log.jsonl."""
    for run in runs:
        if run['state'] == 'done':
            run['fit_iter'] = fit_iter_of(rundir.read_log(os.path.join(run['dir'], 'log.jsonl'), float('inf')), fit_accuracy)


def init_template(cfg, arm, study_argv):
    """The init_from of an arm's runs with '{seed}' unfilled, as plan() builds it (later overrides win)."""
    template = {**cfg['common'], **cfg['arms'][arm]}.get('init_from', '')
    for a in study_argv:
        if a.startswith('--init_from='):
            template = a.split('=', 1)[1]
    return template


def arm_outcomes(per_seed, cfg):
    """per_seed: {seed: (fit_iter, accuracy at extrap_multiple or None if not measured)} of an arm's
    finished runs -> its outcome counts and intervals. Never-fit runs are counted apart: a run that
    did not learn the task says nothing about extrapolating it."""
    fit = {s: o for s, o in per_seed.items() if o[0] is not None}
    steps = {str(s): it for s, (it, _) in fit.items()}
    accs = {s: a for s, (_, a) in fit.items() if a is not None}
    extrap = [s for s, a in accs.items() if a >= cfg['extrap_threshold']]
    mean, ci = mean_ci(list(accs.values()))
    return {'runs': len(per_seed), 'fit': len(fit), 'never_fit': [s for s, o in per_seed.items() if o[0] is None],
            'steps_to_fit': {'per_seed': steps, 'median': statistics.median(steps.values()) if steps else None,
                             'min': min(steps.values(), default=None), 'max': max(steps.values(), default=None)},
            'extrapolates': {'count': len(extrap), 'of': len(accs), 'seeds': extrap,
                             'not_measured': [s for s in fit if s not in accs],   # the final eval skipped the point
                             'share': len(extrap) / len(accs) if accs else None, 'ci95': wilson(len(extrap), len(accs)),
                             'interval': 'Wilson score'},
            'accuracy_at_extrap': {'multiple': cfg['extrap_multiple'], 'per_seed': {str(s): a for s, a in accs.items()},
                                   'mean': mean, 'ci95': ci, 'interval': 'Student t over fit runs, clipped to [0, 1]'}}


def versus_control(arm, ctrl, paired):
    """The tests of one arm against the control, over fit runs (Holm is applied across arms after)."""
    e1, e0 = arm['extrapolates'], ctrl['extrapolates']
    out = {'fisher': None, 'permutation': None, 'paired': None, 'power': None}
    if e1['of'] and e0['of']:
        table = [[e1['count'], e1['of'] - e1['count']], [e0['count'], e0['of'] - e0['count']]]
        out['fisher'] = {'table': table, 'rows': ['arm', 'control'], 'columns': ['extrapolates', 'fit but not'],
                         'p': fisher_exact(*table[0], *table[1]), 'smallest_possible_p': smallest_fisher_p(e1['of'], e0['of'])}
        n = seeds_for_power(e1['share'], e0['share'], TESTS['power'], TESTS['alpha'])
        out['power'] = {'rates': [e1['share'], e0['share']], 'seeds_per_arm': n,
                        'note': 'the observed rates are equal: the effect is zero, no n suffices' if n is None else
                                f"fit runs per arm for {TESTS['power']:.0%} power, two-sided Fisher at alpha {TESTS['alpha']}"}
    x, y = arm['accuracy_at_extrap']['per_seed'], ctrl['accuracy_at_extrap']['per_seed']
    if x and y:
        p, method = permutation_test(list(x.values()), list(y.values()))
        out['permutation'] = {'p': p, 'method': method,
                              'difference': arm['accuracy_at_extrap']['mean'] - ctrl['accuracy_at_extrap']['mean']}
    if paired:
        both = [s for s in x if s in y]
        p, method = sign_flip_test([x[s] - y[s] for s in both]) if both else (None, 'no seed fit in both arms')
        out['paired'] = {'p': p, 'method': method, 'seeds': [int(s) for s in both],
                         'difference': sum(x[s] - y[s] for s in both) / len(both) if both else None}
    return out


def add_outcomes(arms_out, per_run, cfg, study_argv):
    """Per arm its outcomes; per non-control arm its tests against the control, Fisher p Holm-corrected over those arms."""
    for name, arm in arms_out.items():
        arm.update(arm_outcomes(per_run.get(name, {}), cfg))
    ctrl = arms_out.get(cfg['control'])
    if ctrl is None:
        return
    paired_on = init_template(cfg, cfg['control'], study_argv)
    tested = []
    for name, arm in arms_out.items():
        if name != cfg['control']:
            template = init_template(cfg, name, study_argv)
            arm['vs_control'] = versus_control(arm, ctrl, '{seed}' in template and template == paired_on)
            if arm['vs_control']['fisher']:
                tested.append(arm['vs_control']['fisher'])
    for f, p in zip(tested, holm([f['p'] for f in tested])):
        f['p_holm'] = p


def run_outcome(run, cfg):
    """(fit_iter, accuracy at extrap_multiple on the primary task in the final eval, or None)."""
    task = cfg['extrap_task'] or run['tasks'][0]
    acc = run['eval']['length_eval'].get(task, {}).get(f"{cfg['extrap_multiple']}x")
    return run.get('fit_iter'), acc


def summarize(runs, cfg, study_argv):
    """results.json: per arm, its overrides, per task and multiple the per-seed accuracies, and its
    outcomes under the pre-registered rule with the tests against the control."""
    arms_out, per_run, primary = {}, {}, {}
    for run in runs:
        arm = arms_out.setdefault(run['arm'], {'overrides': cfg['arms'][run['arm']], 'seeds': [], 'pending_seeds': [],
                                               'tasks': {}})
        if 'eval' not in run:
            arm['pending_seeds'].append(run['seed'])
            continue
        arm['seeds'].append(run['seed'])
        per_run.setdefault(run['arm'], {})[run['seed']] = run_outcome(run, cfg)
        primary.setdefault(run['arm'], {})[cfg['extrap_task'] or run['tasks'][0]] = None
        if 'mismatch' in run:
            arm.setdefault('mismatch_per_seed', {})[str(run['seed'])] = run['mismatch']
        for task, accs in run['eval']['length_eval'].items():
            for m, acc in accs.items():
                if acc is not None:
                    point = arm['tasks'].setdefault(task, {}).setdefault(m[:-1], {'per_seed': {}})
                    point['per_seed'][str(run['seed'])] = acc
                    point['length'] = int(m[:-1]) * run['eval']['block_size']
    for arm in arms_out.values():
        if arm.get('mismatch_per_seed'):
            per_seed = list(arm['mismatch_per_seed'].values())
            arm['mismatch'] = {k: sum(m[k] for m in per_seed) / len(per_seed) for k in MISMATCH}
        for task in arm['tasks'].values():
            for point in task.values():
                point['mean'], point['std'] = mean_std(list(point['per_seed'].values()))
    add_outcomes(arms_out, per_run, cfg, study_argv)
    for name, arm in arms_out.items():
        arm['accuracy_at_extrap']['task'] = ','.join(primary.get(name, {})) or None
    task = cfg['extrap_task'] or "the run's first eval task"
    rule = {'control': cfg['control'], 'fit_accuracy': cfg['fit_accuracy'], 'extrap_multiple': cfg['extrap_multiple'],
            'extrap_threshold': cfg['extrap_threshold'], 'extrap_task': cfg['extrap_task'], **TESTS,
            'fit': f"a run fits at the first quick eval where the 1x accuracy of every task it evaluates is >= "
                   f"{cfg['fit_accuracy']}; a run that never does is counted apart and left out of the extrapolation statistics",
            'extrapolates': f"a fit run extrapolates when its final-eval accuracy at {cfg['extrap_multiple']}x on {task} "
                            f"is >= {cfg['extrap_threshold']}",
            'tests': f"each arm against {cfg['control']!r}: two-sided Fisher exact test on extrapolates / fit but not "
                     f"(Holm-corrected over the arms), two-sided permutation test of the mean accuracy at "
                     f"{cfg['extrap_multiple']}x over fit runs, and a paired sign-flip test over seeds fit in both where "
                     f"both arms continue the same runs (init_from with '{{seed}}')" if cfg['control'] else 'none (control is empty)'}
    # the command that regenerates these results: how the runs were scheduled does not matter
    study_argv = [a for a in study_argv if a[2:].split('=', 1)[0] not in SCHEDULING]
    return {'command': 'python ablate.py ' + shlex.join(study_argv), 'base_config': cfg['base_config'],
            'common': cfg['common'], 'out_dir': cfg['out_dir'],
            'eval': {'multiples': eval_lengths.parse_multiples('multiples', cfg['multiples']),
                     'num_samples': cfg['num_samples'], 'seed': 0, 'std': 'sample standard deviation over seeds'},
            'rule': rule, 'arms': arms_out}


def fmt_p(p):
    return '-' if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_ci(x, ci):
    return '-' if x is None else f"{x:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else '')


def outcomes_table(results):
    """The Outcomes table: one row per arm, its outcome counts and its tests against the control."""
    rule, c = results['rule'], results['rule']['control']
    m = rule['extrap_multiple']
    lines = [f"| arm | runs | fit | steps to fit (median, range) | extrapolate (k/n, share [95% CI]) | {m}x accuracy "
             f"of fit runs (mean [95% CI]) | Fisher p (Holm) | permutation p | paired p | seeds for {rule['power']:.0%} power |",
             '| --- |' + ' --- |' * 9]
    for name, arm in results['arms'].items():
        st, ex, acc = arm['steps_to_fit'], arm['extrapolates'], arm['accuracy_at_extrap']
        steps = '-' if st['median'] is None else f"{st['median']:g} ({st['min']}..{st['max']})"
        share = '-' if not ex['of'] else f"{ex['count']}/{ex['of']}, {fmt_ci(ex['share'], ex['ci95'])}"
        tests = ['control'] + ['-'] * 3 if name == c else ['-'] * 4
        v = arm.get('vs_control')
        if v and v['fisher']:
            tests[0] = f"{fmt_p(v['fisher']['p'])} ({fmt_p(v['fisher']['p_holm'])})"
            n = v['power']['seeds_per_arm']
            tests[3] = 'none: equal rates' if n is None else str(n)
        if v and v['permutation']:
            tests[1] = fmt_p(v['permutation']['p']) + (' (MC)' if v['permutation']['method'].startswith('Monte') else '')
        if v and v['paired']:
            both = v['paired']['seeds']
            mc = ', MC' if v['paired']['method'].startswith('Monte') else ''
            tests[2] = f"{fmt_p(v['paired']['p'])} ({len(both)} seeds{mc})" if both else 'no seed fit in both'
        lines.append(f"| {name} | {arm['runs']} | {arm['fit']} | {steps} | {share} | {fmt_ci(acc['mean'], acc['ci95'])} | "
                     + ' | '.join(tests) + ' |')
    lines += ['', f"Steps to fit: the iteration of the run's first quick eval that met the fit rule. Extrapolate: fit runs "
              f"that met the extrapolation rule, 95% Wilson interval; the accuracy interval is Student t over fit runs. "
              f"Fisher p: two-sided exact test of extrapolates / fit but not against {c or 'the control'}, raw "
              f"(Holm-adjusted over the arms tested). Permutation p: two-sided, difference of the mean {m}x accuracy "
              f"over fit runs, exact over all splits (MC: 20,000 random splits, seed 0). Paired p: sign-flip test over the "
              f"seeds fit in both arms (exact up to 16 seeds), only where both continue the same runs ('-': not paired). "
              f"Seeds for power: fit runs per arm the observed shares would need for {rule['power']:.0%} power (two-sided Fisher at alpha "
              f"{rule['alpha']}, exact; searched up to 200).", '']
    return lines


def what_tests_support(results):
    """One paragraph: the pre-registered rule, then only what the tests' numbers support."""
    rule, arms, c, alpha = results['rule'], results['arms'], results['rule']['control'], results['rule']['alpha']
    m = rule['extrap_multiple']
    out = [f"Pre-registered rule: {rule['fit']}; {rule['extrapolates']}; control: {c or 'none (no tests)'}."]
    never = [f"{n} seed{'s' if len(a['never_fit']) > 1 else ''} {', '.join(map(str, a['never_fit']))}"
             for n, a in arms.items() if a['never_fit']]
    if never:
        out.append(f"{sum(len(a['never_fit']) for a in arms.values())} of {sum(a['runs'] for a in arms.values())} "
                   f"finished runs never fit ({'; '.join(never)}).")
    if not c:
        return ' '.join(out + ['No control is set, so nothing is tested.'])
    if c not in arms or not arms[c]['extrapolates']['of']:
        return ' '.join(out + [f"{c} has no fit run measured at {m}x yet, so nothing is tested."])
    k0, n0 = arms[c]['extrapolates']['count'], arms[c]['extrapolates']['of']
    tested = {n: a['vs_control'] for n, a in arms.items() if n != c and a['vs_control']['fisher']}
    untested = [n for n in arms if n != c and n not in tested]
    if untested:
        out.append(f"Not tested (no fit run measured at {m}x): {', '.join(untested)}.")
    if not tested:
        return ' '.join(out)
    sig = [n for n, v in tested.items() if v['fisher']['p_holm'] <= alpha]   # reject at p <= alpha, as power_fisher counts
    for n in sig:
        e, f = arms[n]['extrapolates'], tested[n]['fisher']
        out.append(f"{n} extrapolates {'more' if e['share'] > arms[c]['extrapolates']['share'] else 'less'} often than {c} "
                   f"({e['count']}/{e['of']} vs {k0}/{n0} fit runs; Fisher p = {fmt_p(f['p'])}, {fmt_p(f['p_holm'])} after Holm).")
    rest = [n for n in tested if n not in sig]
    if rest:
        best = min(rest, key=lambda n: tested[n]['fisher']['p_holm'])
        out.append(f"{'No other' if sig else 'No'} arm differs from {c} in how often it extrapolates at alpha {alpha} after "
                   f"Holm correction; the smallest adjusted p is {fmt_p(tested[best]['fisher']['p_holm'])} ({best}, raw "
                   f"{fmt_p(tested[best]['fisher']['p'])}).")
        floor = [n for n in rest if tested[n]['fisher']['smallest_possible_p'] > alpha]
        if floor:
            out.append(f"With these few fit runs no outcome could reach p <= {alpha} for "
                       + ', '.join(f"{n} ({arms[n]['extrapolates']['of']} vs {n0}: smallest possible p "
                                   f"{fmt_p(tested[n]['fisher']['smallest_possible_p'])})" for n in floor)
                       + ": there the test could not have found a difference, whatever the effect.")
    for test, what in (('permutation', f"mean {m}x accuracy of fit runs"), ('paired', f"paired {m}x accuracy (seeds fit in both)")):
        ps = {n: v[test]['p'] for n, v in tested.items() if v[test] and v[test]['p'] is not None}
        if not ps:
            continue
        low = [n for n, p in ps.items() if p <= alpha]
        if low:
            out.append(f"By the {what}: " + '; '.join(
                f"{n} is {'above' if tested[n][test]['difference'] > 0 else 'below'} {c} (difference "
                f"{tested[n][test]['difference']:+.2f}, {test} p = {fmt_p(ps[n])})" for n in low)
                + f", uncorrected for the {len(ps)} arm(s) tested.")
        else:
            best = min(ps, key=ps.get)
            out.append(f"No arm differs from {c} by {what} at alpha {alpha} ({test} test; the smallest p, uncorrected, "
                       f"is {fmt_p(ps[best])}, {best}).")
    return ' '.join(out)


def format_markdown(results):
    mults = results['eval']['multiples']
    lines = [f"`{results['command']}`", '',
             f"Accuracy per length multiple: mean ± standard deviation over seeds, "
             f"{results['eval']['num_samples']} held-out examples per point and seed.", '']
    lines += ['**Outcomes**', ''] + outcomes_table(results) + ['**What the tests support**', '', what_tests_support(results), '']
    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    for task in tasks:
        lines += [f"**{task}**", '', '| arm | seeds | ' + ' | '.join(f'{m}x' for m in mults) + ' |',
                  '| --- | --- |' + ' --- |' * len(mults)]
        for name, arm in results['arms'].items():
            cells = []
            for m in mults:
                p = arm['tasks'].get(task, {}).get(str(m))
                cells.append('-' if p is None else f"{p['mean']:.2f}" + (f" ± {p['std']:.2f}" if p['std'] is not None else ''))
            lines.append(f"| {name} | {len(arm['seeds'])} | " + ' | '.join(cells) + ' |')
        # a mean over 2-3 seeds hides whether they agree: every seed's own row
        lines += ['', 'Per seed:', '', '| arm | seed | ' + ' | '.join(f'{m}x' for m in mults) + ' |',
                  '| --- | --- |' + ' --- |' * len(mults)]
        for name, arm in results['arms'].items():
            for seed in arm['seeds']:
                points = [arm['tasks'].get(task, {}).get(str(m), {}).get('per_seed', {}).get(str(seed)) for m in mults]
                mark = ' †' if seed in arm['never_fit'] else ''
                lines.append(f"| {name} | {seed}{mark} | " + ' | '.join('-' if a is None else f"{a:.2f}" for a in points) + ' |')
        if any(a['never_fit'] for a in results['arms'].values()):
            lines += ['', '† never fit: counted apart, left out of the extrapolation statistics.']
        lines.append('')
    measured = {n: a['mismatch'] for n, a in results['arms'].items() if a.get('mismatch')}
    if measured:
        lines += ["Train-vs-eval mismatch at each arm's own dropout site, mean over its linear layers and its "
                  f"seeds ({MISMATCH_ROWS} validation rows, 8 masks; `python model.py RUN_DIR` gives it per layer and site): "
                  "shift of the mean in eval standard deviations (0 = kept) and train/eval variance ratio "
                  "(1 = kept), at the layers' inputs and at their outputs (pre-activations).", '',
                  '| arm | input shift | input var ratio | pre-act shift | pre-act var ratio |',
                  '| --- | --- | --- | --- | --- |']
        lines += [f"| {n} | " + ' | '.join(f"{m[k]:.3f}" for k in MISMATCH) + ' |' for n, m in measured.items()]
        lines.append('')
    pending = {n: a['pending_seeds'] for n, a in results['arms'].items() if a['pending_seeds']}
    if pending:
        lines.append('Not finished yet (left out above): ' + '; '.join(f"{n} seeds {s}" for n, s in pending.items()))
    return '\n'.join(lines) + '\n'


def step_curves(runs):
    """{arm: {task: {'<m>x': {iter: mean over the arm's seeds}}}} from each run's log.jsonl; an
    iteration counts once every finished seed of the arm has logged it."""
    per_run = {}
    for run in runs:
        path = os.path.join(run['dir'], 'log.jsonl')
        if run['state'] != 'done' or not os.path.exists(path):
            continue
        for rec in rundir.read_log(path, float('inf')):
            for task, accs in (rec.get('length_eval') or {}).items():
                if isinstance(accs, dict):
                    for m, a in accs.items():
                        if a is not None:
                            per_run.setdefault((run['arm'], task, m), {}).setdefault(rec['iter'], {})[run['seed']] = a
    curves = {}
    for (arm, task, m), by_iter in per_run.items():
        n_seeds = max(len(v) for v in by_iter.values())
        points = {it: sum(v.values()) / len(v) for it, v in sorted(by_iter.items()) if len(v) == n_seeds}
        if len(points) > 1:         # the quick eval's multiples, not those measured only at the end
            curves.setdefault(arm, {}).setdefault(task, {})[m] = points
    return curves


def plot(results, curves, out):
    """accuracy_vs_length.png (every run thin, each arm's median bold: outcomes are nearly binary per
    run, so a mean with a band would hide them) and accuracy_vs_step.png (mean over seeds)."""
    def by_length(ax, task):
        for i, (name, arm) in enumerate(results['arms'].items()):
            pts = sorted((int(m), p) for m, p in arm['tasks'].get(task, {}).items())
            if not pts:
                continue
            xs, color = [m for m, _ in pts], f"C{i}"
            for seed in pts[0][1]['per_seed']:
                ax.plot(xs, [p['per_seed'].get(seed) for _, p in pts], color=color, lw=0.8, alpha=0.35)
            medians = [statistics.median(p['per_seed'].values()) for _, p in pts]
            ax.plot(xs, medians, color=color, lw=2.5, marker='o', label=f"{name} (median of {len(arm['seeds'])} seeds)")
            ax.set_xticks(xs, [f"{m}x" for m in xs])
            ax.minorticks_off()

    def by_step(ax, panel):
        task, m = panel.split(' at ')
        for name, by_task in curves.items():
            pts = by_task.get(task, {}).get(m)
            if pts:
                ax.plot(list(pts), list(pts.values()), marker='.', label=name)

    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    if tasks:
        eval_lengths.plot_panels(tasks, by_length, os.path.join(out, 'accuracy_vs_length.png'),
                                 'length (multiple of the training length)', 'accuracy (thin: one run each)')
    panels = sorted({(t, m) for a in curves.values() for t, by_m in a.items() for m in by_m},
                    key=lambda tm: (tasks.index(tm[0]) if tm[0] in tasks else 99, int(tm[1][:-1])))
    if panels:
        eval_lengths.plot_panels([f"{t} at {m}" for t, m in panels], by_step, os.path.join(out, 'accuracy_vs_step.png'),
                                 'training step', 'accuracy (mean over seeds)', log2=False)


def grid_of(argv):
    """The arguments that say what a grid is: argv without how it is scheduled or where its summary goes."""
    return [a for a in argv if a[2:].split('=', 1)[0] not in SCHEDULING | {'results_dir'}]


def summary_dir(cfg, argv):
    """Where results.* go. A study config's results_dir holds the committed summary of that config's
    own grid: a grid with any override of what it is (--arms, seeds, a train.py setting, out_dir,
    another config file) sends its summary to out_dir instead. A summary that another grid wrote is
    never replaced: refused here, before any run starts."""
    grid, out = grid_of(argv), cfg['results_dir'] or cfg['out_dir']
    if cfg['results_dir'] and len(grid) > 1 and not any(a.startswith('--results_dir=') for a in argv):
        print(f"this grid is not {grid[0]}'s own ({shlex.join(grid[1:])}): its summary goes to {cfg['out_dir']}, "
              f"not {cfg['results_dir']}")
        out = cfg['out_dir']
    path = os.path.join(out, 'results.json')
    if os.path.normpath(out) != os.path.normpath(cfg['out_dir']) and os.path.isfile(path):
        with open(path) as f:
            command = json.load(f).get('command', '')
        if grid_of(shlex.split(command)[2:]) != grid:
            raise SystemExit(f"{path} summarizes another grid (`{command}`), not this one: give this grid's summary "
                             f"its own place, e.g. --results_dir={cfg['out_dir']}")
    return out


def where_grid_stands(runs, argv):
    """The line an interrupted ablate.py ends with: how far the grid got, and the command that goes on."""
    selected = [r for r in runs if r['selected']]
    done = sum(r.get('state') == 'done' for r in selected)
    stopped = sum('proc' in r and r['proc'].poll() is None for r in selected)
    return (f"{done} of {len(selected)} runs finished" + (f", {stopped} stopping at their last checkpoint" if stopped else '')
            + f"; resume with: {shlex.join(['python', 'ablate.py', *argv])}")


def main(argv):
    study = {k: v for k, v in globals().items() if k in ('arms', 'common')}
    settings = settings_of(globals()) | study
    train_settings = settings_of(vars(train))
    own, passed, selected = split_argv(argv, settings, train_settings)
    cfg = configure(settings, own)
    extra = check_launcher(cfg)
    runs = plan(cfg, passed, selected, train_settings)
    out = None if cfg['dry_run'] else summary_dir(cfg, argv)     # a dry run writes no summary, no eval cache
    rerun = f"rerun: {shlex.join(['python', 'ablate.py', *argv])} (finished runs are kept)"
    if out:
        rundir.check_writable(out, 'results.json', rerun)
    rundir.exit_on_signals(lambda: where_grid_stands(runs, argv))
    for run in runs:
        run['state'] = state(run)
    check_sources(runs)
    prepare_data(runs)                  # also for --dry_run: jobs started elsewhere must not race to write it
    if cfg['dry_run']:
        pending = [r for r in runs if r['selected'] and r['state'] != 'done']
        print(f"# {len(pending)} pending of {sum(r['selected'] for r in runs)} runs; each is independent (run them in any order, anywhere "
              f"that sees {cfg['out_dir']}), then rerun this command without --dry_run to summarize")
        for run in pending:
            print(shlex.join(['python', *command(run, run['state'] == 'partial')[1:]]))
    elif cfg['launcher'] == 'local':
        failed = train_grid(runs, cfg['workers'], rerun)
        if failed:
            print(f"{len(failed)} run(s) failed: see their train.log; rerun this command to retry them")
    mults, queued = eval_lengths.parse_multiples('multiples', cfg['multiples']), []
    if cfg['launcher'] != 'local' and not cfg['dry_run']:
        queued = launch(runs, cfg, extra)
        if cfg['eval_on'] != 'local':
            queued += launch_evals(runs, cfg, mults, extra)
    compute = cfg['eval_on'] == 'local' and not cfg['dry_run']   # else only cached evals are read (eval jobs wrote them)
    evaluate(runs, mults, cfg['num_samples'], compute)
    measure_mismatch(runs, compute)
    for run in runs:
        if run['state'] == 'done' and not ('eval' in run and 'mismatch' in run):
            run['state'] = 'evaluating'          # no cached eval yet: summarized once its eval job has written it
    find_fit(runs, cfg['fit_accuracy'])
    results = summarize(runs, cfg, argv)
    table = format_markdown(results)
    if out is None:
        print('\n' + table + '\n(a dry run: the summary of the evaluated runs above is printed, not written)')
        return
    with rundir.writing(out, 'the summary', rerun):
        os.makedirs(out, exist_ok=True)
        rundir.write_atomic(os.path.join(out, 'results.json'), json.dumps(results, indent=1).encode())
        rundir.write_atomic(os.path.join(out, 'results.md'), table.encode())
        print('\n' + table)
        plot(results, step_curves(runs), out)
    print(f"wrote {out}/results.json and results.md")
    if queued:
        print(f"{len(queued)} job(s) queued or running: rerun this command to collect them (or add --wait)")
    elif not cfg['dry_run'] and any(r['selected'] and r['state'] != 'done' for r in runs):
        sys.exit(1)


if __name__ == '__main__':
    main(sys.argv[1:])
