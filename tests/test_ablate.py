import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from ablate import main as ablate_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(n_layer=2, n_head=2, n_embd=32, window=32, nope_every=2, batch_size=4, block_size=96, eval_iters=2,
            eval_samples=2, eval_batch_size=2, eval_multiples='1', final_multiples='1,2', log_interval=1,
            warmup_iters=2, learning_rate=3e-3, num_tokens=20000, max_iters=4, eval_interval=2)


def study(tmp_path, name='study.py', **extra):
    """A tiny study config: two arms on config/vpad.py with tiny overrides, data in tmp_path (no
    dropout arm: its kernel's compile would double the time of these runs; train.py's tests cover it)."""
    common = dict(TINY, data_dir=str(tmp_path / 'data'))
    text = (f"base_config = 'config/vpad.py'\n"
            f"arms = {{'none': {{'dropout_site': 'none'}}, 'wd': {{'dropout_site': 'none', 'weight_decay': 0.1}}}}\n"
            f"common = {common!r}\n"
            f"seeds = '1,2'\n"
            f"out_dir = {str(tmp_path / 'grid')!r}\n"
            f"multiples = '1,2'\n"
            f"num_samples = 3\n")
    for k, v in extra.items():
        text += f"{k} = {v!r}\n"
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def ablate(*args, check=True):
    out = subprocess.run([sys.executable, 'ablate.py', *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if check:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def refused(*args):
    """ablate.py's refusal of bad input, in this process (a subprocess per case costs ~3 s of
    imports): a SystemExit with a one-line message."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with pytest.raises(SystemExit) as e:
            ablate_main(list(args))
    finally:
        os.chdir(cwd)
    msg = e.value.code
    assert isinstance(msg, str) and len(msg.strip().splitlines()) == 1, msg
    return msg


def mtimes(grid):
    return {os.path.join(d, f): os.path.getmtime(os.path.join(d, f))
            for d, _, files in os.walk(grid) for f in files if f == 'ckpt.pt'}


def test_grid_trains_summarizes_and_skips_finished_runs(tmp_path):
    cfg = study(tmp_path, results_dir=str(tmp_path / 'results'))
    grid, out = tmp_path / 'grid', tmp_path / 'results'
    first = ablate(cfg, '--workers=2')
    res = json.load(open(out / 'results.json'))
    assert res['command'] == f'python ablate.py {cfg}'              # scheduling flags do not change results
    assert set(res['arms']) == {'none', 'wd'}
    assert res['arms']['none']['overrides'] == {'dropout_site': 'none'}
    for arm in res['arms'].values():
        assert arm['seeds'] == [1, 2] and arm['pending_seeds'] == []
        assert set(arm['tasks']) == {'niah_single'} and set(arm['tasks']['niah_single']) == {'1', '2'}
        for m, point in arm['tasks']['niah_single'].items():
            xs = list(point['per_seed'].values())
            assert len(xs) == 2 and point['length'] == 96 * int(m)
            assert point['mean'] == pytest.approx(sum(xs) / 2)
            assert point['std'] == pytest.approx(math.sqrt(sum((x - point['mean']) ** 2 for x in xs)))
    # the per-seed numbers are those of each run's own eval record
    rec = json.load(open(grid / 'wd' / 'seed2' / 'ablate_eval.json'))['record']
    assert {str(r['multiple']): r['accuracy'] for r in rec['results']} == \
        {m: p['per_seed']['2'] for m, p in res['arms']['wd']['tasks']['niah_single'].items()}
    # no dropout at the arms' site: train and eval mode are the same network, so no mismatch
    for arm in res['arms'].values():
        assert arm['mismatch']['var_ratio'] == pytest.approx(1) and arm['mismatch']['pre_act_var_ratio'] == pytest.approx(1)
        assert arm['mismatch']['mean_shift'] == pytest.approx(0, abs=1e-5)
    md = open(out / 'results.md').read()
    assert '| none | 2 |' in md and 'pre-act var ratio' in md
    per_seed = res['arms']['wd']['tasks']['niah_single']
    assert f"| wd | 2 | {per_seed['1']['per_seed']['2']:.2f} | {per_seed['2']['per_seed']['2']:.2f} |" in md   # each seed's row
    assert not (grid / 'results.json').exists()
    try:                                                                # plots are optional
        import matplotlib  # noqa: F401
        assert (out / 'accuracy_vs_length.png').exists() and (out / 'accuracy_vs_step.png').exists()
    except ImportError:
        assert 'matplotlib is not installed' in first.stdout and not (out / 'accuracy_vs_length.png').exists()
    # a rerun trains nothing and re-summarizes from the cached evals
    before = mtimes(grid)
    out = ablate(cfg)
    assert '4 finished, 0 to train' in out.stdout and 'final eval' not in out.stdout
    assert mtimes(grid) == before


def test_killed_grid_resumes_and_keeps_finished_runs(tmp_path):
    cfg = study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1,2')
    grid = tmp_path / 'grid'
    args = [cfg, '--max_iters=100', '--eval_interval=4', '--multiples=1']
    proc = subprocess.Popen([sys.executable, 'ablate.py', *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    log2 = grid / 'none' / 'seed2' / 'log.jsonl'
    deadline = time.time() + 300
    while time.time() < deadline and not (log2.exists() and log2.read_text().count('\n') >= 3):
        time.sleep(0.05)                                    # seed 1 finished, seed 2 under way
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    it = torch.load(grid / 'none' / 'seed2' / 'ckpt.pt', weights_only=True)['iter_num']
    assert 0 < it < 100, "the run was not killed mid-way"
    seed1 = mtimes(grid / 'none' / 'seed1')
    out = ablate(*args)
    assert '1 finished, 1 to train' in out.stdout and 'resuming' in out.stdout
    assert mtimes(grid / 'none' / 'seed1') == seed1                      # not retrained
    log = [json.loads(line) for line in open(grid / 'none' / 'seed2' / 'log.jsonl')]
    assert [r['iter'] for r in log] == list(range(0, 101, 4))             # each eval once, none lost
    assert 'resumed from' in open(grid / 'none' / 'seed2' / 'train.log').read()


def test_dry_run_prints_independent_commands_and_trains_nothing(tmp_path):
    cfg = study(tmp_path)
    ablate(cfg, '--arms=wd', '--seeds=1', '--max_iters=2')
    assert not (tmp_path / 'grid' / 'none').exists()
    out = ablate(cfg, '--dry_run', '--max_iters=2', '--seeds=1')
    cmds = [line for line in out.stdout.splitlines() if line.startswith('python train.py')]
    assert len(cmds) == 1 and '--dropout_site=none' in cmds[0] and '--seed=1' in cmds[0]
    assert not (tmp_path / 'grid' / 'none').exists()
    assert [a['seeds'] for a in json.load(open(tmp_path / 'grid' / 'results.json'))['arms'].values()] == [[], [1]]
    subprocess.run(cmds[0].replace('python', sys.executable, 1), shell=True, cwd=ROOT, check=True,
                   capture_output=True, timeout=300)                   # as a scheduler would
    out = ablate(cfg, '--dry_run', '--max_iters=2', '--seeds=1')
    assert not [line for line in out.stdout.splitlines() if line.startswith('python train.py')]
    assert [a['seeds'] for a in json.load(open(tmp_path / 'grid' / 'results.json'))['arms'].values()] == [[1], [1]]
    out = ablate(cfg, '--arms=wd', '--max_iters=2', '--seeds=1')          # trains only wd; summarizes every arm
    assert '1 runs, 1 finished, 0 to train' in out.stdout
    assert [a['seeds'] for a in json.load(open(tmp_path / 'grid' / 'results.json'))['arms'].values()] == [[1], [1]]
    # a continued-training study starts each seed from the same seed's run of another study
    source = str(tmp_path / 'grid' / 'wd' / 'seed{seed}')
    cont = study(tmp_path, 'cont.py', arms={'late': {'init_from': source, 'dropout_site': 'none'}},
                 out_dir=str(tmp_path / 'cont'))
    out = ablate(cont, '--dry_run', '--max_iters=2', '--seeds=1')
    assert f"--init_from={source.format(seed=1)}" in out.stdout
    out = ablate(cont, '--dry_run', '--max_iters=2', '--seeds=2', check=False)
    assert out.returncode != 0 and 'not a finished run yet' in out.stderr


@pytest.mark.parametrize('args,words', [
    (['--arms=none,wdd'], ["unknown arm 'wdd'", 'none, wd']),
    (['--seeds='], ['seeds']),
    (['--max_iter=3'], ['max_iters']),
    (['--workers=0'], ['workers']),
])
def test_bad_grid_input_is_one_line_before_anything_runs(tmp_path, args, words):
    msg = refused(study(tmp_path), *args)
    for w in words:
        assert w in msg, msg
    assert not (tmp_path / 'grid').exists() and not (tmp_path / 'data').exists()


def test_study_without_arms_or_with_a_bad_override_is_refused(tmp_path):
    no_arms = tmp_path / 'no_arms.py'
    no_arms.write_text(f"out_dir = {str(tmp_path / 'grid')!r}\n")
    bad = study(tmp_path, 'bad.py', arms={'x': {'dropout_sit': 'none'}})
    for cfg, words in ((str(no_arms), ['arms']), (bad, ["arm 'x'", 'dropout_site'])):
        msg = refused(cfg)
        assert all(w in msg for w in words), msg
    assert not (tmp_path / 'grid').exists()
    # end to end once: Python prints the message alone on stderr, no traceback
    out = ablate(bad, check=False)
    assert out.returncode != 0 and out.stderr.strip() == refused(bad), out.stderr
