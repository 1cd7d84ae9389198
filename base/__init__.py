"""
The ground floor: what the core files (model.py, sample_data.py, eval_lengths.py, train.py and its
checks) stand on. It imports only torch, the standard library and configurator.py, never a file above it
(tests/test_layout.py).

  kernels.py    the fast paths behind model.py, each tested against the readable code beside its call
  rundir.py     run-dir I/O: atomic writes, checkpoints, the owner lock, one-line endings
  schedule.py   a run's learning rate, stop and snapshots, from its settings and its fit
  processes.py  a run's processes (DDP): each one's device, precision and share of a step's rows
"""
