import json
import os
import subprocess
import sys

import pytest
import torch

import sample_data
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ['--n_layer=2', '--n_head=2', '--n_embd=32', '--window=32', '--nope_every=2', '--batch_size=4',
        '--block_size=96', '--eval_iters=2', '--eval_samples=2', '--eval_batch_size=2', '--eval_multiples=1',
        '--final_multiples=1,2', '--log_interval=1', '--warmup_iters=2', '--learning_rate=3e-3']


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp('data'))
    sample_data.prepare(d, 96, 20000, tasks='niah_single', seed=1337, progress=False)
    return d


def on(data_dir):
    """The arguments that point a run at the fixture's data (and match how it was made)."""
    return [f'--data_dir={data_dir}', '--num_tokens=20000']


def run(*args, module=('train.py',), check=True, env=None):
    out = subprocess.run([sys.executable, *module, *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env=env)
    if check:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out


def log(out_dir):
    with open(os.path.join(out_dir, 'log.jsonl')) as f:
        return [json.loads(line) for line in f]


def params(out_dir):
    return torch.load(os.path.join(out_dir, 'ckpt.pt'), weights_only=True)['model']


def test_resume_continues_exactly(data_dir, tmp_path):
    """N steps + resume + N steps == 2N steps: same losses, same weights (dropout on, so the RNG
    states in the checkpoint matter)."""
    common = ['config/vpad.py', *TINY, *on(data_dir), '--eval_interval=3', '--dropout=0.2']
    whole, split = str(tmp_path / 'whole'), str(tmp_path / 'split')
    run(*common, f'--out_dir={whole}', '--max_iters=6')
    run(*common, f'--out_dir={split}', '--max_iters=3')
    run(*common, f'--out_dir={split}', '--max_iters=6', '--init_from=resume')
    a, b = log(whole), log(split)
    assert [r['iter'] for r in a] == [0, 3, 6] and [r['iter'] for r in b] == [0, 3, 6]
    for ra, rb in zip(a, b):
        for k in ('train_loss', 'val_loss'):
            assert ra[k] == rb[k] or abs(ra[k] - rb[k]) < 1e-6, (k, ra, rb)
    pa, pb = params(whole), params(split)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_ddp_two_processes_match_one(data_dir, tmp_path):
    common = ['config/vpad.py', *TINY, *on(data_dir), '--eval_interval=3', '--max_iters=3',
              '--dropout_site=none', '--gradient_accumulation_steps=4']
    one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
    run(*common, f'--out_dir={one}')
    env = dict(os.environ, OMP_NUM_THREADS='1')
    out = run(*common, f'--out_dir={two}', env=env,
              module=('-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'train.py'))
    assert '2 process(es) x 2 micro-steps' in out.stdout     # so gradient sync is skipped once per step
    a, b = log(one), log(two)
    assert [r['iter'] for r in a] == [r['iter'] for r in b] == [0, 3]
    for ra, rb in zip(a[1:], b[1:]):
        assert abs(ra['train_loss'] - rb['train_loss']) < 1e-4
        assert abs(ra['val_loss'] - rb['val_loss']) < 1e-4
    pa, pb = params(one), params(two)
    assert all(torch.allclose(pa[k], pb[k], atol=1e-5) for k in pa)


def test_kill_during_checkpoint_write_leaves_previous_loadable(tmp_path):
    path = str(tmp_path / 'ckpt.pt')
    good = {'iter_num': 1, 'w': torch.arange(10.0)}
    train.save_checkpoint(good, path)
    code = (
        "import os, signal, torch, train\n"
        "def dying_save(obj, f):\n"
        "    f.write(b'PK' + b'x' * 1000); f.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "torch.save = dying_save\n"
        f"train.save_checkpoint({{'iter_num': 2}}, {path!r})\n")
    out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, timeout=120)
    assert out.returncode == -9
    back = train.load_checkpoint(path, 'cpu')
    assert back['iter_num'] == 1 and torch.equal(back['w'], good['w'])


def one_line_error(out, *words):
    assert out.returncode != 0
    assert 'Traceback' not in out.stderr, out.stderr[-3000:]
    msg = out.stderr.strip().splitlines()[-1]
    for w in words:
        assert w in msg, msg


def test_bad_input_gives_a_clear_one_line_error(data_dir, tmp_path):
    base = ['config/vpad.py', *TINY, *on(data_dir), '--max_iters=2', '--eval_interval=2']
    one_line_error(run(*base, '--dropout_sit=vpad', check=False), 'dropout_site')
    one_line_error(run(*base, '--max_iters=1.5', check=False), 'max_iters', 'int', 'float')
    nowhere = str(tmp_path / 'never_written')
    one_line_error(run(*base, '--dropout_site=dropout', f'--data_dir={nowhere}', check=False), 'dropout_site', 'pre_linear')
    assert not os.path.exists(nowhere)             # refused before any data was generated
    # data: a truncated corpus, and data made for another block size
    broken = tmp_path / 'broken'
    broken.mkdir()
    for f in os.listdir(data_dir):
        (broken / f).write_bytes(open(os.path.join(data_dir, f), 'rb').read())
    with open(broken / 'train.bin', 'r+b') as f:
        f.truncate(100)
    one_line_error(run(*base, f'--data_dir={broken}', f'--out_dir={tmp_path / "o1"}', check=False),
                   'sample_data.py')
    one_line_error(run(*base, '--block_size=128', f'--out_dir={tmp_path / "o2"}', check=False), 'block_size=96')
    one_line_error(run(*base, '--tasks=niah_multikey', f'--out_dir={tmp_path / "o3"}', check=False), 'tasks=')
    one_line_error(run(*base, '--dtype=fp16', check=False), 'dtype')
    one_line_error(run(*base, '--eval_multiples=1,x', check=False), 'integers')
    # checkpoints: missing, corrupt, and trained with another tokenizer
    one_line_error(run(*base, f'--out_dir={tmp_path / "none"}', '--init_from=resume', check=False), 'no checkpoint')
    corrupt = tmp_path / 'corrupt'
    corrupt.mkdir()
    (corrupt / 'ckpt.pt').write_bytes(b'\x00' * 64)
    one_line_error(run(*base, f'--out_dir={corrupt}', '--init_from=resume', check=False), 'not a readable checkpoint')
    good = str(tmp_path / 'good')
    run(*base, f'--out_dir={good}')
    ckpt = torch.load(os.path.join(good, 'ckpt.pt'), weights_only=True)
    ckpt['tokenizer'] = 'gpt2'
    torch.save(ckpt, os.path.join(good, 'ckpt.pt'))
    one_line_error(run(*base, f'--out_dir={good}', '--init_from=resume', '--max_iters=4', check=False),
                   'tokenizer mismatch')


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(data_dir, tmp_path):
    out_dir = str(tmp_path / 'nan')
    base = ['config/vpad.py', *TINY, *on(data_dir), f'--out_dir={out_dir}', '--eval_interval=2']
    run(*base, '--max_iters=2')
    before = open(os.path.join(out_dir, 'ckpt.pt'), 'rb').read()
    out = run(*base, '--max_iters=6', '--init_from=resume', '--learning_rate=1e30', '--grad_clip=0',
              '--warmup_iters=0', '--decay_lr=False', check=False)
    one_line_error(out, 'diverged', 'ckpt.pt')
    assert open(os.path.join(out_dir, 'ckpt.pt'), 'rb').read() == before


def test_cli_end_to_end_then_eval_lengths_reads_the_run(tmp_path):
    """config/vpad.py with tiny overrides: data generated on first use, log.jsonl, checkpoint, and
    eval_lengths.py on the result."""
    data, out_dir = str(tmp_path / 'data'), str(tmp_path / 'run')
    out = run('config/vpad.py', *TINY, f'--data_dir={data}', '--num_tokens=8000', f'--out_dir={out_dir}',
              '--max_iters=4', '--eval_interval=2', '--loss_on=all')
    assert 'generating it' in out.stdout and 'accuracy by length' in out.stdout
    records = log(out_dir)
    assert [r['iter'] for r in records] == [0, 2, 4]
    assert set(records[-1]['length_eval']) == {'task', '1x', '2x'}
    assert all(k in records[-1] for k in ('train_loss', 'val_loss', 'lr', 'tokens_per_sec', 'mfu'))
    ev = run(f'--out_dir={out_dir}', '--tasks=niah_single', '--multiples=1,4', '--num_samples=2',
             module=('eval_lengths.py',))
    assert 'niah_single' in ev.stdout
    res = json.load(open(os.path.join(out_dir, 'eval_lengths.json')))
    assert [r['length'] for r in res['results']] == [96, 384]


@pytest.mark.slow
def test_main_run_learns_retrieval(tmp_path):
    """The README's main job, end to end (about 12 minutes on 2 CPU cores; run with -m slow):
    it must reach at least 0.9 niah_single accuracy at its training length."""
    out_dir = str(tmp_path / 'vpad')
    out = run('config/vpad.py', f'--out_dir={out_dir}', f'--data_dir={tmp_path / "data"}')
    final = log(out_dir)[-1]
    assert final['iter'] == 2500 and final['length_eval']['1x'] >= 0.9, out.stdout[-1500:]
