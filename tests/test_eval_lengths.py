import dataclasses
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import types

import pytest
import torch

import eval_lengths as E
from base import kernels
import model as M
import sample_data
from model import GPT, GPTConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def tok():
    return sample_data.build_tokenizer()


def tiny_model(tok, **kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=tok.vocab_size, block_size=128, n_layer=2, n_head=2, n_embd=32, window=32, nope_every=0,
               short_conv=0, dropout=0.0, dropout_site='none')
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


@torch.no_grad()
def greedy(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        logits, _, _ = model(torch.tensor([seq]))
        seq.append(int(logits[0, -1].argmax()))
    return seq[len(prompt):]


def test_one_pass_scoring_equals_greedy_decoding(tok):
    """Gold answers are the model's own greedy output (all right) or that output with one token
    changed (wrong from there), so both outcomes occur; multi-value answers included."""
    model = tiny_model(tok)
    examples = []
    for task in ('niah_single', 'niah_multivalue', 'niah_multiquery'):
        examples += sample_data.eval_examples(task, tok, 200, 8, seed=5)
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
    ex = sample_data.eval_examples('niah_multivalue', tok, 160, 1)[0]
    seen = []
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


class Oracle(torch.nn.Module):
    """Predicts the gold target at every answer position, except in examples whose prompt sums to a
    multiple of 3 (a fixed, content-dependent subset), or, with end_first, predicts the end marker
    at the first answer position. A model with known answers, so scoring can be checked exactly."""
    def __init__(self, tok, end_first=False):
        super().__init__()
        self.config = GPTConfig(vocab_size=tok.vocab_size, n_layer=1, n_embd=32, n_head=2, short_conv=0, nope_every=0)
        self.vocab, self.end = tok.vocab_size, tok.encode(sample_data.END)[0]
        self.end_first = end_first

    def forward(self, idx, targets, scaling=None, states=None):
        pred = targets.clone()
        for b in range(idx.shape[0]):
            pos = (targets[b] != -1).nonzero().flatten()
            if self.end_first:
                pred[b, pos[0]] = self.end
            elif int(idx[b].sum()) % 3 == 0:
                pred[b, pos[-1]] = (pred[b, pos[-1]] + 1) % self.vocab
        pred = pred[targets != -1]
        return torch.nn.functional.one_hot(pred, self.vocab).float(), None, None


def test_same_examples_every_call(tok):
    a = sample_data.eval_examples('niah_single', tok, 200, 3, seed=0)
    b = sample_data.eval_examples('niah_single', tok, 200, 3, seed=0)
    assert [x.prompt for x in a] == [x.prompt for x in b]
    model = Oracle(tok)
    acc = E.evaluate(model, tok, 'niah_multivalue', 200, 12, 4, 'cpu')
    assert 0 < acc < 1                                                   # some right, some wrong
    assert acc == E.evaluate(model, tok, 'niah_multivalue', 200, 12, 5, 'cpu')
    assert acc != E.evaluate(model, tok, 'niah_multivalue', 200, 12, 4, 'cpu', seed=1)


def test_ending_before_the_answer_is_scored_wrong(tok):
    """The leading space of a value and the separators belong to the scored spans: a model that
    would print the end marker first (as greedy decoding would show) gets nothing right."""
    for task in ('niah_single', 'niah_multivalue'):
        examples = sample_data.eval_examples(task, tok, 160, 6)
        assert all(ex.value_spans[0][0] == 0 and ex.value_spans[-1][1] == len(ex.answer) for ex in examples)
        right = E.score(Oracle(tok), examples, 'cpu')
        assert all(v == [True] * len(v) for ex, v in zip(examples, right) if sum(ex.prompt + ex.answer[:-1]) % 3)
        assert not any(v[0] for v in E.score(Oracle(tok, end_first=True), examples, 'cpu'))


def test_one_x_is_the_longest_training_document(tok):
    """The longest training document the packer can draw is a whole row, block_size tokens (its length is
    drawn up to the row's room): built here at 160, it holds as many tokens as a 1x example at 160 with its
    answer and end marker, and it ends with the same end marker."""
    end = tok.encode(sample_data.END)
    for task in ('niah_single', 'niah_multikey', 'niah_multivalue', 'mqar'):
        doc, mask, ex = sample_data.make_document(task, tok, 160, random.Random(0))
        assert len(doc) == len(mask) == 160 and doc[-len(end):] == end
        assert sum(mask) == sum(e - s for s, e in ex.value_spans) > 0         # the answer is in it, scored
        for example in sample_data.eval_examples(task, tok, 160, 5):
            assert len(example.prompt) + len(example.answer) + len(end) == len(doc)


def test_a_length_that_will_not_fit_is_refused_with_the_estimate(tok):
    model = tiny_model(tok)
    with pytest.raises(MemoryError, match=r'needs about [0-9.]+ GiB'):
        E.evaluate(model, tok, 'niah_single', 2**31, 1, 1, 'cpu')
    with pytest.raises(MemoryError, match=r'10,000,000,000 examples .* need about [0-9.]+ GiB'):
        E.evaluate(model, tok, 'niah_single', 128, 10**10, 1, 'cpu')      # all held at once: refused before any is made


def test_length_eval_records_a_skipped_point_as_none_with_its_reason(tok, capsys, monkeypatch):
    """The one length-eval record: a length shorter than the task's documents (niah_multivalue needs
    147 tokens, 1x is 128) and one that will not fit in memory are None, each skip printed; the
    others are what evaluate() gives."""
    model = tiny_model(tok)
    real = E.evaluate

    def evaluate(model, tok, task, length, *a, **k):
        if length > 256:
            raise MemoryError(f"{task} at {length} tokens needs about 9.0 GiB")
        return real(model, tok, task, length, *a, **k)
    monkeypatch.setattr(E, 'evaluate', evaluate)
    accs = E.length_eval(model, tok, ['niah_single', 'niah_multivalue'], [1, 2, 4], 2, 2, 'cpu')
    out = capsys.readouterr().out
    assert accs['niah_single']['4x'] is None and accs['niah_multivalue']['1x'] is None
    assert accs['niah_multivalue']['4x'] is None and 0 <= accs['niah_multivalue']['2x'] <= 1
    assert accs['niah_single']['1x'] == real(model, tok, 'niah_single', 128, 2, 2, 'cpu')
    assert 'niah_multivalue at 1x skipped: 1x128 = 128 tokens, its documents need at least 147' in out
    assert 'niah_single at 4x skipped: niah_single at 512 tokens needs about 9.0 GiB' in out


def save_tiny_run(run_dir, tok, config=None, **kw):
    model = tiny_model(tok, **kw)
    os.makedirs(run_dir, exist_ok=True)
    args = dataclasses.asdict(model.config)
    torch.save({'model': model.state_dict(), 'optimizer': {}, 'model_args': args, 'config': config or {}, 'iter_num': 0,
                'tokenizer': tok.name, 'finished': True, 'fit_iter': None}, os.path.join(run_dir, 'ckpt.pt'))
    tok.save(os.path.join(run_dir, 'tokenizer.json'))


@pytest.mark.parametrize('nope_first', [False, True])
def test_a_checkpoint_that_holds_nope_first_loads_if_false_and_is_refused_in_one_line_if_true(tok, tmp_path,
                                                                                             nope_first):
    """Checkpoints from before nope_first was removed hold it in model_args: False, the layout this code
    builds, loads as if it were not there; True is refused in one line that names the commit that loads it."""
    run = str(tmp_path / 'run')
    save_tiny_run(run, tok)
    path = os.path.join(run, 'ckpt.pt')
    ckpt = torch.load(path, weights_only=False)
    torch.save({**ckpt, 'model_args': {**ckpt['model_args'], 'nope_first': nope_first}}, path)
    if nope_first:
        with pytest.raises(SystemExit) as e:
            E.load_run(run, 'cpu')
        said = e.value.code
        assert len(said.splitlines()) == 1 and said.startswith(f"{path} was trained with nope_first=True")
        assert "the commit that trained it (its log.jsonl's provenance; archived ablate_pilot_niah: f14fc75)" in said
    else:
        model = E.load_run(run, 'cpu')[0]
        assert all(torch.equal(model.state_dict()[k], v) for k, v in ckpt['model'].items())


def main_here(*args):
    """eval_lengths.py in this process; -> its one-line refusal, or None when it ran."""
    try:
        E.main(list(args))
    except SystemExit as e:
        assert isinstance(e.code, str) and len(e.code.splitlines()) == 1, e.code
        return e.code


def test_two_runs_side_by_side_record_what_evaluate_scores(tok, tmp_path, capsys, monkeypatch):
    """eval_lengths.py on a transformer and a hybrid: each run's eval_lengths.json holds the length
    eval train.py logs ({task: {'<m>x': accuracy}}), each accuracy the one evaluate() gives that run's
    model on its own, the table marks the task the run never trained on, and the plot is written. The
    Mamba2 kernels run op by op (compiling them for each length took 8 s; tests/test_model.py checks
    them equal)."""
    monkeypatch.setattr(kernels, 'USE_COMPILE', False)
    a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
    save_tiny_run(a, tok, config={'tasks': 'niah_single'})
    save_tiny_run(b, tok, window=0, block_pattern='AM', d_state=8, headdim=16, chunk_size=16)
    assert main_here(f'--out_dirs={a},{b}', '--tasks=niah_single,niah_multivalue', '--multiples=2,4',
                     '--eval_samples=4', '--eval_batch_size=2') is None
    out = capsys.readouterr().out
    for run in (a, b):
        res = json.load(open(os.path.join(run, 'eval_lengths.json')))
        assert res['block_size'] == 128 and res['tokenizer'] == 'lengthgen' and res['n'] == 4
        assert {(t, m) for t, accs in res['length_eval'].items() for m in accs} == {
            (t, f'{m}x') for t in ('niah_single', 'niah_multivalue') for m in (2, 4)}
        assert run in out
    model = E.load_run(a, 'cpu')[0]
    res = json.load(open(os.path.join(a, 'eval_lengths.json')))
    assert res['trained'] == ['niah_single']
    for task, accs in res['length_eval'].items():
        for m, acc in accs.items():
            assert acc == E.evaluate(model, tok, task, 128 * int(m[:-1]), 4, 2, 'cpu'), (task, m)
    rows_a = [line for line in out.splitlines() if line.startswith(a)]
    assert [('(untrained)' in line) for line in rows_a] == [False, True]          # niah_single, niah_multivalue
    try:
        import matplotlib  # noqa: F401
        assert os.path.exists(os.path.join(a, 'eval_lengths.png'))
    except ImportError:
        assert 'matplotlib is not installed' in out
    # the key probe writes its own JSON and plot and says what it is: the eval's stay as they were
    before = {f: open(os.path.join(a, f), 'rb').read() for f in os.listdir(a) if f.startswith('eval_lengths.')}
    main_here(f'--out_dirs={a}', '--tasks=niah_single', '--multiples=2', '--eval_samples=4', '--absent_key=True')
    out = capsys.readouterr().out
    assert 'the key probe' in out and os.path.exists(os.path.join(a, 'eval_absent_key.json'))
    assert before == {f: open(os.path.join(a, f), 'rb').read() for f in before}
    assert os.path.exists(os.path.join(a, 'eval_absent_key.png')) or 'no eval_absent_key.png' in out


# -----------------------------------------------------------------------------
# the length-scaling variants, each against a direct computation of what it is defined to do

def plain_angles(T, D, theta):
    return torch.arange(T, dtype=torch.float64)[:, None] * theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)


def angles_of(T, D, theta, rope, s, block=64):
    """The angles and the factor on cos and sin that rope_tables gives a variant (from its tables)."""
    cos, sin = M.rope_tables(T, D, theta, 'cpu', M.LengthScaling(rope, s=s, T=block))
    scale = torch.sqrt(cos.double() ** 2 + sin.double() ** 2)          # (T, D/2): the factor, per entry
    return torch.atan2(sin.double(), cos.double()), scale


@pytest.mark.parametrize('rope', ['pi', 'ntk', 'yarn'])
@pytest.mark.parametrize('logit', ['', '+log', '+logit1.7'])
def test_every_variant_is_the_plain_model_at_s_1(tok, rope, logit):
    T, D, theta = 64, 16, 1e4
    sc = E.parse_variant(rope + logit)
    plain = M.rope_tables(T, D, theta, 'cpu')
    scaled = M.rope_tables(T, D, theta, 'cpu', dataclasses.replace(sc, s=1.0, T=T))
    assert all(torch.equal(a, b) for a, b in zip(plain, scaled))
    model = tiny_model(tok, nope_every=0, window=0)
    idx = torch.randint(tok.vocab_size, (2, 128))
    assert torch.equal(model(idx)[0], model(idx, scaling=dataclasses.replace(sc, s=1.0, T=128))[0])


def test_ntk_divides_the_lowest_frequency_by_exactly_s_and_keeps_the_highest():
    T, D, theta, s = 512, 64, 1e4, 8.0
    ang, scale = angles_of(T, D, theta, 'ntk', s)          # the lowest frequency never wraps here (< pi)
    plain = plain_angles(T, D, theta)
    assert torch.allclose(ang[1:, -1] / plain[1:, -1], torch.full((T - 1,), 1 / s, dtype=torch.float64), rtol=1e-5)
    inv_freq, mscale = M.scaled_frequencies(D, theta, M.LengthScaling('ntk', s=s, T=64), 'cpu')
    assert inv_freq[0] == 1.0 and mscale == 1.0
    base = theta * s ** (D / (D - 2))             # the base NTK-aware scaling defines
    direct = torch.arange(T, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    cos, sin = M.rope_tables(T, D, theta, 'cpu', M.LengthScaling('ntk', s=s, T=64))
    assert torch.allclose(cos.double(), torch.cos(direct), atol=1e-4) and torch.allclose(scale, torch.ones_like(scale))


def test_pi_angles_at_position_s_p_are_the_plain_angles_at_p():
    T, D, theta, s = 64, 16, 1e4, 4
    scaled = M.rope_tables(T * s, D, theta, 'cpu', M.LengthScaling('pi', s=float(s), T=T))
    plain = M.rope_tables(T, D, theta, 'cpu')
    for a, b in zip(scaled, plain):
        assert torch.allclose(a[::s], b, atol=1e-5)


def test_yarn_keeps_high_frequencies_interpolates_low_ones_ramps_between_and_scales_by_its_mscale():
    """T = 64, theta 1e4, D = 64: beta_fast = 32 rotations fall below index 0 and beta_slow = 1 at
    8.06, so the ramp runs over indices 0..9 (floor, ceil); mscale = 0.1 ln s + 1 on cos and sin."""
    T, D, theta, s = 64, 64, 1e4, 16.0
    dim = lambda rot: D * math.log(T / (rot * 2 * math.pi)) / (2 * math.log(theta))  # noqa: E731
    low, high = max(math.floor(dim(32)), 0), min(math.ceil(dim(1)), D - 1)
    assert (low, high) == (0, 9)
    inv_plain = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ramp = ((torch.arange(D // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    want = inv_plain / s * ramp + inv_plain * (1 - ramp)
    got, mscale = M.scaled_frequencies(D, theta, M.LengthScaling('yarn', s=s, T=T), 'cpu')
    assert torch.allclose(got.double(), want, rtol=1e-5)
    assert got[0] == pytest.approx(inv_plain[0].item(), rel=1e-6)                     # before the ramp: plain
    assert torch.allclose(got[high:].double(), inv_plain[high:] / s, rtol=1e-5)         # after it: 1/s of plain
    assert mscale == pytest.approx(0.1 * math.log(s) + 1)
    cos, sin = M.rope_tables(8, D, theta, 'cpu', M.LengthScaling('yarn', s=s, T=T))
    assert torch.allclose(cos[3].double(), mscale * torch.cos(3 * want), atol=1e-5)
    assert (0.1 * math.log(64) + 1) ** 2 == pytest.approx(2.005, abs=1e-3)            # the logit factor at 64x


@pytest.mark.parametrize('logit,factor', [(('log',), math.log(4 * 64) / math.log(64)), (('factor', 1.5), 1.5)])
def test_a_logit_scale_multiplies_the_attention_logits_of_rope_layers(logit, factor):
    """q.k after the scaled tables is the plain q.k times the factor, at every pair of positions."""
    T, D, s = 64 * 4, 16, 4.0
    q, k = torch.randn(1, 1, T, D, dtype=torch.float64), torch.randn(1, 1, T, D, dtype=torch.float64)
    plain = [t.double() for t in M.rope_tables(T, D, 1e4, 'cpu')]
    scaled = [t.double() for t in M.rope_tables(T, D, 1e4, 'cpu', M.LengthScaling('none', *logit, s=s, T=64))]
    logits = lambda cs: M.rope(q, *cs) @ M.rope(k, *cs).transpose(-1, -2)  # noqa: E731
    assert torch.allclose(logits(scaled), factor * logits(plain), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('name,parsed,flags', [
    ('yarn', ('yarn', 'none', 1.0), ('yarn', '')), ('ntk+log', ('ntk', 'log', 1.0), ('ntk', 'log')),
    ('pi', ('pi', 'none', 1.0), ('pi', '')), ('log', ('none', 'log', 1.0), ('none', 'log')),
    ('logit1.5', ('none', 'factor', 1.5), ('none', '1.5')), ('pi+logit2', ('pi', 'factor', 2.0), ('pi', '2.0')),
    ('logit1e06', ('none', 'factor', 1e6), ('none', '1e06')), ('yarn+logit1e-07', ('yarn', 'factor', 1e-7),
                                                                 ('yarn', '1e-07')),
    ('', ('none', 'none', 1.0), ('none', ''))])
def test_variant_names_round_trip(name, parsed, flags):
    """A name parses once into its LengthScaling (the logit factor a float), which names it again; the
    flags rope_scaling and logit_scale give the same name, and the record's logit_scale is the flag."""
    sc = E.parse_variant(name)
    assert (sc.rope, sc.logit, sc.factor) == parsed and isinstance(sc.factor, float)
    assert E.variant_name(sc) == name and E.check_variant(*flags) == name
    assert E.logit_scale_of(sc) == {'2.0': '2'}.get(flags[1], flags[1])


@pytest.mark.parametrize('flag', ['1000000', '1e6', '0.0000001', '123456789012'])
def test_a_logit_factor_of_any_size_names_a_variant_that_parses_back(flag):
    """`--logit_scale=1000000` was named 'logit1e+06' (%g) and split at its '+': a traceback. A factor's name
    has no '+', and parses back to the factor."""
    name = E.check_variant('none', flag)
    assert '+' not in name and E.parse_variant(name).factor == pytest.approx(float(flag), rel=1e-5)
    assert E.parse_variant(E.check_variant('yarn', flag)).rope == 'yarn'


@pytest.mark.parametrize('name', ['ntk+yarn', 'bogus', 'log+log', 'logitx', 'logit-1'])
def test_a_bad_variant_name_is_refused_naming_the_parts(name):
    with pytest.raises(ValueError, match="at most one of pi, ntk, yarn"):
        E.parse_variant(name)


def test_a_variant_writes_its_own_record_beside_the_plain_one(tok, tmp_path, capsys):
    """eval_lengths.py --rope_scaling=yarn --logit_scale=log: eval_lengths_yarn+log.json, naming its
    variant, each accuracy what evaluate() gives under it; the plain record is not touched, and at 1x
    the variant equals the plain eval."""
    run = str(tmp_path / 'r')
    save_tiny_run(run, tok, nope_every=0, window=0, config={'tasks': 'niah_single'})
    args = [f'--out_dirs={run}', '--multiples=1,4', '--eval_samples=4', '--plot=False']
    assert main_here(*args) is None
    before = open(os.path.join(run, 'eval_lengths.json'), 'rb').read()
    assert main_here(*args, '--rope_scaling=yarn', '--logit_scale=log') is None
    assert open(os.path.join(run, 'eval_lengths.json'), 'rb').read() == before
    rec = json.load(open(os.path.join(run, 'eval_lengths_yarn+log.json')))
    assert (rec['variant'], rec['rope_scaling'], rec['logit_scale']) == ('yarn+log', 'yarn', 'log')
    assert rec['scale'] == 's = L / block_size at each length'
    model = E.load_run(run, 'cpu')[0]
    for m in (1, 4):
        want = E.evaluate(model, tok, 'niah_single', 128 * m, 4, 8, 'cpu', variant='yarn+log')
        assert rec['length_eval']['niah_single'][f'{m}x'] == want
    assert rec['length_eval']['niah_single']['1x'] == json.loads(before)['length_eval']['niah_single']['1x']
    out = capsys.readouterr().out
    assert 'eval variant yarn+log' in out and 'replacing' not in out       # two files, neither written before


@pytest.mark.parametrize('args,words', [
    (['--eval_samples=0'], ['eval_samples']),
    (['--eval_samples=-2'], ['eval_samples']),
    (['--eval_batch_size=0'], ['eval_batch_size']),
    (['--tasks='], ['tasks', 'tasks=trained']),
    (['--tasks=niah_singel'], ['niah_singel']),
    (['--tasks=niah_single:2'], ['has a weight']),
    (['--multiples=1,x'], ['multiples', 'integers']),
    (['--num_sampels=3'], ['eval_samples']),
    (['--num_samples=3'], ['eval_samples']),            # the old spellings name the new keys
    (['--out_dir=out/vpad'], ['out_dirs']),
    (['--device=bogus'], ['device']),
    (['--device=cuda'], ['device', 'no CUDA']),
    (['NO_TOKENIZER'], ['tokenizer.json', 'train.py']),
    (['--out_dirs='], ['out_dirs']),
    (['--out_dirs=MISSING'], ['no checkpoint']),
    (['CORRUPT'], ['not a readable']),
    (['--eval_samples=100000000'], ['eval_samples=100,000,000', 'GiB', 'nothing was written']),
    (['--rope_scaling=ntk2'], ['rope_scaling', 'yarn']),
    (['--logit_scale=hot'], ['logit_scale', "'log'"]),
    (['--rope_scaling=ntk'], ['no RoPE layer', 'evaluate it plain']),     # tiny_model's NoPE-only variant below
    (['--ssm_scaling=decay'], ['no Mamba2 layer', "ssm_scaling='decay' rescales", 'evaluate it plain']),
    (['--ssm_scaling=delta'], ['ssm_scaling', 'decay']),
    (['--ssm_scaling=dt', '--ssm_scale=fast'], ['ssm_scale', 'auto_layers']),
    (['--ssm_scale=0.5'], ["ssm_scale='0.5'", 'needs ssm_scaling=dt or decay']),   # not dropped without a word
    (['--pair_distance=3'], ['pair_distance=3', 'mqar']),
    (['--pair_distance=3', '--tasks=trained'], ['pair_distance=3', 'add --tasks=mqar']),
    (['--pair_distance=100000', '--tasks=mqar', '--multiples=1,2'], ['pair_distance=100000', 'needs', 'longest']),
])
def test_bad_input_is_one_line_and_writes_nothing(tok, tmp_path, args, words):
    if '--device=cuda' in args and torch.cuda.is_available():
        pytest.skip('this machine has a GPU')
    run_dir = str(tmp_path / 'r')
    save_tiny_run(run_dir, tok, **({'nope_every': 1} if args == ['--rope_scaling=ntk'] else {}))
    if args == ['NO_TOKENIZER']:
        os.remove(os.path.join(run_dir, 'tokenizer.json'))
        args = []
    if args == ['CORRUPT']:
        open(os.path.join(run_dir, 'ckpt.pt'), 'wb').write(b'not a checkpoint')
        args = []
    args = [a.replace('MISSING', str(tmp_path / 'none')) for a in args]
    if not any(a.startswith('--out_dirs') for a in args):
        args.append(f'--out_dirs={run_dir}')
    before = sorted(os.listdir(run_dir))
    if not any(a.startswith('--tasks') for a in args):
        args.append('--tasks=niah_single')
    msg = main_here(*args)
    assert msg and all(w in msg for w in words), msg
    assert sorted(os.listdir(run_dir)) == before


@pytest.mark.parametrize('key,value,other', [('rope_scaling', 'yarn', 'logit_scale'),
                                             ('logit_scale', '1.5', 'rope_scaling')])
def test_a_variant_of_a_model_without_rope_is_refused_naming_only_the_key_given(tok, tmp_path, key, value, other):
    run_dir = str(tmp_path / 'r')
    save_tiny_run(run_dir, tok, nope_every=1)
    msg = main_here(f'--out_dirs={run_dir}', '--tasks=niah_single', f'--{key}={value}')
    assert "no RoPE layer" in msg and f"{key}={value!r} rescales" in msg and other not in msg, msg


def test_a_refusal_is_one_line_on_stderr_of_the_script(tmp_path):
    """The one subprocess case: what Python prints of the refusal is the line alone, no traceback."""
    out = subprocess.run([sys.executable, 'eval_lengths.py', f'--out_dirs={tmp_path / "none"}'], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and 'Traceback' not in out.stderr, out.stderr
    line, = out.stderr.strip().splitlines()
    assert 'no checkpoint' in line and 'python train.py' in line


def test_a_bad_run_among_several_stops_them_all_before_any_is_evaluated(tok, tmp_path):
    """The second run's tokenizer.json is corrupt: refused before the first is evaluated (none of its
    work is lost); the advice, a copy of the tokenizer from the run's data_dir, works."""
    data, a, b = tmp_path / 'data', str(tmp_path / 'a'), str(tmp_path / 'b')
    data.mkdir()
    tok.save(str(data / 'tokenizer.json'))
    save_tiny_run(a, tok)
    save_tiny_run(b, tok, config={'data_dir': str(data)})
    with open(os.path.join(b, 'tokenizer.json'), 'w') as f:
        f.write('{"format": "lengthgen-tok')
    args = [f'--out_dirs={a},{b}', '--tasks=niah_single', '--multiples=1', '--eval_samples=2', '--plot=False']
    msg = main_here(*args)
    assert f'{b}/tokenizer.json is corrupt' in msg and not os.path.exists(os.path.join(a, 'eval_lengths.json')), msg
    shutil.copy(*msg.split(': cp ')[1].split())
    assert main_here(*args) is None
    assert 'is a file, not a run dir' in main_here(f'--out_dirs={data}/tokenizer.json', *args[1:])
    assert all(os.path.exists(os.path.join(r, 'eval_lengths.json')) for r in (a, b))


@pytest.fixture
def read_only(tmp_path):
    """-> (an empty folder, a function that makes it read-only): a tmpfs remounted read-only when the
    tests run as root (root writes through permissions), else chmod."""
    folder, root = tmp_path / 'ro', os.geteuid() == 0
    folder.mkdir()
    if root and subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', str(folder)],
                               capture_output=True).returncode:
        pytest.skip('cannot mount a tmpfs here')

    def make_read_only():
        if root:
            subprocess.run(['mount', '-o', 'remount,ro', str(folder)], check=True)
        else:
            for d, _, _ in os.walk(folder):
                os.chmod(d, 0o555)
    yield folder, make_read_only
    if root:
        subprocess.run(['umount', str(folder)], capture_output=True)
    else:
        for d, _, _ in os.walk(folder):
            os.chmod(d, 0o755)


def test_a_read_only_run_dir_is_refused_before_any_work(tok, read_only, tmp_path):
    """eval_lengths.py finds that it cannot write its result before it evaluates anything, and its
    advice (evaluate a copy) works; train.py refuses a read-only out_dir before writing anything."""
    folder, make_read_only = read_only
    run = str(folder / 'run')
    save_tiny_run(run, tok)
    make_read_only()
    args = ['--tasks=niah_single', '--multiples=1', '--eval_samples=2', '--plot=False']
    msg = main_here(f'--out_dirs={run}', *args)
    assert (msg.startswith(f'cannot write eval_lengths.json to {run}/eval_lengths.json: ')
            and 'nothing was evaluated' in msg)
    assert 'read-only file system' in msg or 'permission denied' in msg, msg
    copy = shutil.copytree(run, tmp_path / 'copy')
    assert main_here(f'--out_dirs={copy}', *args) is None and os.path.exists(os.path.join(copy, 'eval_lengths.json'))
    out = subprocess.run([sys.executable, 'train.py', 'config/vpad.py', f'--out_dir={folder}/new',
                          f'--data_dir={tmp_path}/data'], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and 'Traceback' not in out.stderr, out.stderr
    assert out.stderr.strip().startswith(f'cannot write the lock file to {folder}/new/owner.lock: ')
    assert not os.path.exists(f'{tmp_path}/data')


class Lookup(torch.nn.Module):
    """A planted mqar model. read_key=True: at each answer position, find where the current token
    (the asked key) first occurs and predict the token after it, which is how a trained model
    retrieves; read_key=False: predict the value of the first pair whatever is asked."""
    def __init__(self, tok, read_key):
        super().__init__()
        self.config = GPTConfig(vocab_size=tok.vocab_size, n_layer=1, n_embd=32, n_head=2, short_conv=0, nope_every=0)
        self.vocab, self.read_key = tok.vocab_size, read_key

    def forward(self, idx, targets, scaling=None, states=None):
        pred = torch.zeros_like(targets)
        for b, t in (targets != -1).nonzero().tolist():
            seq = idx[b, :t + 1].tolist()
            src = seq.index(seq[t]) if self.read_key else 0
            pred[b, t] = idx[b, src + 1] if src < t else 0
        return torch.nn.functional.one_hot(pred[targets != -1], self.vocab).float(), None, None


def test_mqar_needs_the_key(tok):
    """With every asked key swapped for one absent from the prompt (eval_lengths.with_absent_keys),
    a model that retrieves by key falls from 1.0 to nothing, and one that ignores the key scores
    chance (1 / MQAR_PAIRS) either way: mqar accuracy measures retrieval by key."""
    reader, ignorer = Lookup(tok, read_key=True), Lookup(tok, read_key=False)
    chance = 1 / sample_data.MQAR_PAIRS
    for length in (128, 512):
        assert E.evaluate(reader, tok, 'mqar', length, 40, 8, 'cpu') == 1.0
        assert E.evaluate(reader, tok, 'mqar', length, 40, 8, 'cpu', absent_key=True) == 0.0
        for absent in (False, True):
            assert abs(E.evaluate(ignorer, tok, 'mqar', length, 40, 8, 'cpu', absent_key=absent) - chance) < 0.06


def test_mqar_haystack_needs_the_key_and_each_eval_reads_the_runs_distractors(tok, tmp_path, capsys):
    """On mqar_haystack the key reader still scores 1.0 (each asked key occurs once before its
    query) and nothing without the key; eval_lengths.py evaluates a run on the share of distractor
    lines its corpus had (the run's config), and says so in its record."""
    reader = Lookup(tok, read_key=True)
    for q in (0.0, 0.3):
        assert E.evaluate(reader, tok, 'mqar_haystack', 512, 20, 8, 'cpu', distractors=q) == 1.0
        assert E.evaluate(reader, tok, 'mqar_haystack', 512, 20, 8, 'cpu', absent_key=True, distractors=q) == 0.0
    run = str(tmp_path / 'h')
    save_tiny_run(run, tok, config={'tasks': 'mqar_haystack', 'distractors': 0.3})
    assert main_here(f'--out_dirs={run}', '--multiples=2', '--eval_samples=4', '--eval_batch_size=4') is None
    res = json.load(open(os.path.join(run, 'eval_lengths.json')))
    model = E.load_run(run, 'cpu')[0]
    assert res['distractors'] == 0.3 and res['length_eval']['mqar_haystack']['2x'] == E.evaluate(
        model, tok, 'mqar_haystack', 256, 4, 4, 'cpu', distractors=0.3)
    examples = [sample_data.eval_examples('mqar_haystack', tok, 256, 4, distractors=q)[0].prompt for q in (0.0, 0.3)]
    assert examples[0] != examples[1]        # so the record's accuracy is of the run's own haystack


def test_an_eval_on_a_gpu_keeps_the_precision_the_run_trained_in(tok, monkeypatch):
    """bf16 autocast for a run trained under it ('bfloat16', or 'auto' on a GPU with bf16), full
    precision for a float32 run and for any eval on a CPU (score() itself sets no autocast: train.py's
    quick eval runs under the run's own)."""
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda *a, **k: True)
    assert E.bf16_on_gpu('cuda', 'bfloat16') and E.bf16_on_gpu('cuda:1', 'auto')
    assert (not E.bf16_on_gpu('cuda', 'float32') and not E.bf16_on_gpu('cpu', 'bfloat16')
            and not E.bf16_on_gpu('cpu', 'auto'))
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda *a, **k: False)
    assert not E.bf16_on_gpu('cuda', 'auto') and E.bf16_on_gpu('cuda', 'bfloat16')
    seen = []

    class Recorder(torch.nn.Module):                 # what score() runs the model under
        def forward(self, idx, targets, scaling=None, states=None):
            seen.append(torch.is_autocast_enabled('cpu'))
            return torch.zeros(int((targets != -1).sum()), tok.vocab_size), None, None
    examples = E.sample_data.eval_examples('mqar', tok, 64, 2, seed=0)
    E.score(Recorder(), examples, 'cpu')
    with torch.autocast('cpu', dtype=torch.bfloat16):
        E.score(Recorder(), examples, 'cpu')
    assert seen == [False, True]                     # the caller's precision, not one of its own


@pytest.mark.parametrize('sig, code', [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_mid_eval_is_one_line_saying_what_was_written(tok, tmp_path, sig, code):
    """eval_lengths.py interrupted while it scores: exit 128 + the signal, one line on stderr (how many
    runs were written and the command that reruns it), no traceback."""
    run_dir = str(tmp_path / 'r')
    save_tiny_run(run_dir, tok)
    proc = subprocess.Popen([sys.executable, 'eval_lengths.py', f'--out_dirs={run_dir}', '--tasks=niah_single',
                             '--multiples=1,2,4,8,16,32', '--eval_samples=64', '--plot=False'], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:                 # the model summary: past the imports, in the eval
        if 'parameters' in line:
            break
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code and 'Traceback' not in err, err
    line, = [x for x in err.strip().splitlines() if x.strip() and '%|' not in x]
    assert 'stopped: 0 of 1 run(s) evaluated and written; rerun: python eval_lengths.py' in line
    assert not os.path.exists(os.path.join(run_dir, 'eval_lengths.json'))


def test_a_run_still_training_is_refused_and_nothing_is_written_into_it(tok, tmp_path):
    """eval_lengths.py on a run dir that a live process owns (train.py holds its lock while it trains) once
    wrote its eval into that dir without a word: refused in one line naming the owner; after it ends, fine."""
    from base import rundir
    run_dir = str(tmp_path / 'r')
    save_tiny_run(run_dir, tok)
    args = [f'--out_dirs={run_dir}', '--tasks=niah_single', '--multiples=1', '--eval_samples=2', '--plot=False']
    owner = subprocess.Popen([sys.executable, '-c', f"from base import rundir; import sys, time; "
                              f"rundir.DirLock({run_dir!r}); print('locked', flush=True); time.sleep(60)"],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline() == 'locked\n'
        msg = main_here(*args)
        assert f"{run_dir} is being trained by process {owner.pid}" in msg and 'nothing was written' in msg, msg
        assert not os.path.exists(os.path.join(run_dir, rundir.LENGTH_EVAL))
    finally:
        owner.kill()
        owner.wait()
    assert main_here(*args) is None and os.path.exists(os.path.join(run_dir, rundir.LENGTH_EVAL))


def test_small_sizes_are_said_in_mib():
    from base import rundir
    assert [rundir.size_text(n) for n in (3 * 2**20 // 2, 2**30 - 1, 2**30, 5 * 2**30)] == \
        ['1.5 MiB', '1024.0 MiB', '1.0 GiB', '5.0 GiB']


def test_the_recent_layout_writes_its_own_record_and_is_for_mqar_alone(tok, tmp_path):
    """--pair_distance=d evaluates mqar with the pairs d tokens before the question, into
    eval_lengths_pairs<d>.json beside the plain record, whose examples it does not change; with another
    task it is refused in one line."""
    run_dir = str(tmp_path / 'r')
    save_tiny_run(run_dir, tok)
    args = [f'--out_dirs={run_dir}', '--tasks=mqar', '--multiples=1,2', '--eval_samples=4', '--plot=False']
    assert main_here(*args, '--pair_distance=5') is None
    rec = json.load(open(os.path.join(run_dir, 'eval_lengths_pairs5.json')))
    assert rec['pair_distance'] == 5 and set(rec['length_eval']['mqar']) == {'1x', '2x'}
    assert not os.path.exists(os.path.join(run_dir, 'eval_lengths.json'))
    model = E.load_run(run_dir, 'cpu')[0]
    assert rec['length_eval']['mqar']['2x'] == E.evaluate(model, tok, 'mqar', 256, 4, 8, 'cpu', pair_distance=5)
    assert 'pair_distance=5' in main_here(*args[:1], '--tasks=niah_single', '--pair_distance=5')
    assert 'pair_distance=-2' in main_here(*args, '--pair_distance=-2')


def test_absent_key_probe_swaps_only_the_asked_keys(tok):
    """The probe keeps the definitions (the pairs, the needle) and the gold answer, and asks for
    keys that the prompt never mentions. A model that ignores the key (here: answer with the value
    of the pair that the query's position points at, or niah_single's only number) is unaffected on
    niah_single and at chance (1/8) on mqar with and without the probe: only mqar needs the key."""
    for task in E.PROBED_TASKS:
        plain = sample_data.eval_examples(task, tok, 300, 20)
        rng = random.Random(0)
        probed = [E.with_absent_keys(ex, tok, rng) for ex in plain]
        for a, b in zip(plain, probed):
            assert b.values == a.values and len(b.prompt) == len(a.prompt) and len(b.answer) == len(a.answer)
            for key in a.keys:
                assert tok.decode(b.prompt + b.answer).count(key) == 1         # only where it is defined
            assert b.prompt[:2 * sample_data.MQAR_PAIRS] == a.prompt[:2 * sample_data.MQAR_PAIRS]
    with pytest.raises(ValueError, match="absent-key probe"):
        E.with_absent_keys(sample_data.eval_examples("vt", tok, 300, 1)[0], tok, random.Random(0))


def test_the_absent_key_probe_leaves_no_asked_key_in_a_haystack(tok):
    """The probe's keys are absent from the whole prompt, distractors included: each occurs only
    where it is asked (the question, and the answer's later query)."""
    for length in (64, 4096):
        plain, rng = sample_data.eval_examples("mqar_haystack", tok, length, 10, distractors=0.3), random.Random(0)
        for ex, probe in zip(plain, [E.with_absent_keys(ex, tok, rng) for ex in plain]):
            new = [tok.encode(" " + k)[0] for k in sample_data.MQAR_KEYS if tok.encode(" " + k)[0] not in ex.prompt]
            asked = [probe.prompt[-1], probe.answer[1]]
            assert all(k in new for k in asked) and probe.prompt[:-1].count(asked[0]) == 0
            assert asked[1] not in probe.prompt and len(probe.prompt) == len(ex.prompt)


# -----------------------------------------------------------------------------
# a recurrent model streamed to long lengths, and Mamba2's inference-time scaling calibrated per length

@pytest.mark.parametrize('length', [128, 150])
def test_streamed_scoring_equals_one_pass(tok, length, monkeypatch):
    """An all-Mamba2 model scored in segments of 32 tokens (the states carried) marks the same answer tokens right
    as one pass, at a length that is (128) and is not (150) a multiple of the segment, plain and rescaled."""
    monkeypatch.setattr(kernels, 'USE_COMPILE', False)
    model = tiny_model(tok, block_pattern='M', chunk_size=16)
    examples = sample_data.eval_examples('mqar', tok, length, 6, seed=3)
    for scaling in (None, M.LengthScaling(ssm='decay', ssm_scales=(0.5, 0.25))):
        assert E.score(model, examples, 'cpu', scaling, segment=32) == E.score(model, examples, 'cpu', scaling,
                                                                               segment=10 ** 6)


class ScaleOracle(torch.nn.Module):
    """A two-layer Mamba2 stand-in whose answers are right on a share good(scales) of the examples (those whose
    tokens sum to less than that share of 1000, mod 1000): a model whose best Mamba2 scale is known. It records
    every example it reads, and each scale it is asked under."""
    def __init__(self, tok, good):
        super().__init__()
        self.config = GPTConfig(vocab_size=tok.vocab_size, n_layer=2, n_embd=32, block_pattern='M')
        self.blocks = [types.SimpleNamespace(kind='M')] * 2
        self.vocab, self.good, self.seen, self.asked = tok.vocab_size, good, set(), []

    def forward(self, idx, targets, scaling=None, states=None):
        scales = tuple(scaling.ssm_scales) if scaling is not None else (1.0, 1.0)
        scales = scales * 2 if len(scales) == 1 else scales
        if not self.asked or self.asked[-1] != scales:
            self.asked.append(scales)
        pred = targets.clone()
        for b in range(idx.shape[0]):
            self.seen.add(tuple(idx[b].tolist()))
            if int(idx[b].sum()) % 1000 >= 1000 * self.good(scales):
                pred[b][targets[b] != -1] = (targets[b][targets[b] != -1] + 1) % self.vocab
        return torch.nn.functional.one_hot(pred[targets != -1], self.vocab).float(), None, None


def test_calibration_takes_the_best_scale_trying_from_one_outward_and_stops_at_a_perfect_score(tok):
    model = ScaleOracle(tok, lambda s: {0.25: 1.0, 0.5: 0.5, 0.125: 0.5}.get(s[0], 0.0))
    scales, acc, tried = E.calibrate(model, tok, 'mqar', 256, 'decay', 10, 8, 'cpu')
    assert scales == (0.25, 0.25) and acc == 1.0
    assert model.asked == [(1.0, 1.0), (0.5, 0.5), (2.0, 2.0), (0.25, 0.25)] == [s for s, _ in tried]
    assert [a for _, a in tried][-1] == 1.0 and 0 < [a for _, a in tried][1] < 1


def test_calibration_ties_go_to_the_scale_nearest_one(tok):
    model = ScaleOracle(tok, lambda s: 0.5 if s[0] in (0.25, 4.0, 1 / 16) else 0.0)
    scales, acc, _ = E.calibrate(model, tok, 'mqar', 256, 'decay', 10, 8, 'cpu')
    assert scales == (0.25, 0.25) and 0 < acc < 1
    assert set(model.asked) == {(s, s) for s in E.SSM_GRIDS['decay']}   # no perfect score: every candidate tried


def test_calibration_per_layer_searches_each_layer_in_turn_from_the_shared_best(tok):
    """'decay_layers': the shared best first (0.5 and 0.125 tie at 0.5; 0.5 is nearer 1), then layer 0 with
    layer 1 held, then layer 1: (0.5, 0.125), which no shared scale reaches."""
    model = ScaleOracle(tok, lambda s: 0.5 * (s[0] == 0.5) + 0.5 * (s[1] == 0.125))
    scales, acc, _ = E.calibrate(model, tok, 'mqar', 256, 'decay_layers', 10, 8, 'cpu')
    assert scales == (0.5, 0.125) and acc == 1.0


def test_no_calibration_example_is_an_evaluation_example(tok, monkeypatch):
    """Calibration reads examples of its own stream only, none of them one the evaluation scores; where a
    stream gave nothing else (here forced: the evaluation's own examples) it refuses rather than calibrate on
    them."""
    model = ScaleOracle(tok, lambda s: 1.0)
    for length in (64, 512):
        E.calibrate(model, tok, 'mqar', length, 'decay', 100, 8, 'cpu')
        evaluated = {tuple((ex.prompt + ex.answer)[:-1]) for ex in sample_data.eval_examples('mqar', tok, length, 100)}
        assert len(model.seen) >= E.CALIBRATION_EXAMPLES and not model.seen & evaluated
        model.seen.clear()
    draw = sample_data.eval_examples
    monkeypatch.setattr(sample_data, 'eval_examples', lambda *a, stream='eval', **k: draw(*a, **k))
    with pytest.raises(ValueError, match="no calibration example"):
        E.calibrate(model, tok, 'mqar', 64, 'decay', 100, 8, 'cpu')


def test_a_calibrated_variant_records_its_scales_and_is_deterministic(tok, tmp_path, monkeypatch, capsys):
    """eval_lengths.py --ssm_scaling=decay on a Mamba2 run: eval_lengths_decay.json names the variant and, per
    point, the scales calibration chose (printed under the table too); each accuracy is evaluate()'s under those
    scales; a second run writes the same numbers."""
    monkeypatch.setattr(kernels, 'USE_COMPILE', False)
    run = str(tmp_path / 'r')
    save_tiny_run(run, tok, block_pattern='M', chunk_size=16, config={'tasks': 'mqar'})
    args = (f'--out_dirs={run}', '--multiples=1,2', '--eval_samples=4', '--ssm_scaling=decay', '--plot=False')
    assert main_here(*args) is None
    rec = json.load(open(os.path.join(run, 'eval_lengths_decay.json')))
    assert (rec['variant'], rec['ssm_scaling'], rec['ssm_scale']) == ('decay', 'decay', 'auto')
    assert 'scale' not in rec           # RoPE's s = L / T: no part of an SSM variant
    printed = capsys.readouterr().out.splitlines()[-1]
    assert printed == f"{run} mqar: s chosen on calibration examples: " + ', '.join(
        f"{m} {E.scales_text(c['scales'])}" for m, c in rec['calibrated']['mqar'].items())
    model = E.load_run(run, 'cpu')[0]
    for m in ('1x', '2x'):
        chosen = rec['calibrated']['mqar'][m]['scales']
        assert len(chosen) == 2 and all(s in E.SSM_GRIDS['decay'] for s in chosen)
        assert rec['length_eval']['mqar'][m] == E.evaluate(model, tok, 'mqar', 128 * int(m[:-1]), 4, 8, 'cpu',
                                                           variant='decay', scales=chosen)
    assert main_here(*args) is None
    assert f"{os.path.join(run, 'eval_lengths_decay.json')}: replacing the earlier eval there" in capsys.readouterr().out
    again = json.load(open(os.path.join(run, 'eval_lengths_decay.json')))
    assert (again['length_eval'], again['calibrated']) == (rec['length_eval'], rec['calibrated'])


@pytest.mark.parametrize('name,ssm,scales,flags', [
    ('decay', 'decay', (), ('none', '', 'decay', 'auto')), ('dt_layers', 'dt', (), ('none', '', 'dt', 'auto_layers')),
    ('dt0.5', 'dt', (0.5,), ('none', '', 'dt', '0.5')), ('yarn+decay2', 'decay', (2.0,), ('yarn', '', 'decay', '2'))])
def test_mamba2_variant_names_round_trip(name, ssm, scales, flags):
    sc = E.parse_variant(name)
    assert (sc.ssm, sc.ssm_scales) == (ssm, scales) and E.check_variant(*flags) == name
    assert E.calibration(name) == ('' if scales else flags[3])


def test_a_calibrated_s_prints_once_where_every_layer_shares_it():
    assert (E.scales_text([0.25, 0.25]), E.scales_text([0.25, 1.0]), E.scales_text([1 / 32])) == \
        ('0.25', '(0.25, 1)', '0.03125')
