"""
Every entry point as a user starts it: a Ctrl-C at start-up (configurator.startup), and the refusals
they share: an empty item in any list key (configurator.items), a logit factor that is not finite,
and messages that name only the key given.
"""

import contextlib
import io
import os
import re
import signal
import subprocess
import sys

import pytest

import ablate
import eval_lengths
import sample_data
import train
from configurator import STOPPED_AT_STARTUP, settings_of
from test_train import script_here

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
    (['train.py', 'config/vpad.py', '--out_dir={w}/run', '--data_dir={w}/data'], 'base.schedule'),  # torch loaded
    (['eval_lengths.py', '--out_dirs={w}/run'], 'torch'),
    (['eval_lengths.py', '--out_dirs={w}/run'], 'sample_data'),                                # torch loaded
    (['ablate.py', 'config/study_quick.py', '--grid_dir={w}/grid', '--results_dir={w}/results'], 'torch'),
    (['ablate.py', 'config/study_quick.py', '--grid_dir={w}/grid', '--results_dir={w}/results'], 'study.plan'),
    (['sample_data.py', '--data_dir={w}/data'], 'numpy'),
    (['-m', 'tools.bench', '--only=sites'], 'torch'),
    (['-m', 'tools.mismatch'], 'torch'),
    (['-m', 'study.evals', '{{}}'], 'torch'),             # a run's final eval, the pool's or a job's child
    (['-m', 'publish.report', '{w}/results.json'], 'torch'),
    (['-m', 'study.plots', '{w}/results.json'], 'torch'),
    (['-m', 'publish.report', '--check'], 'base.rundir'),
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


# -----------------------------------------------------------------------------
# refusals, each script run in this process (a subprocess costs seconds of imports) as its __main__

def snapshot(root):
    return {os.path.join(d, f): open(os.path.join(d, f), 'rb').read()
            for d, _, files in os.walk(root) for f in files} | {d: None for d, _, _ in os.walk(root)}


def refusal(tmp_path, script, *args):
    """`python <script> *args` run here: -> its refusal, which must be one line, written before
    anything in tmp_path changed."""
    before = snapshot(tmp_path)
    with pytest.raises(SystemExit) as e, contextlib.redirect_stdout(io.StringIO()):
        script_here(script, args)
    msg = e.value.code
    assert isinstance(msg, str) and len(msg.strip().splitlines()) == 1, msg
    assert snapshot(tmp_path) == before
    return msg


KEYS = {'train.py': settings_of(vars(train)), 'eval_lengths.py': settings_of(vars(eval_lengths)),
        'sample_data.py': settings_of(vars(sample_data)), 'ablate.py': ablate.study_settings()}


def names_only(msg, script, key):
    """The refusal names `key` and no other key of the script's."""
    assert re.search(rf'\b{key}\b', msg), msg
    others = [k for k in KEYS[script] if k != key and re.search(rf'(?<![\w-]){k}(?![\w-])', msg)]
    assert not others, (others, msg)


def command(tmp_path, script):
    """A command of `script` that runs but for the key a test gives, all its paths in tmp_path."""
    if script == 'train.py':
        return ['tests/base_config.py', f'--out_dir={tmp_path / "run"}', f'--data_dir={tmp_path / "data"}']
    if script == 'eval_lengths.py':
        return [f'--out_dirs={tmp_path / "run"}']
    if script == 'sample_data.py':
        return [f'--data_dir={tmp_path / "data"}', '--num_tokens=1000']
    study = tmp_path / 'study.py'
    study.write_text(f"base_config = 'tests/base_config.py'\narms = {{'none': {{}}, 'wd': {{'weight_decay': 0.1}}}}\n"
                     f"grid_dir = {str(tmp_path / 'grid')!r}\nmultiples = '1,2'\nextrap_multiple = 2\n")
    return [str(study)]


LIST_KEYS = [('train.py', 'tasks', 'mqar,,niah_single'), ('train.py', 'eval_tasks', 'mqar,'),
             ('train.py', 'eval_multiples', '1,,4'), ('train.py', 'final_multiples', ',1,2'),
             ('train.py', 'snapshots_after_fit', '1,,2'),
             ('eval_lengths.py', 'out_dirs', 'a,,b'), ('eval_lengths.py', 'tasks', 'mqar,,vt'),
             ('eval_lengths.py', 'multiples', '1,,2'),
             ('sample_data.py', 'tasks', 'niah_single,,vt'),
             ('ablate.py', 'seeds', '1,,2'), ('ablate.py', 'multiples', '1,,2'), ('ablate.py', 'arms', 'none,,wd'),
             ('ablate.py', 'eval_variants', 'yarn,,pi'), ('ablate.py', 'slurm_extra', 'account=a,,qos=b')]


@pytest.mark.parametrize('script,key,value', LIST_KEYS, ids=[f'{s} {k}' for s, k, _ in LIST_KEYS])
def test_an_empty_list_item_is_refused_alike_for_every_list_key(tmp_path, script, key, value):
    """'1,,2' is a typo, not 1,2: refused in one line naming the key, by every script, for every list key."""
    extra = ['--launcher=submitit_local'] if key == 'slurm_extra' else []
    msg = refusal(tmp_path, script, *command(tmp_path, script), *extra, f'--{key}={value}')
    assert f"{key}={value!r} has an empty item" in msg, msg
    names_only(msg, script, key)


FACTORS = [('eval_lengths.py', 'logit_scale', v) for v in ('inf', '-inf', 'nan', '1e999', '0')] + \
          [('ablate.py', 'eval_variants', v) for v in ('logitinf', 'yarn+logitnan', 'pi,logit1e999')]


@pytest.mark.parametrize('script,key,value', FACTORS, ids=[f'{s} {v}' for s, _, v in FACTORS])
def test_a_logit_factor_must_be_finite(tmp_path, script, key, value):
    """An infinite factor made every logit NaN and wrote accuracy 0.0 with exit 0: refused, naming the key."""
    msg = refusal(tmp_path, script, *command(tmp_path, script), f'--{key}={value}')
    assert f"{key}={value!r}" in msg and 'positive finite' in msg, msg
    names_only(msg, script, key)


ONE_KEY = [('ablate.py', 'workers', 0), ('ablate.py', 'eval_samples', 0), ('ablate.py', 'deteriorate_multiple', -1),
           ('ablate.py', 'deteriorate_evals', 0), ('ablate.py', 'deteriorate_drop', 0),
           ('eval_lengths.py', 'eval_samples', 0), ('eval_lengths.py', 'eval_batch_size', 0)]


@pytest.mark.parametrize('script,key,value', ONE_KEY, ids=[f'{s} {k}={v}' for s, k, v in ONE_KEY])
def test_a_refusal_names_only_the_key_given(tmp_path, script, key, value):
    msg = refusal(tmp_path, script, *command(tmp_path, script), f'--{key}={value}')
    assert f"{key}={value}" in msg, msg
    names_only(msg, script, key)
