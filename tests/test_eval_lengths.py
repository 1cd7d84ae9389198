import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

import eval_lengths as E
import sample_data
from model import GPT, GPTConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def tok():
    return sample_data.build_tokenizer()


def tiny_model(tok, **kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=tok.vocab_size, block_size=128, n_layer=2, n_head=2, n_embd=32, window=32)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


@torch.no_grad()
def greedy(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        logits, _ = model(torch.tensor([seq]))
        seq.append(int(logits[0, -1].argmax()))
    return seq[len(prompt):]


def test_one_pass_scoring_equals_greedy_decoding(tok):
    """Gold answers are the model's own greedy output (all right) or that output with one token
    changed (wrong from there), so both outcomes occur; multi-value answers included."""
    model = tiny_model(tok)
    examples = []
    for task in ('niah_single', 'niah_multivalue', 'niah_multiquery'):
        examples += sample_data.eval_examples(task, tok, 150, 8, seed=5)
    cases = []
    for i, ex in enumerate(examples):
        g = greedy(model, ex.prompt, len(ex.answer))
        if i % 2:                                   # change a token inside one of the values
            s, e = ex.value_spans[i % len(ex.value_spans)]
            j = s + i % (e - s)
            g[j] = (g[j] + 1) % tok.vocab_size
        cases.append(dataclasses.replace(ex, answer=g))
    scored = E.score(model, cases, 'cpu')
    n_exact = 0
    for ex, per_value in zip(cases, scored):
        decoded = greedy(model, ex.prompt, len(ex.answer))
        exact = decoded == ex.answer
        assert all(per_value) == exact
        n_exact += exact
        for (s, e), ok in zip(ex.value_spans, per_value):
            if decoded[:s] == ex.answer[:s]:        # greedy reached this value on the gold path
                assert ok == (decoded[s:e] == ex.answer[s:e])
    assert len(cases) >= 20 and 0 < n_exact < len(cases)
    assert any(len(ex.value_spans) == 4 for ex in cases)


def test_recall_based_accuracy_on_hand_made_cases():
    assert E.accuracy([[True, True, True, True]]) == 1.0
    assert E.accuracy([[True, False, False, True]]) == 0.5
    assert E.accuracy([[False] * 4]) == 0.0
    assert E.accuracy([[True], [False], [True, True, False, False]]) == pytest.approx((1 + 0 + 0.5) / 3)


def test_only_answer_positions_reach_the_lm_head(tok):
    model = tiny_model(tok)
    ex = sample_data.eval_examples('niah_multivalue', tok, 140, 1)[0]
    seen = []
    model.wte.register_forward_hook(lambda m, a, out: None)
    orig = torch.nn.functional.linear

    def spy(x, w, *args):
        if w is model.wte.weight:
            seen.append(x.shape[0])
        return orig(x, w, *args)
    torch.nn.functional.linear = spy
    try:
        E.score(model, [ex], 'cpu')
    finally:
        torch.nn.functional.linear = orig
    assert seen == [len(ex.answer)]


def test_same_examples_every_call(tok):
    a = sample_data.eval_examples('niah_single', tok, 200, 3, seed=0)
    b = sample_data.eval_examples('niah_single', tok, 200, 3, seed=0)
    assert [x.prompt for x in a] == [x.prompt for x in b]
    model = tiny_model(tok)
    assert E.evaluate(model, tok, 'niah_single', 200, 6, 4, 'cpu') == E.evaluate(model, tok, 'niah_single', 200, 6, 3, 'cpu')


def test_a_length_that_will_not_fit_is_refused_with_the_estimate(tok):
    model = tiny_model(tok)
    with pytest.raises(MemoryError, match=r'needs about [0-9.]+ GiB'):
        E.evaluate(model, tok, 'niah_single', 2**31, 1, 1, 'cpu')


def save_tiny_run(run_dir, tok, **kw):
    model = tiny_model(tok, **kw)
    os.makedirs(run_dir, exist_ok=True)
    args = dataclasses.asdict(model.config)
    torch.save({'model': model.state_dict(), 'model_args': args, 'config': {}}, os.path.join(run_dir, 'ckpt.pt'))
    tok.save(os.path.join(run_dir, 'tokenizer.json'))


def run_cli(*args):
    return subprocess.run([sys.executable, 'eval_lengths.py', *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_cli_end_to_end_compares_runs(tok, tmp_path):
    a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
    save_tiny_run(a, tok)
    save_tiny_run(b, tok, window=0, block_pattern='AM', d_state=8, headdim=16, chunk_size=16)
    out = run_cli(f'--out_dir={a},{b}', '--tasks=niah_single,niah_multivalue', '--multiples=1,2',
                  '--num_samples=4', '--batch_size=2')
    assert out.returncode == 0, out.stderr
    for run in (a, b):
        res = json.load(open(os.path.join(run, 'eval_lengths.json')))
        assert res['block_size'] == 128 and res['tokenizer'] == 'lengthgen'
        assert {(r['task'], r['multiple'], r['length'], r['n']) for r in res['results']} == {
            (t, m, 128 * m, 4) for t in ('niah_single', 'niah_multivalue') for m in (1, 2)}
        assert all(0 <= r['accuracy'] <= 1 for r in res['results'])
        assert run in out.stdout
    assert 'mean' in out.stdout and '2x' in out.stdout
    try:
        import matplotlib  # noqa: F401
        assert os.path.exists(os.path.join(a, 'eval_lengths.png'))
    except ImportError:
        assert 'matplotlib is not installed' in out.stdout


def test_cli_errors_are_one_line(tok, tmp_path):
    for args, words in ((['--out_dir=' + str(tmp_path / 'none')], 'no checkpoint'),
                        (['--tasks=niah_singel'], 'unknown task'),
                        (['--multiples=1,x'], 'integers'),
                        (['--num_sampels=3'], 'num_samples')):
        if 'unknown task' in words or 'integers' in words:
            save_tiny_run(str(tmp_path / 'r'), tok)
            args = args + ['--out_dir=' + str(tmp_path / 'r')]
        out = run_cli(*args)
        assert out.returncode != 0 and words in out.stderr and 'Traceback' not in out.stderr, out.stderr
    bad = tmp_path / 'bad'
    bad.mkdir()
    (bad / 'ckpt.pt').write_bytes(b'not a checkpoint')
    out = run_cli(f'--out_dir={bad}')
    assert out.returncode != 0 and 'not a readable' in out.stderr and 'Traceback' not in out.stderr
