"""
Every entry point as a user starts it: a Ctrl-C at start-up (configurator.startup).
"""

import os
import signal
import subprocess
import sys

import pytest

from configurator import STOPPED_AT_STARTUP

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -----------------------------------------------------------------------------
# Ctrl-C at start-up, on an event the child reports, never after a sleep

# The child's sitecustomize: the first import of $STARTUP_PROBE says so on stderr and waits there.
# The test sends SIGINT on that line, so the signal lands inside the child's start-up however
# fast or slow the machine: while that module (torch, most often) loads.
PROBE = """
import os, sys, time
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get('STARTUP_PROBE'):
            sys.meta_path.remove(self)
            os.write(2, f"probe: importing {name}\\n".encode())
            while True:
                time.sleep(1)
sys.meta_path.insert(0, Probe())
"""

# each command as a user types it (less `python`), and the module whose import it is stopped in
ENTRY_POINTS = [
    (['train.py', 'config/vpad.py', '--out_dir={w}/run', '--data_dir={w}/data'], 'torch'),
    (['train.py', 'config/vpad.py', '--out_dir={w}/run', '--data_dir={w}/data'], 'schedule'),  # torch loaded
    (['eval_lengths.py', '--out_dirs={w}/run'], 'torch'),
    (['eval_lengths.py', '--out_dirs={w}/run'], 'sample_data'),                                # torch loaded
    (['ablate.py', 'config/study_quick.py', '--grid_dir={w}/grid', '--results_dir={w}/results'], 'torch'),
    (['ablate.py', 'config/study_quick.py', '--grid_dir={w}/grid', '--results_dir={w}/results'], 'study.reproduce'),
    (['sample_data.py', '--data_dir={w}/data'], 'numpy'),
    (['bench.py', '--only=sites'], 'torch'),
    (['mismatch.py'], 'torch'),
    (['-m', 'study.evals', '{{}}'], 'torch'),             # ablate.py's child for a run's final eval
    (['-m', 'study.runs', '{{}}'], 'rundir'),             # ablate.py's child that rebuilds a snapshot
    (['-m', 'study.tables', '{w}/results.json'], 'torch'),
    (['-m', 'study.plots', '{w}/results.json'], 'torch'),
    (['-m', 'study.verdicts', '--check'], 'rundir'),
    (['-m', 'study.scales', '--check'], 'rundir'),
]


@pytest.mark.parametrize('argv,module', ENTRY_POINTS, ids=[f"{' '.join(a[:2] if a[0] == '-m' else a[:1])} in "
                                                          f"import {m}" for a, m in ENTRY_POINTS])
def test_ctrl_c_at_startup_is_one_line_exit_130_and_writes_nothing(tmp_path, argv, module):
    (tmp_path / 'probe').mkdir()
    (tmp_path / 'probe' / 'sitecustomize.py').write_text(PROBE)
    work = tmp_path / 'work'
    work.mkdir()
    env = dict(os.environ, STARTUP_PROBE=module, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(tmp_path / 'probe'), *filter(None, [os.environ.get('PYTHONPATH')])]))
    proc = subprocess.Popen([sys.executable, *(a.format(w=work) for a in argv)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        said = proc.stderr.readline()
        assert said == f"probe: importing {module}\n", said + proc.stderr.read()[-3000:]
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, rest) == (130, STOPPED_AT_STARTUP + '\n'), rest[-3000:]
    assert os.listdir(work) == []
