import json
import os
import runpy
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
    sample_data.prepare(d, 96, 20000, tasks='niah_single', data_seed=1337, progress=False)
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


def torchrun(*args):
    env = dict(os.environ, OMP_NUM_THREADS='1')
    return run(*args, env=env, module=('-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'train.py'))


def assert_same_run(a_dir, b_dir, atol=1e-5):
    a, b = log(a_dir), log(b_dir)
    assert [r['iter'] for r in a] == [r['iter'] for r in b]
    for ra, rb in zip(a[1:], b[1:]):
        for k in ('train_loss', 'val_loss'):
            assert abs(ra[k] - rb[k]) < 1e-4, (k, ra, rb)
    pa, pb = params(a_dir), params(b_dir)
    assert all(torch.allclose(pa[k], pb[k], atol=atol) for k in pa)


def test_ddp_two_processes_match_one_with_dropout_and_resume(data_dir, tmp_path):
    """Dropout masks are seeded by (seed, step, micro-batch), so 2 processes that each take one of
    the 2 micro-batches of a step train exactly like 1 process taking both, also across a resume."""
    common = ['config/vpad.py', *TINY, *on(data_dir), '--eval_interval=3', '--dropout=0.2',
              '--gradient_accumulation_steps=2']
    one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
    run(*common, f'--out_dir={one}', '--max_iters=6')
    out = torchrun(*common, f'--out_dir={two}', '--max_iters=3')
    assert '2 process(es) x 1 micro-steps x 4 rows' in out.stdout
    torchrun(*common, f'--out_dir={two}', '--max_iters=6', '--init_from=resume')
    assert_same_run(one, two)


def test_more_processes_than_micro_batches_split_the_rows(data_dir, tmp_path):
    """torchrun with gradient_accumulation_steps=1: each process takes half of the rows."""
    out = torchrun('config/vpad.py', *TINY, *on(data_dir), '--max_iters=2', '--eval_interval=2',
                   '--dropout_site=none', f'--out_dir={tmp_path / "r"}')
    assert 'tokens per iteration: 384 (2 process(es) x 1 micro-steps x 2 rows' in out.stdout
    assert [r['iter'] for r in log(str(tmp_path / 'r'))] == [0, 2]


def test_loss_is_the_mean_over_the_steps_answer_tokens(tmp_path):
    """Rows of a niah_single + niah_multivalue mix hold different numbers of answer tokens; one
    micro-batch of 8 rows, 2 of 4 and 4 of 2 give the same step (no dropout: masks differ by split)."""
    d = str(tmp_path / 'mix')
    sample_data.prepare(d, 160, 20000, tasks='niah_single,niah_multivalue', data_seed=1337, progress=False)
    common = ['config/vpad.py', *TINY, f'--data_dir={d}', '--num_tokens=20000', '--tasks=niah_single,niah_multivalue',
              '--block_size=160', '--eval_tasks=niah_single',
              '--eval_interval=3', '--max_iters=3', '--dropout_site=none']
    dirs = [str(tmp_path / f'g{g}') for g in (1, 2, 4)]
    for g, out_dir in zip((1, 2, 4), dirs):   # the same 16 val rows each time
        run(*common, f'--batch_size={8 // g}', f'--gradient_accumulation_steps={g}', f'--eval_iters={2 * g}',
            f'--out_dir={out_dir}')
    assert_same_run(dirs[0], dirs[1])
    assert_same_run(dirs[0], dirs[2])


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
    back = train.load_checkpoint(path)
    assert back['iter_num'] == 1 and torch.equal(back['w'], good['w'])


def one_line_error(out, *words):
    assert out.returncode != 0
    assert 'Traceback' not in out.stderr, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-3000:]
    msg = lines[0]
    for w in words:
        assert w in msg, msg


def refused(args, *words):
    """train.py's refusal of bad input, run in this process as `python train.py *args` would run it
    (a subprocess per case costs ~3 s of imports): it must exit with a one-line message naming
    `words`, which Python prints alone on stderr (the first case of the bad-input test checks that
    on a subprocess)."""
    argv, cwd = sys.argv, os.getcwd()
    sys.argv = ['train.py', *args]
    os.chdir(ROOT)
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path('train.py', run_name='__main__')
    finally:
        sys.argv = argv
        os.chdir(cwd)
    msg = e.value.code
    assert isinstance(msg, str) and len(msg.strip().splitlines()) == 1, msg
    for w in words:
        assert w in msg, msg


def test_bad_input_gives_a_clear_one_line_error(data_dir, tmp_path):
    base = ['config/vpad.py', *TINY, *on(data_dir), '--max_iters=2', '--eval_interval=2', '--dropout_site=none']
    one_line_error(run(*base, '--dropout_sit=vpad', check=False), 'dropout_site')
    refused([*base, '--max_iters=1.5'], 'max_iters', 'int', 'float')
    nowhere = str(tmp_path / 'never_written')
    refused([*base, '--dropout_site=dropout', f'--data_dir={nowhere}'], 'dropout_site', 'pre_linear')
    assert not os.path.exists(nowhere)             # refused before any data was generated
    # data: a truncated corpus, and data made for another block size
    broken = tmp_path / 'broken'
    broken.mkdir()
    for f in os.listdir(data_dir):
        (broken / f).write_bytes(open(os.path.join(data_dir, f), 'rb').read())
    with open(broken / 'train.bin', 'r+b') as f:
        f.truncate(100)
    refused([*base, f'--data_dir={broken}', f'--out_dir={tmp_path / "o1"}'], 'sample_data.py')
    refused([*base, '--block_size=128', f'--out_dir={tmp_path / "o2"}'], 'block_size=96')
    refused([*base, '--tasks=niah_multikey', f'--out_dir={tmp_path / "o3"}'], 'tasks=')
    refused([*base, '--dtype=fp16'], 'dtype')
    refused([*base, '--eval_multiples=1,x'], 'integers')
    # checkpoints: missing, corrupt, and trained with another tokenizer
    refused([*base, f'--out_dir={tmp_path / "none"}', '--init_from=resume'], 'no checkpoint')
    corrupt = tmp_path / 'corrupt'
    corrupt.mkdir()
    (corrupt / 'ckpt.pt').write_bytes(b'\x00' * 64)
    refused([*base, f'--out_dir={corrupt}', '--init_from=resume'], 'not a readable checkpoint')
    good = str(tmp_path / 'good')
    run(*base, f'--out_dir={good}')
    ckpt = torch.load(os.path.join(good, 'ckpt.pt'), weights_only=True)
    ckpt['tokenizer'] = 'gpt2'
    torch.save(ckpt, os.path.join(good, 'ckpt.pt'))
    refused([*base, f'--out_dir={good}', '--init_from=resume', '--max_iters=4'], 'tokenizer mismatch')


@pytest.mark.parametrize('case,words', [
    ('syntax', ['bad.py', 'SyntaxError']),
    ('name', ['bad.py', 'line 2', 'NameError']),
    ('--batch_size={[1]}', ['batch_size']),
    ('--eval_interval=0', ['eval_interval']),
    ('--batch_size=-3', ['batch_size']),
    ('--out_dir=', ['out_dir']),
    ('--eval_tasks=niah_singel', ['eval_tasks', 'niah_singel']),
])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, case, words):
    data = tmp_path / 'data'
    args = ['config/vpad.py', *TINY, f'--data_dir={data}', f'--out_dir={tmp_path / "run"}', '--max_iters=2']
    if case in ('syntax', 'name'):
        bad = tmp_path / 'bad.py'
        bad.write_text("batch_size = 4\n" + ("n_layer = (2\n" if case == 'syntax' else "n_layer = two\n"))
        args.append(str(bad))
    else:
        args.append(case)
    refused(args, *words)
    assert os.listdir(tmp_path) == (['bad.py'] if case in ('syntax', 'name') else [])


def test_out_of_memory_in_the_length_eval_skips_it_and_keeps_training(data_dir, tmp_path):
    """As on a GPU that runs out of memory at 64x: the eval is reported and skipped, the run goes on,
    and the checkpoint of that step was already written."""
    out_dir = str(tmp_path / 'oom')
    code = ("import runpy, sys, torch, eval_lengths\n"
            "def evaluate(model, tok, task, length, *a, **k):\n"
            "    if length > 96: raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 9 GiB')\n"
            "    return 0.5\n"
            "eval_lengths.evaluate = evaluate\n"
            "sys.argv = ['train.py'] + sys.argv[1:]\n"
            "runpy.run_path('train.py', run_name='__main__')\n")
    out = run('-c', code, 'config/vpad.py', *TINY, *on(data_dir), f'--out_dir={out_dir}', '--max_iters=2',
              '--eval_interval=2', '--dropout_site=none', module=())
    assert 'niah_single at 2x skipped: CUDA out of memory' in out.stdout
    assert log(out_dir)[-1]['length_eval'] == {'niah_single': {'1x': 0.5, '2x': None}}
    assert torch.load(os.path.join(out_dir, 'ckpt.pt'), weights_only=True)['iter_num'] == 2


def test_steps_after_fit_stops_a_fixed_number_of_steps_past_the_fit(data_dir, tmp_path):
    """A planted length eval that reaches the fit rule (1x >= fit_accuracy) from iter 4 on: the run
    logs fit_iter from there, stops steps_after_fit = 3 steps later (before max_iters) with the final
    eval, marks the checkpoint finished, and a resume of the finished run trains nothing more."""
    out_dir = str(tmp_path / 'fit')
    code = ("import runpy, sys, eval_lengths\n"
            "calls = []\n"
            "def evaluate(model, tok, task, length, *a, **k):\n"
            "    calls.append(length)\n"
            "    return 1.0 if len(calls) > 2 else 0.5\n"     # iters 0 and 2 miss, iter 4 fits
            "eval_lengths.evaluate = evaluate\n"
            "sys.argv = ['train.py'] + sys.argv[1:]\n"
            "runpy.run_path('train.py', run_name='__main__')\n")
    args = ['config/vpad.py', *TINY, *on(data_dir), f'--out_dir={out_dir}', '--max_iters=20', '--eval_interval=2',
            '--dropout_site=none', '--steps_after_fit=3', '--fit_accuracy=0.9']
    out = run('-c', code, *args, module=())
    assert 'fit at iter 4' in out.stdout and 'stopping at iter 7' in out.stdout
    records = log(out_dir)
    assert [(r['iter'], r['fit_iter'], r.get('final', False)) for r in records] == [
        (0, None, False), (2, None, False), (4, 4, False), (6, 4, False), (7, 4, True)]
    assert set(records[-1]['length_eval']['niah_single']) == {'1x', '2x'}        # the final multiples
    ckpt = torch.load(os.path.join(out_dir, 'ckpt.pt'), weights_only=True)
    assert ckpt['iter_num'] == 7 and ckpt['finished'] and ckpt['fit_iter'] == 4
    run('-c', code, *args, '--init_from=resume', module=())
    assert [r['iter'] for r in log(out_dir)] == [0, 2, 4, 6, 7]
    assert train.fits({'a': {'1x': 0.95, '4x': 0.1}, 'b': {'1x': 0.97}}, 0.95)
    assert not train.fits({'a': {'1x': 0.95}, 'b': {'1x': None}}, 0.95) and not train.fits({'a': {'4x': 1.0}}, 0.5)


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(data_dir, tmp_path):
    out_dir = str(tmp_path / 'nan')
    base = ['config/vpad.py', *TINY, *on(data_dir), f'--out_dir={out_dir}', '--eval_interval=2', '--dropout_site=none']
    run(*base, '--max_iters=2')
    before = open(os.path.join(out_dir, 'ckpt.pt'), 'rb').read()
    out = run(*base, '--max_iters=6', '--init_from=resume', '--learning_rate=1e30', '--grad_clip=0',
              '--warmup_iters=0', '--decay_lr=False', check=False)
    one_line_error(out, 'diverged', 'ckpt.pt')
    assert open(os.path.join(out_dir, 'ckpt.pt'), 'rb').read() == before


def test_cli_end_to_end_then_eval_lengths_reads_the_run(tmp_path):
    """config/vpad.py with tiny overrides: data generated on first use, log.jsonl, checkpoint, and
    eval_lengths.py on the result (by default on the tasks the run trained on)."""
    data, out_dir = str(tmp_path / 'data'), str(tmp_path / 'run')
    out = run('config/vpad.py', *TINY, f'--data_dir={data}', '--num_tokens=8000', f'--out_dir={out_dir}',
              '--max_iters=4', '--eval_interval=2', '--loss_on=all', '--dropout_site=none')
    assert 'generating it' in out.stdout and 'eval 4:' in out.stdout
    records = log(out_dir)
    assert [r['iter'] for r in records] == [0, 2, 4]
    assert records[-1]['length_eval'].keys() == {'niah_single'}
    assert set(records[-1]['length_eval']['niah_single']) == {'1x', '2x'}
    assert all(k in records[-1] for k in ('train_loss', 'val_loss', 'lr', 'tokens_per_sec', 'mfu'))
    ev = run(f'--out_dir={out_dir}', '--multiples=1,4', '--num_samples=2', module=('eval_lengths.py',))
    assert 'niah_single' in ev.stdout and 'untrained' not in ev.stdout
    res = json.load(open(os.path.join(out_dir, 'eval_lengths.json')))
    assert [(r['task'], r['length']) for r in res['results']] == [('niah_single', 96), ('niah_single', 384)]
    # a second fresh run into the same out_dir would overwrite the checkpoint: refused, nothing lost
    before = open(os.path.join(out_dir, 'ckpt.pt'), 'rb').read()
    one_line_error(run('config/vpad.py', *TINY, f'--data_dir={data}', '--num_tokens=8000', f'--out_dir={out_dir}',
                       '--max_iters=4', check=False), 'already holds a run', 'init_from=resume')
    assert open(os.path.join(out_dir, 'ckpt.pt'), 'rb').read() == before and len(log(out_dir)) == 3


def test_init_from_a_run_dir_loads_weights_but_not_optimizer_or_step(data_dir, tmp_path):
    src, dst = str(tmp_path / 'src'), str(tmp_path / 'dst')
    base = ['config/vpad.py', *TINY, *on(data_dir), '--eval_interval=3']
    run(*base, f'--out_dir={src}', '--max_iters=3', '--dropout_site=none')
    run(*base, f'--out_dir={dst}', '--max_iters=2', f'--init_from={src}', '--dropout_site=pre_linear')
    first = log(dst)[0]
    assert first['iter'] == 0 and first['init_from'] == os.path.abspath(os.path.join(src, 'ckpt.pt'))
    assert first['init_iter'] == 3
    assert abs(first['val_loss'] - log(src)[-1]['val_loss']) < 1e-6          # the same weights, evaluated again
    ckpt = torch.load(os.path.join(dst, 'ckpt.pt'), weights_only=True)
    assert ckpt['iter_num'] == 2 and ckpt['config']['dropout_site'] == 'pre_linear'
    assert all(int(s['step']) == 2 for s in ckpt['optimizer']['state'].values())   # fresh AdamW
    assert first['lr'] < 3e-3 / 2                                                  # its own warmup


def test_seed_varies_training_but_not_the_corpus(data_dir, tmp_path):
    base = ['config/vpad.py', *TINY, *on(data_dir), '--max_iters=2', '--eval_interval=2', '--dropout_site=none']
    run(*base, f'--out_dir={tmp_path / "s1"}', '--seed=1')
    run(*base, f'--out_dir={tmp_path / "s2"}', '--seed=2')                      # the same data_dir is fine
    assert log(str(tmp_path / 's1'))[-1]['train_loss'] != log(str(tmp_path / 's2'))[-1]['train_loss']
    one_line_error(run(*base, f'--out_dir={tmp_path / "s3"}', '--data_seed=7', check=False), 'data_seed=1337')


def test_lr_decay_follows_max_iters_unless_set():
    cfg = dict(decay_lr=True, learning_rate=1.0, min_lr=0.0, warmup_iters=0, lr_decay_iters=0, max_iters=10000)
    assert train.get_lr(5000, cfg) == pytest.approx(0.5)
    assert train.get_lr(10000, cfg) == pytest.approx(0.0)
    assert train.get_lr(2500, dict(cfg, lr_decay_iters=2500)) == pytest.approx(0.0)


def test_a_torn_log_line_does_not_stop_the_resume(data_dir, tmp_path):
    out_dir = str(tmp_path / 'torn')
    base = ['config/vpad.py', *TINY, *on(data_dir), f'--out_dir={out_dir}', '--eval_interval=2', '--dropout_site=none']
    run(*base, '--max_iters=2')
    with open(os.path.join(out_dir, 'log.jsonl'), 'a') as f:
        f.write('{"iter": 4, "train_lo')                                          # killed mid-write
    run(*base, '--max_iters=4', '--init_from=resume')
    assert [r['iter'] for r in log(out_dir)] == [0, 2, 4]


@pytest.mark.slow
def test_main_run_learns_retrieval(tmp_path):
    """The README's main job, end to end (about 12 minutes on 2 CPU cores; run with -m slow):
    it must reach at least 0.9 niah_single accuracy at its training length."""
    out_dir = str(tmp_path / 'vpad')
    out = run('config/vpad.py', f'--out_dir={out_dir}', f'--data_dir={tmp_path / "data"}')
    final = log(out_dir)[-1]
    assert final['iter'] == 2500 and final['length_eval']['niah_single']['1x'] >= 0.9, out.stdout[-1500:]
