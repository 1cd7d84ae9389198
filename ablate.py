"""
A study in one command: a grid of arms x seeds, each an ordinary train.py run, then every run
evaluated on the same held-out examples and the grid summarized.

    python ablate.py config/study_sites_sensitive.py
    python ablate.py config/study_sites_sensitive.py --arms=none,vpad --seeds=1,2 --max_iters=300
    python ablate.py config/study_sites_sensitive.py --dry_run       # the train.py commands, for a cluster
    python ablate.py config/study_sites_sensitive.py --launcher=slurm --slurm_partition=gpu [--wait]   # Slurm jobs

A study config sets `base_config` (a train.py config), `arms` (name -> train.py overrides),
`common` (overrides for every arm), `seeds` and `grid_dir`. Any other --key=value that train.py knows
is passed to every run; `multiples` and `eval_samples` set the final eval (eval_lengths.py's names; a
run's quick eval is set in `common`). Run (arm, seed k) trains into grid_dir/<arm>/seed<k>/ with
--seed=k: seeds vary initial weights, dropout masks and batch order, never the corpus (that is
data_seed). A string override may name the seed, e.g. init_from='out/ablate_sites/none/seed{seed}'.

Rerunning the same command skips finished runs and resumes interrupted ones, so a long grid
outlives a terminal. With --dry_run nothing is trained or written (but a missing corpus, which the
runs would race to generate): it prints one train.py command per pending run (each run dir is
independent: a scheduler's job array can run them anywhere) and the summary of the runs evaluated.

With --launcher=slurm every pending run is submitted as a Slurm job (one job array, through
submitit: `pip install submitit`) that runs the run's train.py command; its job id goes to
<run dir>/job.json, submitit's logs to grid_dir/submitit/. The command returns, or with --wait waits
for the jobs. A rerun skips finished runs and runs whose job is still queued or running, resubmits
the others (a run with a checkpoint resumes from it) and summarizes what has finished.
--eval_on=slurm makes each finished run's final eval a job too (it writes the eval the summary
reads). --launcher=submitit_local runs the same jobs as processes on this machine.

The summary goes to results_dir (default: grid_dir): results.json (per arm its overrides; per task
and length multiple the per-seed accuracies, mean and standard deviation; the train-vs-eval
mismatch at the arm's dropout site; its outcomes under the pre-registered rule below and their
tests against the control arm), results.md, accuracy_vs_length.png, area_by_arm.png and
accuracy_vs_step.png (the quick length eval in each run's log.jsonl, mean over seeds: does
extrapolation rise, then fall, during training?). The PNGs need matplotlib.
Each run is evaluated as it finishes, in a worker slot. A study's own grid (its config with no
override) also keeps a record of each finished run in results_dir/runs/ (its settings, log, evals,
mismatch and provenance): committed with the summary, it lets a fresh clone or another machine count
those runs as done and train only the rest. A cooldown branch whose snapshot is missing (a clone that
recalled its trunk, a deleted folder) rebuilds it: its trunk trained again to fit + k (to step k, for a
trunk at fixed steps: snapshots_at_iter), which on one machine gives the same snapshot bit for bit.

Outcomes, under a rule set in the study config before the runs (control, fit_accuracy,
range_threshold, extrap_*): a run fits at its first quick eval with every task's 1x accuracy >=
fit_accuracy (else it "never fit": counted apart, and counted as a failure in a second analysis).
Per fit run its area (the mean accuracy over the final eval's multiples) and range (the largest
multiple with accuracy >= range_threshold there and at every shorter one), and whether it
extrapolates (accuracy at extrap_multiple x >= extrap_threshold). Against the control, the primary
test is the area paired by seed (a seed fixes the initial weights and the batches in every arm),
sign-flip, Holm-corrected over the arms; secondary: Fisher's exact test on extrapolating runs
(Holm), a permutation test of the accuracy at extrap_multiple x, and the seeds 80% power needs.
"""

from configurator import configure, settings_of, started  # first: a script's start-up (configurator.startup)

import contextlib
import dataclasses
import os
import shlex
import sys
import time

import torch

import train  # its settings; its training loop runs in a subprocess
from base import rundir
from base.schedule import branch_argv
# the study machinery, plain modules in study/: the settings checked, a run's state, its final eval, the
# summary, the names of the files they write; the cluster launchers (study/launch.py) are imported only when
# one is asked for
from study import files, summary
from study.evals import eval_command, evaluate, evaluated as is_evaluated, samples_of
from study.records import recall, save_records
from study.reproduce import reproduce as retrain_committed
from study.runs import (Run, check_sources, command, differing, fit_of, last_progress, no_snapshots,
                        prepare_data, ready, start_eval, start_trainer, state, stop_running, strand, tag, tail,
                        to_train, trainer_env, where_grid_stands)
from study.settings import check, split_argv
from study.tables import format_markdown


# -----------------------------------------------------------------------------
base_config = 'config/vpad.py'   # the train.py config every run starts from
arms = {}                  # arm name -> dict of train.py overrides; --arms=a,b trains only those
                           # (the summary, in grid_dir, still covers every arm's finished runs)
common = {}                # train.py overrides for every arm of the study
seeds = '1,2,3'            # training seeds, comma-separated
grid_dir = 'out/ablate'    # the grid's root: run (arm, seed k) trains into grid_dir/<arm>/seed<k>/
results_dir = ''           # where results.* and the plots go; '' = grid_dir
workers = 1                # runs trained at a time; the CPU threads are split between them
dry_run = False            # print the train.py command of each pending run, train nothing
launcher = 'local'         # local: train here, `workers` at a time; slurm: a Slurm job per pending run (via submitit);
                           # submitit_local: those jobs as processes here
wait = False               # slurm / submitit_local: wait for the jobs, then evaluate and summarize
                           # (else submit, summarize what has finished, return)
eval_on = 'local'          # the final eval: 'local' (here, after the runs) or the launcher's name
                           # (a job per finished run)
slurm_partition = ''       # the Slurm partition (required with launcher=slurm)
slurm_gpus_per_run = -1    # GPUs per job; -1: what the runs' device asks for (cuda: 1; cpu, auto: 0)
slurm_cpus_per_run = 4     # CPU cores per job, and the job's torch threads
slurm_time_min = 60        # time limit per job, minutes (submitit_local enforces it too);
                           # a run cut off resumes when resubmitted
slurm_mem_gb = 0           # memory per job, GB; 0 = the partition's default
slurm_extra = ''           # other sbatch options, comma-separated key=value, e.g. account=abc,qos=high
multiples = '1,2,4,8,16,32,64'   # final eval lengths, in multiples of each run's block_size
eval_samples = 100         # held-out examples per task and length in the final eval
eval_samples_long = 0      # past 64x, this many instead (0: eval_samples): a recurrent model's example costs more there
eval_variants = ''         # the final eval of every run (not of a trunk of branches) also under these length-scaling
                           # variants, comma-separated (eval_lengths.py's: 'pi', 'ntk', 'yarn', 'log', 'ntk+log', ...)
# the pre-registered outcome rule and tests (set before the runs, not chosen after seeing them):
control = 'none'           # the arm every other arm is tested against; '' = no tests
fit_accuracy = 0.95        # a run fits at its first quick eval with every task's 1x accuracy >= this
                           # (an unfit run says nothing of length)
extrap_multiple = 16       # the length (x block_size) where extrapolation is judged: one length fixed in advance,
                           # not the best of many
extrap_threshold = 0.9     # a fit run extrapolates when its final-eval accuracy at extrap_multiple x is >= this
                           # (runs are near binary)
extrap_task = ''           # the one task that decides it, fixed in advance; '' = the first of each run's eval tasks
range_threshold = 0.5      # a run's range: the largest multiple with accuracy >= this there and at every shorter one
deteriorate_multiple = 0   # > 0: a fit run deteriorates when its quick-eval accuracy at this multiple falls
deteriorate_drop = 0.2     # ... this much below its running maximum since the fit
deteriorate_evals = 2      # ... at this many quick evals in a row
delta = 0.05               # the smallest area difference of interest: a comparison whose 90% interval lies inside
                           # +-delta reads "equivalent within +-delta" (resolved: "higher, within +-delta")
families = {}              # Holm families: name -> the arms tested against the control together
                           # ({}: every arm, one family); in a study of snapshots an entry "arm's change" (the arm
                           # also listed) tests its change early -> late against the control's in the family at
                           # late_snapshot (else each family's changes are corrected together, apart)
comparisons = {}           # the study's own paired comparisons, beyond each arm against the control: family name ->
                           # [[a, b], ...], a - b tested, each side 'arm', 'arm@variant' or a difference 'x - y' of
                           # those (an interaction); Holm within each family, at each cooled point
every_run_counts = False   # True: every run trains the same steps (steps_after_fit=0), so each counts in the tests
                           # with its area, fit or not (a run not fit by its end is marked); the fit runs only beside
reuse = {}                 # arm -> 'study' or 'study/arm': that study's runs of those seeds are this arm's
                           # (every setting checked equal), trained in its grid if missing; {} trains every arm here
init_from_study = ''       # 'study/arm': each run continues (weights only) that study's run of its seed, wherever
                           # that study keeps it (its own reuse followed); it must be finished first
early_snapshot = 0         # studies of trunks with snapshots (snapshots_after_fit, or snapshots_at_iter):
                           # deterioration is a run's cooled area
late_snapshot = 0          # at late_snapshot minus its cooled area at early_snapshot (steps past the fit, or steps of
                           # the trunk's training; 0: the first and the last snapshot), and the arms are compared at
                           # late_snapshot
fit_plus_reading = 0       # studies at fixed steps (snapshots_at_iter): > 0 also reads each run at its cooled snapshot
                           # nearest its own fit + this many steps, where one lies within +-fit_plus_window (the
fit_plus_window = 0        # point a fit-relative study reads, for comparing with one); each site against the control
                           # paired over the seeds where both have one (secondary, Holm within each family)
reproduce = 0              # > 0: train nothing of the grid; retrain this many committed seeds of one arm (--arms=<arm>,
                           # else the control) into out/reproduce/ and compare them with the committed results
rule_changed = ''          # why the rule above changed after results were summarized under it; '' = it did not (a
                           # rerun with another rule is refused, naming the keys)
# -----------------------------------------------------------------------------


def plan(cfg, passed, selected, train_settings, studies=()):
    """The grid, its every setting checked first (study.settings.check). -> ([Run], in arm-major order, those
    of arms left out by --arms marked selected=False (summarized if finished, never trained); the study's list
    settings, parsed). studies: the studies whose runs this one reuses, through which it is planned."""
    runs = []
    planned, lists = check(cfg, passed, selected, train_settings)
    for p in planned:
        run = Run(p.arm, p.seed, p.dir, p.argv, p.cfg, p.tasks, selected=selected is None or p.arm in selected,
                  fixed_steps=cfg['every_run_counts'])      # (a run of equal steps is read at a fixed step: its end)
        if cfg['init_from_study']:          # the source study's run of this seed, as that study plans it
            start = start_of(cfg['init_from_study'], p.seed, train_settings, studies).dir
            run = dataclasses.replace(run, argv=[*p.argv, f'--init_from={start}'], cfg=p.cfg | {'init_from': start})
        if p.arm in cfg['reuse']:
            run = reused(cfg, run, train_settings, studies) or run
        runs.append(run)
        runs += branches(run, p.snapshots, p.fixed, train_settings)
    return runs, lists


PLANNED = {}               # (the path and text of a study config reused, the chain) -> its plan


def reused(cfg, run, train_settings, studies):
    """The run of another study that this arm declares it reuses (reuse = {arm: 'study' or 'study/arm'}),
    for this seed: the source study's own run (its dir and command, so a missing one trains in its grid),
    once every setting that makes a run is checked equal; None if that study has no such seed."""
    study, _, arm = cfg['reuse'][run.arm].partition('/')
    arm = arm or run.arm
    theirs = run_of(study, arm, run.seed, train_settings, studies,
                    f"arm '{run.arm}' reuses {study}'s {arm} runs (reuse={cfg['reuse']!r})")
    if theirs is None:
        return None                            # that study has no such seed: this one trains it
    differ = [(k, a, b) for k, a, b in differing(theirs.cfg, run.cfg) if k != 'seed']
    if differ:
        raise SystemExit(f"config error: arm '{run.arm}' reuses {study}'s {arm} runs (reuse={cfg['reuse']!r}), but "
                         + ', '.join(f"{k}={a!r} there, {b!r} here" for k, a, b in differ[:4])
                         + ": make them equal, or train this arm here with --reuse={}")
    return dataclasses.replace(theirs, arm=run.arm, selected=run.selected, reused=f"{study}/{arm}")


def run_of(study, arm, seed, train_settings, studies, why):
    """Another study's run (arm, seed) as that study plans it (its own reuse followed): planned once
    per text of its config. None if it has no such seed; exits if it has no such arm, or is this one."""
    path = os.path.join(files.STUDY_CONFIGS, f'{study}.py')
    if study in studies or not os.path.isfile(path):
        raise SystemExit(f"config error: {why}, but " + (f"{study} reuses this study's runs in turn" if study in studies
                                                          else f"there is no {path}"))
    with open(path) as f:
        key = (os.path.abspath(path), f.read(), studies)
    if key not in PLANNED:
        source = configure(study_settings(), [path], quiet=True)
        if arm not in source['arms']:
            raise SystemExit(f"config error: {why}, but {study} has no arm '{arm}' (its arms: "
                             f"{', '.join(source['arms'])})")
        PLANNED[key] = plan(source, [], None, train_settings, (*studies, study))[0]
    if arm not in {r.arm for r in PLANNED[key]}:
        raise SystemExit(f"config error: {why}, but {study} has no arm '{arm}'")
    return next((r for r in PLANNED[key] if (r.arm, r.seed, r.trunk) == (arm, seed, None)), None)


def start_of(source, seed, train_settings, studies):
    """init_from_study's run for this seed: the run of that study that this one continues."""
    study, arm = source.split('/')
    why = f"init_from_study={source!r}"
    theirs = run_of(study, arm, seed, train_settings, studies, why)
    if theirs is None:
        raise SystemExit(f"config error: {why}, but {study} has no seed {seed}: give this study its seeds")
    return theirs


def branches(trunk, snapshots, fixed, train_settings):
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
        run_cfg = configure(train_settings, argv, quiet=True)
        out.append(dataclasses.replace(trunk, dir=run_cfg['out_dir'], argv=argv, cfg=run_cfg, point=k, trunk=trunk.dir))
    return out


def study_settings():
    """A study config's keys with their defaults: the plain ones, and the dicts arms, common, families, reuse."""
    return settings_of(globals()) | {k: globals()[k] for k in ('arms', 'common', 'families', 'reuse', 'comparisons')}


def main(argv):
    settings = study_settings()
    train_settings = settings_of(vars(train))
    own, passed, selected = split_argv(argv, settings, train_settings)
    cfg = configure(settings, own)
    runs, lists = plan(cfg, passed, selected, train_settings)
    started()           # the end of start-up: what follows may write (a summary set aside, --reproduce's runs)
    if cfg['reproduce'] > 0:
        arm = selected[0] if selected and len(selected) == 1 else (None if selected else cfg['control'])
        if not arm:
            raise SystemExit("config error: --reproduce retrains one arm: name it with --arms=<arm>")
        prepare_data([r for r in runs if r.arm == arm])
        return retrain_committed(runs, cfg, arm, cfg['reproduce'], lists.multiples,
                                 shlex.join(['python', 'ablate.py', *argv]))
    out = None if cfg['dry_run'] else summary.summary_dir(cfg, argv)     # a dry run writes no summary, no eval cache
    rerun = f"rerun: {shlex.join(['python', 'ablate.py', *argv])} (finished runs are kept)"
    change = summary.rule_change(cfg, argv, out) if out else None
    if out:
        rundir.check_writable(out, files.RESULTS, rerun)
    rundir.exit_on_signals(lambda: where_grid_stands(runs, argv))
    for run in runs:
        run.state = state(run)
    mults, variants, queued = lists.multiples, lists.variants, []
    # the study's own grid records its finished runs in results_dir/runs: committed, a fresh clone trains the rest
    own_grid = cfg['results_dir'] and len(summary.grid_of(argv)) == 1
    records = os.path.join(cfg['results_dir'], files.RECORDS) if own_grid else None
    if records:
        recall(runs, records, cfg['grid_dir'], mults, samples_of(cfg), variants)
    runs, never = strand(runs, [])
    compute = cfg['eval_on'] == 'local' and not cfg['dry_run']

    def evaluated(done, compute=compute):   # the final evals and mismatch of finished runs (computed, or read)
        evaluate(done, mults, samples_of(cfg), compute, variants)
        if records and not cfg['dry_run']:     # (from the caches: computed here or written by eval jobs)
            save_records(runs, records, cfg['grid_dir'], variants)

    def eval_process(run):
        return eval_command(run, mults, samples_of(cfg), variants)
    check_sources(runs, cfg)
    prepare_data(runs)                  # also for --dry_run: jobs started elsewhere must not race to write it
    if cfg['dry_run']:
        pending = [r for r in runs if r.selected and r.state != 'done']
        print(f"# {len(pending)} pending of {sum(r.selected for r in runs)} runs; each is independent (run them in any "
              f"order, anywhere that sees {cfg['grid_dir']}) but a cooldown branch, which starts from the snapshot "
              f"its trunk writes; then rerun this command without --dry_run to summarize")
        for run in pending:     # a cooldown branch resumes the snapshot its trunk writes: after the trunk
            print(shlex.join(['python', *command(run, run.state == 'partial' or run.trunk is not None)[1:]]))
    elif cfg['launcher'] == 'local':
        evaluated(runs, compute=False)       # what finished before and is evaluated; the rest is evaluated first
        failed = train_grid(runs, cfg['workers'], rerun, evaluated if compute else None,
                            eval_process if compute else None, [r for r in runs if not is_evaluated(r, variants)])
        if failed:
            print(f"{len(failed)} run(s) failed: see their train.log; rerun this command to retry them")
        runs, never = strand(runs, never)        # trunks that finished here without fitting
    if cfg['launcher'] != 'local' and not cfg['dry_run']:
        from study import launch                 # submitit's launchers (checked by plan, before anything was written)
        queued = launch.launch(runs, cfg, lists)
        if cfg['eval_on'] != 'local':
            queued += launch.launch_evals(runs, cfg, lists)
    # a second ablate.py on this study waits here, then summarizes what both have finished
    with files.summary_lock(cfg['grid_dir']) if out else contextlib.nullcontext():
        runs, never, results = summary.summarize_grid(runs, never, cfg, lists, argv, records, evaluated, change)
        if out is None:
            print('\n' + format_markdown(results) + '\n(a dry run: the summary of the evaluated runs above is printed, '
                  'not written)')
            return
        wrote = summary.write(out, results, runs, rerun)
    print(f"wrote {out}/results.json and results.md" if wrote else
          f"{out}/results.json holds these numbers already: kept as it is")
    if queued:
        print(f"{len(queued)} job(s) queued or running: rerun this command to collect them (or add --wait)")
    elif not cfg['dry_run'] and any(r.selected and r.state != 'done' for r in runs):
        sys.exit(1)


def train_grid(runs, workers, then, finished=None, eval_command=None, unevaluated=()):
    """Train the pending runs and evaluate the finished ones, `workers` processes at a time: each
    trainer a train.py subprocess writing train.log in its run dir, each eval (eval_command(run), given
    where the evals are computed here) a process writing eval.log there, the finished `unevaluated` first.
    Each run dir is locked while its process runs (a trainer is handed the lock): a run another process
    holds (a second ablate.py, a train.py) is skipped. The processes end with this one: stopped here if
    it is interrupted, and by their parent-death signal if it is killed. then: how to go on after a
    disk error; finished([run]): called as each run's eval ends (or, with no eval_command, here on the
    freed worker's threads as each run finishes: its eval). -> the runs that failed."""
    pending = to_train(runs)
    trunks = {r.dir: r for r in runs if r.point == 'trunk'}
    to_eval = [r for r in unevaluated if eval_command and r.selected and r.state == 'done' and not r.recorded]
    # the cores split over the workers, unless OMP_NUM_THREADS says how many (on cores other jobs share)
    threads = int(os.environ.get('OMP_NUM_THREADS') or 0) or max(1, (os.cpu_count() or 1) // workers)
    env = trainer_env(threads)
    running, evaluating, failed, n_done = [], set(), [], sum(r.selected and r.state == 'done' for r in runs)
    t0, last_status, short_s, t_tick = time.time(), time.time(), 0.0, time.time()
    n_runs = sum(r.selected for r in runs)
    print(f"grid: {n_runs} runs, {n_done} finished, {len(pending)} to train, {workers} at a time "
          f"({threads} thread(s) each)")
    try:
        while pending or running or to_eval:
            while len(running) < workers and (to_eval or any(ready(r, trunks) for r in pending)):
                if to_eval:                     # evals first: a finished run's record is written sooner
                    run = to_eval.pop(0)
                    if start_eval(run, eval_command(run), env, then):
                        running.append(run)
                        evaluating.add(run.dir)
                    continue
                run = next(r for r in pending if ready(r, trunks))
                pending.remove(run)
                if start_trainer(run, env, then, fit_of(trunks.get(run.trunk))):
                    running.append(run)
                elif run.state == 'done':
                    n_done += 1
                    to_eval += [run] if eval_command else []
            if pending and not running and not to_eval and not any(ready(r, trunks) for r in pending):
                for run in pending:      # their trunks did not finish here: they failed, or another process holds them
                    print(f"{tag(run)} not trained: its trunk ({run.trunk}) has not finished (it failed, or another "
                          f"process holds it); rerun this command")
                break
            time.sleep(0.5)
            now = time.time()
            short_s += (now - t_tick) * (len(running) < workers)
            t_tick = now
            for run in [r for r in running if r.proc.poll() is not None]:
                running.remove(run)
                run.train_log.close()
                run.lock.release()
                minutes = (time.time() - run.t0) / 60
                if run.dir in evaluating:
                    evaluating.discard(run.dir)
                    if run.proc.returncode:
                        failed.append(run)
                        print(f"{tag(run)} eval FAILED after {minutes:.1f} min: {tail(run.dir, files.EVAL_LOG)}")
                    else:
                        print(f"{tag(run)} evaluated in {minutes:.1f} min")
                        finished([run])
                elif run.proc.returncode == 0 and state(run) == 'done':
                    n_done += 1
                    run.state = 'done'
                    print(f"{tag(run)} done in {minutes:.1f} min")
                    if run.point == 'trunk' and no_snapshots(run):       # no snapshot: its branches never train
                        print(f"{tag(run)} never fit: its cooldown branches are never fit too, and never train")
                        pending = [r for r in pending if r.trunk != run.dir]
                    if eval_command:
                        to_eval.insert(0, run)
                    elif finished:                # on the freed worker's threads, given back after
                        cores = torch.get_num_threads()
                        torch.set_num_threads(threads)
                        try:
                            finished([run])
                        finally:
                            torch.set_num_threads(cores)
                else:
                    failed.append(run)
                    print(f"{tag(run)} FAILED after {minutes:.1f} min: {tail(run.dir, files.TRAIN_LOG)}")
                elapsed = (time.time() - t0) / 60
                print(f"grid: {n_done}/{n_runs} done, {len(running) - len(evaluating)} training, "
                      f"{len(evaluating) + len(to_eval)} to evaluate, {len(pending)} waiting, {len(failed)} failed; "
                      f"{elapsed:.1f} min so far")
            if running and time.time() - last_status > 60:
                last_status = time.time()
                print("  " + "; ".join(f"{tag(r)[1:-1]}: {'evaluating' if r.dir in evaluating else last_progress(r)}"
                                       for r in running))
    finally:
        stop_running(running)
    wall = time.time() - t0
    if wall > 1:
        print(f"grid: {wall / 60:.1f} min, fewer than {workers} process(es) busy {short_s / wall:.0%} of it")
    return failed


if __name__ == '__main__':
    main(sys.argv[1:])
