"""
A planned grid trained and summarized: train(grid) brings its runs to done (here, by a pool of processes, or as
cluster jobs) and evaluates them; summarize(grid) writes its summary from its run dirs and records as they stand
then. A dry run trains nothing and writes nothing: it prints each pending run's train.py command, and the summary.
"""

import contextlib
import os
import shlex
import sys

from base import rundir
from study import files, summary
from study.evals import eval_command, evaluated, final_evals, samples_of
from study.outcomes import find_fit
from study.pool import train_here
from study.runs import check_sources, command, prepare_data, state, strand, where_grid_stands
from study.tables import format_markdown

try:                         # each finished run's committed record: a feature of its own, study/records.py
    from study import records
except ImportError:
    records = None


def rerun_line(grid):
    return f"rerun: {shlex.join(['python', 'ablate.py', *grid.argv])} (finished runs are kept)"


def train(grid):
    """Where the summary goes (refused here if it is another grid's) and the state of every run; then each pending
    run trained and each finished one evaluated: here, `workers` at a time, or as cluster jobs (study/launch.py);
    a dry run prints their commands instead. Each finished run of a study config's own grid is recorded."""
    cfg, argv = grid.cfg, grid.argv
    grid.out = None if cfg['dry_run'] else summary.summary_dir(cfg, argv)  # a dry run writes no summary, no eval
    grid.change = summary.rule_change(cfg, argv, grid.out) if grid.out else None
    if grid.out:
        rundir.check_writable(grid.out, files.RESULTS, rerun_line(grid))
    rundir.exit_on_signals(lambda: where_grid_stands(grid.runs, argv))
    for run in grid.runs:
        run.state = state(run)
    # the study's own grid records its finished runs in results_dir/runs: committed, a fresh clone trains the rest
    if records and cfg['results_dir'] and len(summary.grid_of(argv)) == 1:
        grid.records = os.path.join(cfg['results_dir'], files.RECORDS)
        records.recall(grid.runs, grid.records, cfg['grid_dir'], grid.lists.multiples, samples_of(cfg),
                       grid.lists.variants)
    grid.runs, grid.never = strand(grid.runs, [])
    check_sources(grid.runs, cfg)
    prepare_data(grid.runs)                  # also for --dry_run: jobs started elsewhere must not race to write it
    if cfg['dry_run']:
        return print_commands(grid)
    if cfg['launcher'] != 'local':
        from study import launch            # submitit's launchers (checked by plan, before anything was written)
        grid.queued = launch.launch(grid, lambda runs: record_evals(grid, runs, compute=False))
        return
    record_evals(grid, grid.runs, compute=False)          # what finished before and is evaluated; the rest first
    unevaluated = [r for r in grid.runs if not evaluated(r, grid.lists.variants)]
    failed = train_here(grid.runs, cfg['workers'], rerun_line(grid), lambda n: where_grid_stands(grid.runs, argv, n),
                        lambda run: eval_command(run, grid.lists.multiples, samples_of(cfg), grid.lists.variants),
                        lambda runs: record_evals(grid, runs, compute=True), unevaluated)
    if failed:
        print(f"{len(failed)} run(s) failed: see their train.log; rerun this command to retry them")
    grid.runs, grid.never = strand(grid.runs, grid.never)        # trunks that finished here without fitting


def record_evals(grid, runs, compute):
    """The final evals and mismatch of the finished runs: computed here (compute), else read from the caches eval
    processes and jobs wrote; then every run done and evaluated recorded, where this grid records its runs."""
    final_evals(runs, grid.lists.multiples, samples_of(grid.cfg), compute, grid.lists.variants)
    if grid.records and not grid.cfg['dry_run']:
        records.save_records(grid.runs, grid.records, grid.cfg['grid_dir'], grid.lists.variants)


def print_commands(grid):
    """--dry_run: the train.py command of each pending run, in an order that runs; the summary is printed after."""
    pending = [r for r in grid.runs if r.selected and r.state != 'done']
    if not pending:
        print(f"# no command is pending: every run of this grid is finished"
              + (f" (its records in {grid.records} hold them)" if any(r.recorded for r in grid.runs) else ''))
        return
    print(f"# {len(pending)} pending of {sum(r.selected for r in grid.runs)} runs; each is independent (run them in "
          f"any order, anywhere that sees {grid.cfg['grid_dir']}) but a cooldown branch, which starts from the "
          f"snapshot its trunk writes; then rerun this command without --dry_run to summarize")
    for run in pending:     # a cooldown branch resumes the snapshot its trunk writes: after the trunk
        print(shlex.join(['python', *command(run, run.state == 'partial')[1:]]))


def summarize(grid):
    """The grid's summary from its run dirs and records as they stand now (another ablate.py may have finished
    runs meanwhile: a second one on this study waits for the first's summary here), written to grid.out
    (results.json, results.md, the plots) or, for a dry run, printed. Exits 1 where a selected run is not done."""
    cfg = grid.cfg
    with files.summary_lock(cfg['grid_dir']) if grid.out else contextlib.nullcontext():
        for run in grid.runs:
            if run.state != 'done':
                run.state = state(run)
        if grid.records:
            records.recall(grid.runs, grid.records, cfg['grid_dir'], grid.lists.multiples, samples_of(cfg),
                           grid.lists.variants)
        grid.runs, grid.never = strand(grid.runs, grid.never)
        record_evals(grid, grid.runs, cfg['eval_on'] == 'local' and not cfg['dry_run'])
        for run in grid.runs:
            if run.state == 'done' and not evaluated(run, grid.lists.variants):
                run.state = 'evaluating'             # no cached eval yet: summarized once its eval job has written it
        find_fit(grid.runs)
        summarized = [r for r in grid.runs + grid.never if r.selected or r.eval is not None]   # --arms: not others'
        results = summary.summarize_grid(summarized, cfg, grid.lists, grid.argv, grid.change)
        if grid.out is None:
            print('\n' + format_markdown(results) + '\n(a dry run: the summary of the evaluated runs above is printed, '
                  'not written)')
            return
        wrote = summary.write(grid.out, results, grid.runs, rerun_line(grid))
    print(f"wrote {grid.out}/results.json and results.md" if wrote else
          f"{grid.out}/results.json holds these numbers already: kept as it is")
    if grid.queued:
        print(f"{len(grid.queued)} job(s) queued or running: rerun this command to collect them (or add --wait)")
    elif any(r.selected and r.state != 'done' for r in grid.runs):
        sys.exit(1)
