import os
import sys

# The tests' models are tiny: one thread each is as fast, and on cores that other jobs keep busy
# a second thread waits on the first (a 40-step trainer took 33 s with 2 threads, 4 s with 1).
# Set before torch is imported, so it holds here and in every train.py / ablate.py started from here.
os.environ.setdefault('OMP_NUM_THREADS', '1')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end checks that take minutes (run with -m slow)")
    config.addinivalue_line("markers",
                            "slurm: ablate.py against a real one-node Slurm (run with -m slurm; .ci/run does)")
    # torch's own deprecation notice from inside torch.compile is not ours to fix
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def pytest_collection_modifyitems(config, items):
    # the default run (no -m) leaves out the slow and the Slurm tests; `-m slow`, `-m slurm` select them
    if config.option.markexpr:
        return
    keep = [it for it in items if not (it.get_closest_marker("slow") or it.get_closest_marker("slurm"))]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep
