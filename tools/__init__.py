"""
Tools a user runs beside the core, imported by nothing in it: `python -m tools.bench` (speed and memory as
ratios against baselines measured in the same run), `python -m tools.mismatch` (the train-vs-eval mismatch
at every projection).
"""
