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
for the jobs. A rerun skips finished runs and runs whose job may still run (as submitit's job
object says, from Slurm's accounting), resubmits the others (a run with a checkpoint resumes from it)
and summarizes what has finished. --eval_on=slurm runs each run's final eval at the end of its job
(a finished run not evaluated yet: a job of its own). --launcher=submitit_local runs the same jobs
as processes on this machine.

The summary goes to results_dir (default: grid_dir): results.json (per arm its overrides; per task
and length multiple the per-seed accuracies, mean and standard deviation; the train-vs-eval
mismatch at the arm's dropout site; its outcomes under the pre-registered rule below and their
tests against the control arm), results.md, accuracy_vs_length.png, area_by_arm.png and
accuracy_vs_step.png (the quick length eval in each run's log.jsonl, mean over seeds: does
extrapolation rise, then fall, during training?). The PNGs need matplotlib.
Each run is evaluated as it finishes, in its worker slot. A study's own grid (its config with no
override) also keeps a record of each finished run in results_dir/runs/ (its settings, log, evals,
mismatch and provenance): committed with the summary, it lets a fresh clone or another machine count
those runs as done and train only the rest. For a cooldown branch whose snapshot is missing (a clone
that recalled its trunk, a deleted folder) the grid prints the one line that rebuilds it: its trunk
trained again to fit + k (to step k, at fixed steps), which on one machine gives the same snapshot.

The engine is study/ (plan, train, summarize: study/__init__.py); this file is its command line.

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

import os
import sys

from study.grid import summarize, train
from study.plan import plan
from study.settings import split_argv


# -----------------------------------------------------------------------------
# the grid: what its runs are
base_config = 'config/vpad.py'   # the train.py config every run starts from
arms = {}                  # arm name -> dict of train.py overrides; --arms=a,b trains only those (all are summarized)
common = {}                # train.py overrides for every arm of the study
seeds = '1,2,3'            # training seeds, comma-separated: run (arm, seed k) trains with --seed=k
grid_dir = 'out/ablate'    # the grid's root: run (arm, seed k) trains into grid_dir/<arm>/seed<k>/
results_dir = ''           # where results.*, the plots and each run's record (runs/) go; '' = grid_dir
reuse = {}                 # arm -> 'study' or 'study/arm': that study's runs of these seeds are this arm's (every
                           # setting checked equal), trained in its grid if missing; {} trains every arm here
init_from_study = ''       # 'study/arm': each run continues (weights only) that study's run of its seed (finished)
# the launcher: where and how the runs run, never what they are (left out of the summary's command)
workers = 1                # runs trained at a time here; the CPU threads are split between them
dry_run = False            # print each pending run's train.py command and the summary; train and write nothing
launcher = 'local'         # 'local': here, `workers` at a time; 'slurm': a Slurm job a run (submitit); 'submitit_local'
wait = False               # slurm / submitit_local: wait for the jobs, then summarize (else submit, summarize, return)
eval_on = 'local'          # where the final evals run: 'local' (here) or the launcher's name (at the end of each job)
slurm_partition = ''       # the Slurm partition (required with launcher=slurm)
slurm_gpus_per_run = -1    # GPUs per job; -1: what the runs' device asks for (cuda: 1; cpu, auto: 0)
slurm_cpus_per_run = 4     # CPU cores per job, and the job's torch threads
slurm_time_min = 60        # time limit per job, minutes (submitit_local's too): a run cut off resumes when resubmitted
slurm_mem_gb = 0           # memory per job, GB; 0 = the partition's default
slurm_extra = ''           # other sbatch options, comma-separated key=value, e.g. account=abc,qos=high
# the pre-registered rule: the final eval, the outcomes and their tests, set before the runs (not after seeing them)
multiples = '1,2,4,8,16,32,64'   # final eval lengths, in multiples of each run's block_size
eval_samples = 100         # held-out examples per task and length in the final eval
eval_samples_long = 0      # past 64x, this many instead (0: eval_samples): a recurrent model's example costs more there
eval_variants = ''         # the final eval of every run but a trunk also under these length-scaling variants,
                           # comma-separated (eval_lengths.py's: 'pi', 'ntk', 'yarn', 'log', 'ntk+log', ...)
control = 'none'           # the arm every other arm is tested against; '' = no tests
fit_accuracy = 0.95        # a run fits at its first quick eval with every task's 1x accuracy >= this (an unfit run
                           # says nothing of length)
extrap_multiple = 16       # the one length (x block_size) where extrapolation is judged, fixed in advance
extrap_threshold = 0.9     # a fit run extrapolates when its final-eval accuracy at extrap_multiple x is >= this
extrap_task = ''           # the one task that decides it, fixed in advance; '' = the first of each run's eval tasks
range_threshold = 0.5      # a run's range: the largest multiple with accuracy >= this there and at every shorter one
deteriorate_multiple = 0   # > 0: a fit run deteriorates when its quick-eval accuracy at this multiple falls ...
deteriorate_drop = 0.2     # ... this much below its running maximum since the fit ...
deteriorate_evals = 2      # ... at this many quick evals in a row (one dip is noise)
delta = 0.05               # the smallest area difference of interest: a 90% interval inside +-delta reads "equivalent"
families = {}              # Holm families: name -> the arms tested against the control together ({}: one of them all);
                           # an entry "arm's change" joins that arm's change early -> late to its family's tests
comparisons = {}           # the study's own paired comparisons: family -> [[a, b], ...], a - b tested, each side 'arm',
                           # 'arm@variant' or a difference 'x - y' of those (an interaction); Holm within each family
every_run_counts = False   # True: every run trains the same steps (steps_after_fit=0), so each counts, fit or not
early_snapshot = 0         # a study of trunks: the early point of each run's change (cooled); 0: the first snapshot
late_snapshot = 0          # the late point of its change, where the arms are compared; 0: the last snapshot (its stop)
fit_plus_reading = 0       # a study at fixed steps: > 0 also reads each run at its cooled snapshot nearest fit + this
fit_plus_window = 0        # ... where one lies within +-this many steps of it (else the run has no such reading)
rule_changed = ''          # why the rule above changed after its results; '' = it did not (a changed rule is refused)
# reproduction
reproduce = 0              # > 0: train no run of the grid; retrain this many committed seeds of one arm (--arms=<arm>,
                           # else the control) into out/reproduce/ and compare them with the committed results
# -----------------------------------------------------------------------------


def study_settings():
    """A study config's keys with their defaults: the plain ones, and the dicts arms, common, families, reuse."""
    return settings_of(globals()) | {k: globals()[k] for k in ('arms', 'common', 'families', 'reuse', 'comparisons')}


def main(argv):
    settings = study_settings()
    own, passed, selected = split_argv(argv, settings)       # ablate.py's keys, train.py's for every run, --arms
    cfg = configure(settings, own)                           # (here: --help prints the comments of this file)
    grid = plan(cfg, argv, passed, selected, settings)
    started()           # the end of start-up: what follows may write (a summary set aside, --reproduce's runs)
    if grid.cfg['reproduce'] > 0:
        from study.reproduce import reproduce     # the one module of this feature
        return reproduce(grid)
    train(grid)
    summarize(grid)


if __name__ == '__main__':
    try:
        main(sys.argv[1:])
    except BrokenPipeError:     # `--dry_run | head` closed its end: end quietly, as `cat | head` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())     # (Python would flush into it at exit)
        sys.exit(1)
