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

if __name__ == '__main__':   # first: a Ctrl-C at start-up is one line (configurator.startup)
    import configurator
    configurator.startup()

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402


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
reuse = {}                 # arm -> 'study' or 'study/arm': that study's runs of those seeds are this arm's
                           # (every setting checked equal), trained in its grid if missing; {} trains every arm here
init_from_study = ''       # 'study/arm': each run continues (weights only) that study's run of its seed, wherever
                           # that study keeps it (its own reuse followed); it must be finished first
early_snapshot = 0         # studies of trunks with snapshots (snapshots_after_fit, or snapshots_at_iter):
                           # deterioration is a run's cooled area
late_snapshot = 0          # at late_snapshot minus its cooled area at early_snapshot (steps past the fit, or steps of
                           # the trunk's training; 0: the first and the last snapshot), and the arms are compared at
                           # late_snapshot
reproduce = 0              # > 0: train nothing of the grid; retrain this many committed seeds of one arm (--arms=<arm>,
                           # else the control) into out/reproduce/ and compare them with the committed results
rule_changed = ''          # why the rule above changed after results were summarized under it; '' = it did not (a
                           # rerun with another rule is refused, naming the keys)
# -----------------------------------------------------------------------------
from configurator import configure, items, settings_of, started, unknown_key  # noqa: E402
import eval_lengths  # noqa: E402
from core import rundir  # noqa: E402
from study import files  # noqa: E402
import sample_data  # noqa: E402
import train  # noqa: E402  (its settings; its training loop runs in a subprocess)
from core.checks import check_config  # noqa: E402
from core.schedule import branch_argv, snapshots_of  # noqa: E402
# the study machinery, plain modules in study/: a run's state, its final eval, the summary; the
# cluster launchers (study/launch.py) are imported only when one is asked for
from study.evals import (eval_command, evaluate, evaluated as is_evaluated, measure_mismatch,  # noqa: E402
                         no_snapshots, recall, save_records)
from study.outcomes import check_comparisons, find_fit, summarize  # noqa: E402
from study.plots import plot, step_curves  # noqa: E402
from study.reproduce import reproduce as retrain_committed  # noqa: E402
from study.stats import CHANGE, at_point, early_late, fixed_steps  # noqa: E402
from study.tables import format_markdown  # noqa: E402
from study.runs import (SCHEDULING, Run, command, differing, fit_of, last_progress, open_train_log, ready,  # noqa: E402
                        state, stop_trainers, tag, to_train, trainer_env)


def parse_variants(text):
    """eval_variants: 'pi,ntk,yarn' -> ('pi', 'ntk', 'yarn'); each a variant eval_lengths.parse_variant knows."""
    try:
        names = items('eval_variants', text)
    except ValueError as e:
        raise SystemExit(f"config error: {e}") from None
    for v in names:
        try:
            eval_lengths.parse_variant(v)
        except ValueError as e:
            raise SystemExit(f"config error: eval_variants={text!r}: {e}") from None
    if len(set(names)) < len(names):
        raise SystemExit(f"config error: eval_variants={text!r} names a variant twice")
    return tuple(names)


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
            try:
                selected = items('arms', arg.split('=', 1)[1]) if '=' in arg else []
            except ValueError as e:
                raise SystemExit(f"config error: {e}") from None
        elif key is None or key in study_keys or key in ('help', ''):
            own.append(arg)
        elif key == 'seed':
            raise SystemExit(f"config error: ablate.py gives run (arm, seed k) --seed=k from the grid's seeds: "
                             f"--seeds={arg.split('=', 1)[-1]}, not {arg}")
        elif key == 'out_dir':
            raise SystemExit("config error: ablate.py trains run (arm, seed k) into grid_dir/<arm>/seed<k>: "
                             f"give the grid's root as --grid_dir={arg.split('=', 1)[-1]}, not --out_dir")
        elif key in train_keys:
            passed.append(arg)                # '{seed}' in it is filled in per run, as in a config's overrides
        else:
            raise SystemExit("config error: " + unknown_key(key, list(study_keys) + list(train_keys)))
    return own, passed, selected


def plan(cfg, passed, selected, train_settings, studies=()):
    """Check the whole grid before anything runs. -> [Run], in arm-major order; those of arms left
    out by --arms are marked selected=False (summarized if finished, never trained).
    studies: the studies whose runs this one reuses, through which it is planned."""
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
        seed_items = items('seeds', cfg['seeds'])
    except ValueError as e:
        fail(str(e))
    try:
        seed_list = [int(s) for s in seed_items]
    except ValueError:
        seed_list = None
    if not seed_list:
        fail(f"seeds={cfg['seeds']!r}: give integers separated by commas, e.g. --seeds=1,2,3")
    twice = sorted({s for s in seed_list if seed_list.count(s) > 1})
    if twice:
        fail(f"seeds={cfg['seeds']!r} names seed {', '.join(map(str, twice))} more than once: give each seed once")
    for arm in cfg['arms']:       # an arm's name is a folder inside grid_dir, never a path out of it
        if not (isinstance(arm, str) and re.fullmatch(r'[A-Za-z0-9_.+-]+', arm) and arm not in ('.', '..')):
            fail(f"arm name {arm!r}: run (arm, seed k) trains into grid_dir/<arm>/seed<k>/, so name it with letters, "
                 f"digits, '_', '-', '+' or '.' (not '', '.' or '..', no '/')")
    if not os.path.isfile(cfg['base_config']):
        fail(f"base_config '{cfg['base_config']}' not found (run from the repository root)")
    for k in ('workers', 'eval_samples'):
        if cfg[k] < 1:
            fail(f"{k}={cfg[k]} must be positive")
    for k in ('grid_dir', 'results_dir'):
        if os.path.exists(cfg[k]) and not os.path.isdir(cfg[k]):
            fail(f"{k}={cfg[k]!r} is a file, not a folder: give a folder")
    try:
        mults = eval_lengths.parse_multiples('multiples', cfg['multiples'])
    except ValueError as e:
        fail(str(e))
    if cfg['control'] and cfg['control'] not in cfg['arms']:
        fail(f"control={cfg['control']!r} is not an arm of this study ({', '.join(cfg['arms'])}); name one, "
             f"or '' for no tests")
    if cfg['deteriorate_multiple'] < 0:
        fail(f"deteriorate_multiple={cfg['deteriorate_multiple']} must be >= 0 (0 = no rule)")
    if cfg['deteriorate_evals'] < 1:
        fail(f"deteriorate_evals={cfg['deteriorate_evals']} must be >= 1")
    if not 0 < cfg['deteriorate_drop'] <= 1:
        fail(f"deteriorate_drop={cfg['deteriorate_drop']} must be in (0, 1]")
    for k in ('fit_accuracy', 'extrap_threshold', 'range_threshold'):
        if not 0 < cfg[k] <= 1:
            fail(f"{k}={cfg[k]} must be in (0, 1]: it is an accuracy")
    if not 0 < cfg['delta'] <= 1:
        fail(f"delta={cfg['delta']} must be in (0, 1]: it is a difference of areas")
    in_family = [a for arms in cfg['families'].values() for a in (arms if isinstance(arms, list) else [None])]
    for a in in_family:
        arm = a.removesuffix(CHANGE) if isinstance(a, str) else a
        if arm not in cfg['arms'] or arm == cfg['control']:
            fail(f"families={cfg['families']!r}: each family is a list of the arms tested against "
                 f"control={cfg['control']!r}, other than it "
                 f"({', '.join(n for n in cfg['arms'] if n != cfg['control'])}), and of the changes it tests "
                 f"with them (\"arm{CHANGE}\")")
    changes = [(f, a) for f, arms in cfg['families'].items() if isinstance(arms, list) for a in arms
               if a.endswith(CHANGE)]
    for family, a in changes:
        if a.removesuffix(CHANGE) not in cfg['families'][family]:
            fail(f"families[{family!r}] names {a!r}: the change of an arm the family lists; add "
                 f"{a.removesuffix(CHANGE)!r} to it")
    for a in cfg['reuse']:
        if a not in cfg['arms'] or not isinstance(cfg['reuse'][a], str):
            fail(f"reuse={cfg['reuse']!r}: map arms of this study to 'study' or 'study/arm' "
                 f"(arms: {', '.join(cfg['arms'])})")
    if cfg['init_from_study'] and (cfg['init_from_study'].count('/') != 1 or 'init_from' in cfg['common']
                                   or any('init_from' in o for o in cfg['arms'].values() if isinstance(o, dict))):
        fail(f"init_from_study={cfg['init_from_study']!r}: name one 'study/arm', and set no init_from in common "
             f"or the arms")
    if len(set(in_family)) < len(in_family):
        fail(f"families={cfg['families']!r}: an arm is in two families; Holm adjusts each arm's p once")
    variants = parse_variants(cfg['eval_variants'])
    try:
        check_comparisons(cfg['comparisons'], cfg['arms'], variants)
    except ValueError as e:
        fail(f"comparisons: {e}")
    if cfg['extrap_multiple'] not in mults:
        fail(f"extrap_multiple={cfg['extrap_multiple']} is not in multiples={cfg['multiples']!r}: the final eval "
             f"would not measure it")
    runs = []
    for arm in cfg['arms']:
        overrides = cfg['arms'][arm]
        if not isinstance(overrides, dict):
            fail(f"arm '{arm}' must map to a dict of train.py overrides, got {type(overrides).__name__}")
        if 'seed' in cfg['common'] or 'seed' in overrides:
            fail(f"arm '{arm}': a run's seed comes from seeds={cfg['seeds']!r}; drop 'seed' from common and the arms")
        # one fit rule: train.py's (it logs fit_iter, and stops steps_after_fit after it) is the study's
        fit_rule = [f"--fit_accuracy={cfg['fit_accuracy']}"]
        if any(o.get('fit_accuracy', cfg['fit_accuracy']) != cfg['fit_accuracy'] for o in (cfg['common'], overrides)):
            fail(f"arm '{arm}': fit_accuracy is the study's pre-registered fit rule: set it once, at the top of the "
                 f"study config, not in common or an arm")
        for seed in seed_list:
            run_dir = os.path.join(cfg['grid_dir'], arm, f'seed{seed}')
            argv = [cfg['base_config'], *flags(cfg['common'], seed), *flags(overrides, seed),
                    *(p.replace('{seed}', str(seed)) for p in passed), *fit_rule, f'--seed={seed}',
                    f'--out_dir={run_dir}']
            if cfg['init_from_study']:
                argv.append(f"--init_from={start_of(cfg['init_from_study'], seed, train_settings, studies).dir}")
            try:  # the exact settings train.py will use, checked as train.py checks them
                with contextlib.redirect_stdout(io.StringIO()):
                    run_cfg = configure(train_settings, argv)
            except SystemExit as e:
                fail(f"arm '{arm}': {str(e).removeprefix('config error: ')}")
            try:
                # init_from: see check_sources; the device and memory only where the runs run here (not a job's node)
                eval_tasks, quick, _, model = check_config({**run_cfg, 'init_from': 'scratch'}, train_settings,
                                                           here=cfg['launcher'] == 'local')
            except SystemExit as e:
                fail(f"arm '{arm}': {str(e).removeprefix('config error: ')}")
            if variants and not model.has_rope():
                fail(f"arm '{arm}': eval_variants={cfg['eval_variants']!r} rescale RoPE layers, and its model has none")
            if 1 not in quick:      # the summary's fit rule reads the 1x quick eval of every run
                fail(f"arm '{arm}': its quick eval (eval_multiples={run_cfg['eval_multiples']!r}) has no 1x: "
                     f"no run could fit, so the study would summarize nothing; add 1")
            if cfg['deteriorate_multiple'] and cfg['deteriorate_multiple'] not in quick:
                fail(f"arm '{arm}': deteriorate_multiple={cfg['deteriorate_multiple']} is not in its quick eval "
                     f"(eval_multiples={run_cfg['eval_multiples']!r}): the rule would see nothing")
            if cfg['extrap_task'] and cfg['extrap_task'] not in eval_tasks:
                fail(f"arm '{arm}': extrap_task={cfg['extrap_task']!r} is not among its eval tasks "
                     f"({', '.join(eval_tasks)})")
            run = Run(arm, seed, run_dir, argv, run_cfg, eval_tasks, selected=selected is None or arm in selected)
            if arm in cfg['reuse']:
                run = reused(cfg, run, train_settings, studies) or run
            runs.append(run)
            runs += branches(run, cfg, train_settings)
    kinds = {r.arm: r.fixed_steps for r in runs if r.point == 'trunk'}
    if len(set(kinds.values())) > 1:
        fail("arms " + ', '.join(a for a, f in kinds.items() if f) + " keep snapshots at fixed steps "
             "(snapshots_at_iter), " + ', '.join(a for a, f in kinds.items() if not f) + " past the fit "
             "(snapshots_after_fit): a study compares its arms at one kind of point; give every arm the same")
    if changes and not any(r.point == 'trunk' for r in runs):
        fail(f"families={cfg['families']!r} names a change ({changes[0][1]!r}), from early_snapshot to late_snapshot: "
             f"only a study of snapshots (snapshots_after_fit or snapshots_at_iter) has one")
    return runs


STUDY_CONFIGS = 'config'   # where `reuse` finds a study config by its name
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
    path = os.path.join(STUDY_CONFIGS, f'{study}.py')
    if study in studies or not os.path.isfile(path):
        raise SystemExit(f"config error: {why}, but " + (f"{study} reuses this study's runs in turn" if study in studies
                                                          else f"there is no {path}"))
    with open(path) as f:
        key = (os.path.abspath(path), f.read(), studies)
    if key not in PLANNED:
        with contextlib.redirect_stdout(io.StringIO()):
            source = configure(study_settings(), [path])
        if arm not in source['arms']:
            raise SystemExit(f"config error: {why}, but {study} has no arm '{arm}' (its arms: "
                             f"{', '.join(source['arms'])})")
        PLANNED[key] = plan(source, [], None, train_settings, (*studies, study))
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


def branches(trunk, cfg, train_settings):
    """The cooldown branches of a trunk run (snapshots_after_fit): each a run of the study, in
    <trunk dir>/cooldown<k>, whose first checkpoint the trunk writes at fit + k; of a trunk at fixed
    steps (snapshots_at_iter), in <trunk dir>/at<k>, written at step k. The trunk is the point 'trunk'
    (its own final eval is the uncooled model at its stop), a branch the point k."""
    snapshots, fixed = snapshots_of(trunk.cfg)
    key = 'snapshots_at_iter' if fixed else 'snapshots_after_fit'
    for k in ('early_snapshot', 'late_snapshot'):
        if cfg[k] and cfg[k] not in snapshots:
            raise SystemExit(f"config error: {k}={cfg[k]} is not a snapshot of arm '{trunk.arm}' "
                             f"({key}={trunk.cfg[key]!r})")
    if not snapshots:
        return []
    early, late = early_late(snapshots, cfg['early_snapshot'], cfg['late_snapshot'])
    stop = 'max_iters' if fixed else 'steps_after_fit'
    if early >= late or late != trunk.cfg[stop]:   # the trunk's own end is the late point, uncooled
        raise SystemExit(f"config error: arm '{trunk.arm}': early_snapshot={early} must come before late_snapshot="
                         f"{late}, and that one be the trunk's stop, {stop}={trunk.cfg[stop]}")
    trunk.point, trunk.fixed_steps = 'trunk', fixed
    out = []
    for k in snapshots:
        argv = branch_argv(trunk.argv, trunk.cfg, k)
        with contextlib.redirect_stdout(io.StringIO()):
            run_cfg = configure(train_settings, argv)
        out.append(dataclasses.replace(trunk, dir=run_cfg['out_dir'], argv=argv, cfg=run_cfg, point=k, trunk=trunk.dir))
    return out


def check_sources(runs, cfg):
    """A pending run that starts from another run's weights needs that run finished."""
    study, _, arm = cfg['init_from_study'].partition('/')
    first = (f"python ablate.py {os.path.join(STUDY_CONFIGS, study + '.py')} --arms={arm}" if study
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
                if start(run, env, then, fit_of(trunks.get(run.trunk))):
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
        stop(running)
    wall = time.time() - t0
    if wall > 1:
        print(f"grid: {wall / 60:.1f} min, fewer than {workers} process(es) busy {short_s / wall:.0%} of it")
    return failed


def tail(run_dir, name):
    """The last line of a process's log in the run dir."""
    with open(os.path.join(run_dir, name), errors='replace') as f:
        return ' '.join(f.read().strip().splitlines()[-1:])


def lock_run(run, then, held):
    """The run dir's lock, or None (one line: `held`, the name of the process holding it) when another has it."""
    with rundir.writing(os.path.join(run.dir, rundir.LOCK), 'the lock file', then):
        try:
            return rundir.DirLock(run.dir)
        except rundir.Held as e:
            print(f"{tag(run)} {held}: {run.dir} is in use by {e}; rerun this command once it has ended")
            return None


def start_eval(run, cmd, env, then):
    """Start a finished run's eval process (its evals and mismatch into the run dir's caches, eval.log),
    holding its dir's lock, unless another process holds it. -> whether it started."""
    lock = lock_run(run, then, 'not evaluated')
    if lock is None:
        return False
    with rundir.writing(os.path.join(run.dir, files.EVAL_LOG), 'the eval log', then):
        log = open_train_log(run.dir, cmd, files.EVAL_LOG)
    run.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    run.train_log, run.lock, run.t0 = log, lock, time.time()
    return True


def start(run, env, then, trunk_fit=None):
    """Start a run's trainer unless another process holds its dir, or finished it since the grid
    was planned. -> whether it started."""
    lock = lock_run(run, then, 'skipped')
    if lock is None:
        return False
    run.state = state(run)
    if run.state == 'done':
        lock.release()
        print(f"{tag(run)} finished meanwhile by another process")
        return False
    cmd = command(run, run.state == 'partial', trunk_fit)
    handed, fds = lock.child()
    with rundir.writing(os.path.join(run.dir, files.TRAIN_LOG), 'the train log', then):
        log = open_train_log(run.dir, cmd)
    run.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env | handed, pass_fds=fds)
    run.train_log, run.lock, run.t0 = log, lock, time.time()
    print(f"{tag(run)} {'resuming' if run.state == 'partial' else 'starting'} -> {run.dir}/{files.TRAIN_LOG}")
    return True


def stop(running):
    """End the trainers still running when this process is interrupted: SIGTERM, which each
    answers by exiting with its last checkpoint intact (SIGKILL after a minute)."""
    stop_trainers([run.proc for run in running])
    for run in running:
        run.lock.release()


def grid_of(argv):
    """The arguments that say what a grid is: argv without how it is scheduled or where its summary goes."""
    return [a for a in argv if a[2:].split('=', 1)[0] not in SCHEDULING | {'results_dir'}]


def summary_dir(cfg, argv):
    """Where results.* go. A study config's results_dir holds the committed summary of that config's
    own grid: a grid with any override of what it is (--arms, seeds, a train.py setting, grid_dir,
    another config file) sends its summary to grid_dir instead. A summary that another grid wrote is
    never replaced: refused here, before any run starts."""
    grid, out = grid_of(argv), cfg['results_dir'] or cfg['grid_dir']
    if cfg['results_dir'] and len(grid) > 1 and not any(a.startswith('--results_dir=') for a in argv):
        print(f"this grid is not {grid[0]}'s own ({shlex.join(grid[1:])}): its summary goes to {cfg['grid_dir']}, "
              f"not {cfg['results_dir']}")
        out = cfg['grid_dir']
    path = os.path.join(out, files.RESULTS)
    if os.path.normpath(out) != os.path.normpath(cfg['grid_dir']) and os.path.isfile(path):
        try:
            command = files.read_json(path, '').get('command')
            if not (isinstance(command, str) and command.startswith('python ablate.py ')):
                raise SystemExit(f"{path} names no grid (its command is {command!r})")
            try:
                argv = shlex.split(command)[2:]
            except ValueError as e:
                raise SystemExit(f"{path} names no grid (its command {command!r}: {e})") from None
        except SystemExit as e:           # unreadable: no grid can be told from it; kept beside, not lost
            with rundir.writing(path, 'the damaged summary aside', 'rerun this command'):
                print(f"{str(e.code).rstrip('; ')}: set aside as {files.set_aside(path)}, a new one is written")
            return out
        if grid_of(argv) != grid:
            raise SystemExit(f"{path} summarizes another grid (`{command}`), not this one: give this grid's summary "
                             f"its own place, e.g. --results_dir={cfg['grid_dir']}")
    return out


def strand(runs, never):
    """A trunk that finished without fitting wrote no snapshot past its fit: its branches can never train, so
    they leave the grid's runs (not pending, not "not finished") for `never`, summarized as never fit at
    their points, as the trunk is. (A trunk at fixed steps writes them fit or not.) -> (runs, never)"""
    stranded = {r.dir for r in runs if r.point == 'trunk' and r.state == 'done' and no_snapshots(r)}
    return ([r for r in runs if r.trunk not in stranded],
            never + [dataclasses.replace(r, state='never fit') for r in runs if r.trunk in stranded])


# the study keys that decide a test or a label: the pre-registered rule, recorded in results.json with the commit
# of the config that fixed it
RULE_KEYS = ('control', 'families', 'comparisons', 'delta', 'fit_accuracy', 'extrap_multiple', 'extrap_threshold',
             'extrap_task', 'range_threshold', 'deteriorate_multiple', 'deteriorate_drop', 'deteriorate_evals',
             'early_snapshot', 'late_snapshot', 'multiples', 'eval_samples', 'eval_variants')


def rule_of(cfg):
    return json.loads(json.dumps({k: cfg[k] for k in RULE_KEYS}))     # as results.json holds it (lists, not tuples)


def rule_change(cfg, argv, out):
    """The rule this grid's summary in `out` was written under, against this config's: -> None (no
    summary, none recorded, or the same rule), the change recorded there before (still declared), or this
    change, declared with rule_changed: {'why', 'keys': {key: [before, now]}, 'before': the old rule}.
    An undeclared change is refused in one line naming the keys, before anything runs."""
    path = os.path.join(out, files.RESULTS)
    try:
        with open(path) as f:
            old = json.load(f)
        same_grid = grid_of(shlex.split(old['command'])[2:]) == grid_of(argv)
        fixed = old['rule'].get('fixed') if same_grid else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None                          # no summary of this grid's to hold it to (summary_dir set a bad one aside)
    now = rule_of(cfg)
    changed = [k for k in now if isinstance(fixed, dict) and fixed.get(k) != now[k]]
    if not changed:
        return old.get('rule_change') if cfg['rule_changed'] else None
    if not cfg['rule_changed']:
        raise SystemExit(f"{path} was summarized under another rule: " + ', '.join(
            f"{k}={fixed.get(k)!r} there, {now[k]!r} now" for k in changed) + ". A pre-registered rule does not "
            f"change after its results: restore it in the config, or declare why with rule_changed = '...' (the "
            f"summary then states the change beside the old rule's labels)")
    return {'why': cfg['rule_changed'], 'keys': {k: [fixed.get(k), now[k]] for k in changed}, 'before': fixed}


def labels(results):
    """{test: label} of a summary's primary tests: each arm against its control, each change against the
    control's, each of the study's comparisons."""
    out = {f"{n} vs {v['control']}": v['area']['left_out'].get('label') for n, a in results['arms'].items()
           for v in [a.get('vs_control') or {}] if (v.get('area') or {}).get('left_out')}
    out |= {f"{a}'s change vs the control's": t.get('label')
            for a, t in results.get('long', {}).get('change_vs_control', {}).items()}
    out |= {f"{t['a']} vs {t['b']} {at_point(t['point'], fixed_steps(results))}": t['left_out'].get('label')
            for t in results.get('comparisons', []) if t['left_out']}
    return out


def where_grid_stands(runs, argv):
    """The line an interrupted ablate.py ends with: how far the grid got, and the command that goes on."""
    selected = [r for r in runs if r.selected]
    done = sum(r.state == 'done' for r in selected)
    stopped = sum(r.proc is not None and r.proc.poll() is None for r in selected)
    return (f"{done} of {len(selected)} runs finished"
            + (f", {stopped} stopping at their last checkpoint" if stopped else '')
            + f"; resume with: {shlex.join(['python', 'ablate.py', *argv])}")


def study_settings():
    """A study config's keys with their defaults: the plain ones, and the dicts arms, common, families, reuse."""
    return settings_of(globals()) | {k: globals()[k] for k in ('arms', 'common', 'families', 'reuse', 'comparisons')}


def main(argv):
    settings = study_settings()
    train_settings = settings_of(vars(train))
    own, passed, selected = split_argv(argv, settings, train_settings)
    cfg = configure(settings, own)
    launch = None
    if cfg['launcher'] != 'local' or cfg['eval_on'] != 'local':
        from study import launch                 # submitit's launchers; checked before anything is written
    extra = launch.check_launcher(cfg) if launch else {}
    runs = plan(cfg, passed, selected, train_settings)
    started()           # the end of start-up: what follows may write (a summary set aside, --reproduce's runs)
    if cfg['reproduce'] > 0:
        arm = selected[0] if selected and len(selected) == 1 else (None if selected else cfg['control'])
        if not arm:
            raise SystemExit("config error: --reproduce retrains one arm: name it with --arms=<arm>")
        prepare_data([r for r in runs if r.arm == arm])
        mults = eval_lengths.parse_multiples('multiples', cfg['multiples'])
        return retrain_committed(runs, cfg, arm, cfg['reproduce'], mults)
    out = None if cfg['dry_run'] else summary_dir(cfg, argv)     # a dry run writes no summary, no eval cache
    rerun = f"rerun: {shlex.join(['python', 'ablate.py', *argv])} (finished runs are kept)"
    change = rule_change(cfg, argv, out) if out else None
    if out:
        rundir.check_writable(out, files.RESULTS, rerun)
    rundir.exit_on_signals(lambda: where_grid_stands(runs, argv))
    for run in runs:
        run.state = state(run)
    mults, queued = eval_lengths.parse_multiples('multiples', cfg['multiples']), []
    # the study's own grid records its finished runs in results_dir/runs: committed, a fresh clone trains the rest
    records = os.path.join(cfg['results_dir'], files.RECORDS) if cfg['results_dir'] and len(grid_of(argv)) == 1 else None
    variants = parse_variants(cfg['eval_variants'])
    if records:
        recall(runs, records, cfg['grid_dir'], mults, cfg['eval_samples'], variants)
    runs, never = strand(runs, [])
    compute = cfg['eval_on'] == 'local' and not cfg['dry_run']

    def evaluated(done, compute=compute):   # the final evals and mismatch of finished runs (computed, or read)
        evaluate(done, mults, cfg['eval_samples'], compute, variants)
        measure_mismatch(done, compute)
        if records and not cfg['dry_run']:     # (from the caches: computed here or written by eval jobs)
            save_records(runs, records, cfg['grid_dir'], variants)

    def eval_process(run):
        return eval_command(run, mults, cfg['eval_samples'], variants)
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
        queued = launch.launch(runs, cfg, extra)
        if cfg['eval_on'] != 'local':
            queued += launch.launch_evals(runs, cfg, mults, extra, variants)
    # a second ablate.py on this study waits here, then summarizes what both have finished
    with files.summary_lock(cfg['grid_dir']) if out else contextlib.nullcontext():
        runs, never, results = summary(runs, never, cfg, argv, records, evaluated, change)
        table = format_markdown(results)
        if out is None:
            print('\n' + table + '\n(a dry run: the summary of the evaluated runs above is printed, not written)')
            return
        with rundir.writing(out, 'the summary', rerun):
            os.makedirs(out, exist_ok=True)
            rundir.write_atomic(os.path.join(out, files.RESULTS), json.dumps(results, indent=1).encode())
            rundir.write_atomic(os.path.join(out, files.RESULTS_MD), table.encode())
            print('\n' + table)
            plot(results, step_curves(runs), out)
    print(f"wrote {out}/results.json and results.md")
    if queued:
        print(f"{len(queued)} job(s) queued or running: rerun this command to collect them (or add --wait)")
    elif not cfg['dry_run'] and any(r.selected and r.state != 'done' for r in runs):
        sys.exit(1)


def summary(runs, never, cfg, argv, records, evaluated, change):
    """The grid's summary from the run dirs and records as they stand now (another ablate.py on this
    study may have finished runs meanwhile: their states, evals and records are read again).
    -> (runs, never, results)"""
    for run in runs:
        if run.state != 'done' and (run.proc is None or run.proc.poll() is not None):
            run.state = state(run)
    if records:
        recall(runs, records, cfg['grid_dir'], eval_lengths.parse_multiples('multiples', cfg['multiples']),
               cfg['eval_samples'], parse_variants(cfg['eval_variants']))
    runs, never = strand(runs, never)
    variants = parse_variants(cfg['eval_variants'])
    evaluated(runs)               # cached evals are read (computed here where this grid computes them)
    for run in runs:
        if run.state == 'done' and not is_evaluated(run, variants):
            run.state = 'evaluating'             # no cached eval yet: summarized once its eval job has written it
    find_fit(runs)
    # --arms: not the others' plans
    summarized = [r for r in runs + never if r.selected or r.eval is not None]
    results = summarize(summarized, cfg, argv)
    config = argv[0] if argv and not argv[0].startswith('--') else None
    results['rule']['fixed'] = rule_of(cfg)
    commit = config and rundir.git('log', '-1', '--format=%H', '--', config)
    results['rule']['config_commit'] = (commit + (' (the config has changed since)' if rundir.git(
        'status', '--porcelain', '--', config) else '')) if commit else 'unknown'
    if change:       # the labels the old rule gave, beside the new rule's
        before = summarize(summarized, cfg | change['before'], argv)
        now = labels(results)
        results['rule_change'] = dict(change, labels={k: [v, now.get(k)] for k, v in labels(before).items()})
    return runs, never, results


if __name__ == '__main__':
    main(sys.argv[1:])
