"""
The study engine: a grid of arms x seeds, each run an ordinary train.py run, for any study config (it names no
study of this repository: publish/ lists those). Its verbs, which ablate.py's command line is made of:

    own, passed, selected = settings.split_argv(argv, study_defaults)   # ablate.py's keys, train.py's, --arms
    grid = plan.plan(cfg, argv, passed, selected, study_defaults)       # every setting checked, each run of the
                                                                        # grid planned; nothing is written
    grid.train(grid)          # each pending run trained (here, `workers` at a time, or as cluster jobs) and
                              # evaluated, each finished run recorded; --dry_run: the commands printed instead
    grid.summarize(grid)      # results.json, results.md and the plots, from the runs as they stand

and --reproduce's reproduce.reproduce(grid). Each optional feature is one module that could be deleted with its
tests, the rest running on without it: launch.py (Slurm and submitit), plots.py, reproduce.py and records.py
(each finished run's committed record). The rest: settings.py checks a study's settings, runs.py is one run of
the grid, pool.py trains them here, evals.py their final evals, outcomes.py and derive.py the summary's numbers,
stats.py its tests, tables.py its results.md, summary.py where and under which rule it is written, files.py the
names of the files they write.
"""
