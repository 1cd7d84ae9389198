"""
What the card's files (model.py, train.py, eval_lengths.py, sample_data.py) share, and the fast
kernels the model runs:

  rundir.py     run-dir I/O: atomic writes, checkpoints, the owner lock, one-line endings
  schedule.py   a run's learning rate and stop, from its settings and its fit
  checks.py     every train.py setting a user can get wrong, checked before anything is written
  kernels.py    the fast paths behind model.py, each tested against its definition there
  bench.py      speed and memory as ratios against baselines (python -m core.bench)
  mismatch.py   the train-vs-eval mismatch at every projection (python -m core.mismatch)

Nothing here imports study/.
"""
