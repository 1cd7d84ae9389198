import contextlib
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from base import kernels
import model as M
from tools.bench import saved_for_backward_bytes   # the measure of tools/bench.py's saved-memory section
from model import GPT, SITES, CompiledOrEager, GPTConfig, ssd_scan, ssd_scan_sequential, vpad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny(**kw):
    cfg = dict(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, d_state=8, headdim=16, chunk_size=8,
               short_conv=0, nope_every=0, dropout=0.0, dropout_site='none')
    cfg.update(kw)
    return GPTConfig(**cfg)


@pytest.fixture
def eager():
    with kernels.eager():
        yield


def ssd_scan_fast(*args, **kw):
    """model.ssd_scan through base/kernels.py's fast path, as the mixer runs it."""
    return ssd_scan(*args, **kw, fast=True)


def shifted_normal(n, c, seed=0):
    g = torch.Generator().manual_seed(seed)
    mean = 2.0 * torch.randn(c, generator=g)           # non-zero coordinate means
    sd = 0.5 + torch.rand(c, generator=g)
    return mean + sd * torch.randn(n, c, generator=g)


# ----------------------------------------------------------------------------- VPAD

def test_vpad_preserves_coordinate_mean_and_variance(eager):
    p, n = 0.3, 40000
    x = shifted_normal(n, 16)
    torch.manual_seed(1)
    y = vpad(x, p)
    # standard errors of a sample mean and a sample variance, times 5
    se_mean = 5 * x.std(0) / math.sqrt(n)
    assert ((y.mean(0) - x.mean(0)).abs() < se_mean).all()
    assert ((y.var(0) / x.var(0) - 1).abs() < 5 * math.sqrt(2 / n) * 2).all()
    # inverted dropout keeps the mean but not the variance: adds p/(1-p) E[x^2]
    torch.manual_seed(1)
    d = M.inverted_dropout(x, p)
    expected = x.var(0) + p / (1 - p) * x.pow(2).mean(0)
    assert ((d.var(0) / expected - 1).abs() < 0.05).all()
    assert (d.var(0) / x.var(0)).mean() > 2


@pytest.mark.parametrize('op', [vpad, M.inverted_dropout])
def test_fast_dropout_equals_its_readable_definition(op, eager):
    """The fused kernel (fast=True) and the readable code beside it, given the same mask (the same seed):
    the same output and the same gradient, to float rounding (the kernel multiplies by 1/sqrt(1-p) where the
    definition divides by sqrt(1-p))."""
    x = shifted_normal(2000, 16).requires_grad_()
    outs = []
    for fast in (False, True):
        torch.manual_seed(1)
        y = op(x, 0.3, fast)
        outs.append((y, *torch.autograd.grad((y * y).sum(), x)))
    for ref, got in zip(*outs):
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)


def test_vpad_drops_to_the_mean_and_rescales_what_it_keeps(eager):
    """A dropped element is exactly mu, a kept one is mu + (x - mu) / sqrt(1 - p), and the dropped
    fraction is p, fast and readable alike."""
    p, n = 0.3, 40000
    x = shifted_normal(n, 16)
    mu = x.mean(0)
    for fast in (False, True):
        torch.manual_seed(1)
        y = vpad(x, p, fast)
        dropped = (y - mu).abs() < 1e-6
        kept = ((y - mu) - (x - mu) / math.sqrt(1 - p)).abs() < 1e-4
        assert (dropped | kept).all()
        assert abs(dropped.float().mean().item() - p) < 0.01


def test_vpad_identity_in_eval_and_at_p0(eager):
    x = shifted_normal(100, 8)
    assert vpad(x, 0.0) is x
    drop = M.Dropout(0.5, affine=True, fast=True).eval()
    assert torch.equal(drop(x), x)
    drop.train()
    assert not torch.equal(drop(x), x)


def test_vpad_gradient_is_mask_over_sqrt_keep(eager):
    p = 0.25
    x = shifted_normal(512, 32).requires_grad_()
    torch.manual_seed(0)
    y = vpad(x, p, fast=True)
    y.backward(torch.ones_like(y))
    torch.manual_seed(0)
    r, threshold, p_eff = M.draw_mask(x, p)
    keep = r >= threshold
    assert torch.equal(x.grad, keep / math.sqrt(1 - p_eff))
    mu = x.detach().mean(0)
    dropped = ~keep
    assert torch.allclose(y.detach()[dropped], mu.expand_as(x)[dropped])  # a dropped element is the mean
    assert abs(dropped.float().mean().item() - p) < 0.02


def test_vpad_compiled_equals_eager():
    x = shifted_normal(4 * 64, 48).view(4, 64, 48).requires_grad_()
    outs = []
    for run in (kernels.eager, contextlib.nullcontext):
        with run():
            torch.manual_seed(3)
            y = vpad(x, 0.2, fast=True)
            (g,) = torch.autograd.grad((y * y).sum(), x)
        outs.append((y.detach(), g))
    assert ran_compiled(kernels.vpad_kernel), "the compiled kernel was not used"
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-6, atol=1e-6)


def test_vpad_pre_activation_variance_mismatch_far_below_inverted_dropout(eager):
    p, n = 0.2, 20000
    x = shifted_normal(n, 64, seed=1)
    W = torch.randn(32, 64, generator=torch.Generator().manual_seed(2)) / 8
    var_eval = (x @ W.T).var(0)
    torch.manual_seed(0)
    mismatch = {}
    for name, op in (('vpad', vpad), ('inverted', M.inverted_dropout)):
        var_train = (op(x, p) @ W.T).var(0)
        mismatch[name] = (var_train / var_eval - 1).abs().mean().item()
    assert mismatch['inverted'] > 1.0          # big: the means are non-zero
    assert mismatch['vpad'] < mismatch['inverted'] / 20


# ----------------------------------------------------------------------------- selective scan

def random_scan_inputs(b, t, h, p, n, dtype, seed=0, groups=None):
    """groups: how many B, C the heads share (default h: one per head; the Mamba2 mixer uses 1)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, h, p, generator=g, dtype=dtype)
    dt = F.softplus(torch.randn(b, t, h, generator=g, dtype=dtype) - 1)
    A = -torch.empty(h, dtype=dtype).uniform_(1, 16, generator=g)
    B = torch.randn(b, t, groups or h, n, generator=g, dtype=dtype)
    C = torch.randn(b, t, groups or h, n, generator=g, dtype=dtype)
    return x, dt, A, B, C


SCANS = [ssd_scan, ssd_scan_fast]      # the chunked algorithm as written to be read, and as the mixer runs it


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("t", [1, 37, 100])
def test_ssd_scan_matches_sequential_loop_float64(t, scan):
    args = random_scan_inputs(2, t, 3, 4, 5, torch.float64)
    y_ref, s_ref = ssd_scan_sequential(*args)
    y, s = scan(*args, chunk_size=16)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s, s_ref, rtol=1e-10, atol=1e-10)
    assert y.dtype == torch.float64


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("groups", [1, 2])
def test_ssd_scan_with_shared_B_C_matches_sequential_loop_float64(groups, scan):
    # 4 heads reading `groups` B, C: head i reads group i // (4 / groups); t = 37 leaves a padded tail
    args = random_scan_inputs(2, 37, 4, 3, 5, torch.float64, groups=groups)
    y_ref, s_ref = ssd_scan_sequential(*args)
    y, s = scan(*args, chunk_size=16)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s, s_ref, rtol=1e-10, atol=1e-10)


def weighted_loss(t, h, p, n):
    """A loss that reads y (b=2, t, h, p) and the final state (2, h, p, n) with fixed random weights."""
    g = torch.Generator().manual_seed(1)
    wy, ws = (torch.randn(2, t, h, p, generator=g, dtype=torch.float64),
              torch.randn(2, h, p, n, generator=g, dtype=torch.float64))
    return lambda y, s: (y * wy).sum() + (s * ws).sum()


@pytest.mark.parametrize("groups", [1, 4])
def test_ssd_scan_written_out_backward_equals_autograd_of_sequential_loop_float64(groups):
    # the reference is autograd through the plain loop
    args = [a.requires_grad_() for a in random_scan_inputs(2, 29, 4, 3, 5, torch.float64, groups=groups)]
    loss = weighted_loss(29, 4, 3, 5)
    g_ref = torch.autograd.grad(loss(*ssd_scan_sequential(*args)), args)
    g_ssd = torch.autograd.grad(loss(*ssd_scan_fast(*args, chunk_size=8)), args)
    for name, a, b in zip('x dt A B C'.split(), g_ssd, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)


@pytest.mark.parametrize("groups", [1, 2])
def test_fast_scan_equals_the_readable_chunked_scan_float64(groups):
    """ssd_scan's fast path, kernels.ssd_scan_fast (no scan inside a chunk, a written-out backward), against
    its readable steps, the same algorithm in plain tensor ops with autograd's backward: the outputs, the final state and
    the gradients of every input, t = 37 over chunks of 8 (a padded tail)."""
    args = [a.requires_grad_() for a in random_scan_inputs(2, 37, 4, 3, 5, torch.float64, groups=groups)]
    loss = weighted_loss(37, 4, 3, 5)
    (y_ref, s_ref), (y, s) = ssd_scan(*args, chunk_size=8), ssd_scan_fast(*args, chunk_size=8)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s, s_ref, rtol=1e-12, atol=1e-12)
    g_ref = torch.autograd.grad(loss(y_ref, s_ref), args)
    g = torch.autograd.grad(loss(y, s), args)
    for name, a, b in zip('x dt A B C'.split(), g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("t", [1, 16, 37, 100])
def test_ssd_scan_from_an_initial_state_matches_sequential_loop_forward_and_backward_float64(t, scan):
    """h_0 given (mamba's initial_states): the outputs, the final state and the gradients of every input,
    h_0 included, equal autograd through the loop started from h_0, for any t (37: a padded tail, 1: less
    than a chunk); one B, C for all heads, as in the mixer."""
    x, dt, A, B, C = random_scan_inputs(2, t, 4, 3, 5, torch.float64, groups=1)
    h0 = torch.randn(2, 4, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    args = [a.requires_grad_() for a in (x, dt, A, B, C, h0)]
    loss = weighted_loss(t, 4, 3, 5)
    y_ref, s_ref = ssd_scan_sequential(*args)
    y, s = scan(*args[:5], chunk_size=16, initial_state=args[5])
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s, s_ref, rtol=1e-10, atol=1e-10)
    g_ref = torch.autograd.grad(loss(y_ref, s_ref), args)
    g = torch.autograd.grad(loss(y, s), args)
    for name, a, b in zip('x dt A B C h0'.split(), g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)
    assert (g[5] != 0).all()                      # h_0 reaches every output: its gradient is nowhere zero


def test_a_scan_split_in_two_carries_its_state_exactly():
    """The final state of the first half, as the second half's initial state, gives the whole sequence's
    outputs and final state: what training from carried states relies on."""
    args = random_scan_inputs(2, 50, 4, 3, 5, torch.float64, groups=1)
    y, s = ssd_scan(*args, chunk_size=8, fast=True)
    first, second = ([a[:, :23] for a in (args[0], args[1])], [a[:, 23:] for a in (args[0], args[1])])
    y1, s1 = ssd_scan(*first, args[2], args[3][:, :23], args[4][:, :23], chunk_size=8, fast=True)
    y2, s2 = ssd_scan(*second, args[2], args[3][:, 23:], args[4][:, 23:], chunk_size=8, initial_state=s1, fast=True)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s2, s, rtol=1e-12, atol=1e-12)


def test_gpt_hands_each_mamba2_layers_final_state_out_and_takes_it_in():
    """GPT.forward's states: one entry per layer, a Mamba2 layer's (SSM state, the conv's last d_conv - 1 inputs),
    None for attention; from zero states it is the model without states; a state fed back in changes the
    Mamba2 layers' outputs."""
    torch.manual_seed(0)
    m = GPT(tiny(block_pattern='AM', n_layer=3))
    idx = torch.randint(0, 64, (2, 20))
    with kernels.eager():
        plain = m(idx, idx)
        logits, loss, finals = m(idx, idx, states=[None] * 3)
        again = m(idx, idx, states=finals)
    assert torch.equal(logits, plain[0]) and torch.equal(loss, plain[1])
    mixer = m.blocks[1].mixer
    assert finals[0] is None and finals[2] is None and finals[1][0].shape == (2, mixer.n_heads, 16, 8)
    assert finals[1][1].shape == (2, m.config.d_conv - 1, mixer.d_inner + 2 * mixer.d_state)
    assert not torch.equal(again[1], loss) and again[2][1][0].shape == finals[1][0].shape


def stream(m, idx, segment, scaling=None):
    """All positions' logits (B, T, V) of m read in segments of `segment` tokens, each from the states the last
    one left (eval_lengths.score's streaming)."""
    out, states = [], None
    for a in range(0, idx.shape[1], segment):
        x = idx[:, a:a + segment]
        logits, _, states = m(x, x, scaling=scaling, states=states)          # every position a target
        out.append(logits.view(x.shape[0], x.shape[1], -1))
    return torch.cat(out, dim=1)


@pytest.mark.parametrize('T', [32, 37])
@pytest.mark.parametrize('dtype,fast,tol', [(torch.float64, False, 1e-10), (torch.float32, True, 1e-5)])
def test_a_mamba2_model_streamed_in_segments_equals_one_pass(eager, T, dtype, fast, tol):
    """Each segment from the states the last one left (the scan's state and the conv's last inputs) gives one
    pass's logits at every position, at lengths that are (32) and are not (37) multiples of the segments (8,
    16) and chunks (8), also under a Mamba2 scaling. Tolerance: float64 readable code 1e-10, float32 kernels 1e-5."""
    torch.manual_seed(0)
    m = GPT(tiny(block_pattern='M', fast_kernels=fast)).to(dtype).eval()
    idx = torch.randint(0, 64, (2, T))
    with torch.no_grad():
        for scaling in (None, M.LengthScaling(ssm='decay', ssm_scales=(0.3, 2.0))):
            whole = stream(m, idx, T, scaling)
            for segment in (8, 16):
                torch.testing.assert_close(stream(m, idx, segment, scaling), whole, rtol=tol, atol=tol)


def test_mamba2_scalings_at_one_are_the_plain_model_bit_for_bit():
    torch.manual_seed(0)
    m = GPT(tiny(block_pattern='M')).eval()
    idx = torch.randint(0, 64, (2, 24))
    with torch.no_grad(), kernels.eager():
        plain = m(idx, idx)[0]
        for kind in ('dt', 'decay'):
            for scales in ((1.0,), (1.0, 1.0)):
                assert torch.equal(m(idx, idx, scaling=M.LengthScaling(ssm=kind, ssm_scales=scales))[0], plain)


def test_mamba2_decay_scaling_is_A_log_times_s_per_layer():
    """Mamba Modulation: A = -exp(s_l A_log) in layer l, the model whose A_log is multiplied by s_l; one value
    scales every layer."""
    torch.manual_seed(0)
    m = GPT(tiny(block_pattern='M')).eval()
    twin = GPT(m.config).eval()
    twin.load_state_dict(m.state_dict())
    idx = torch.randint(0, 64, (2, 24))
    with torch.no_grad(), kernels.eager():
        for scales in ((0.25, 3.0), (0.5,)):
            for block, mine, s in zip(twin.blocks, m.blocks, scales * 2):
                block.mixer.A_log.copy_(mine.mixer.A_log * s)
            got = m(idx, idx, scaling=M.LengthScaling(ssm='decay', ssm_scales=scales))[0]
            assert torch.equal(got, twin(idx, idx)[0])
            assert not torch.equal(got, m(idx, idx)[0])


def test_mamba2_dt_scaling_multiplies_each_step_against_the_loop():
    """MambaExtend: dt x s in the decay exp(s dt A) and in the input s dt B x, checked against the mixer
    written out with the sequential scan (float64; the chunked and the sequential sums round apart by ~1e-10)."""
    torch.manual_seed(0)
    mixer = M.Mamba2(tiny(block_pattern='M', fast_kernels=False)).double().eval()
    u, s = torch.randn(2, 19, 32, dtype=torch.float64), 0.3
    with torch.no_grad():
        got, _ = mixer(u, ssm=('dt', s))
        h, p, n = mixer.n_heads, mixer.headdim, mixer.d_state
        z, xBC, dt = mixer.in_proj(u).split([mixer.d_inner, mixer.d_inner + 2 * n, h], dim=-1)
        xBC = M.causal_conv_silu(xBC, mixer.conv1d_weight, mixer.conv1d_bias)
        x, B, C = xBC.split([mixer.d_inner, n, n], dim=-1)
        dt = F.softplus(dt + mixer.dt_bias) * s
        x = x.view(2, 19, h, p)
        y, _ = ssd_scan_sequential(x, dt, -torch.exp(mixer.A_log), B[:, :, None], C[:, :, None])
        want = mixer.out_proj(M.gated_rms_norm(y, x, mixer.D, z, mixer.norm.weight, mixer.norm.eps))
    torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-8)


def test_fast_scan_backward_takes_the_expanded_gradient_of_a_sum():
    """y.sum() hands the backward a gradient with stride 0 (tools/bench.py's scan section does this): the
    written-out backward gives autograd's gradients of the sequential loop there too."""
    args = [a.requires_grad_() for a in random_scan_inputs(1, 32, 4, 3, 5, torch.float64, groups=1)]
    g_ref = torch.autograd.grad(ssd_scan_sequential(*args)[0].sum(), args)
    g = torch.autograd.grad(ssd_scan_fast(*args, chunk_size=8)[0].sum(), args)
    for name, a, b in zip('x dt A B C'.split(), g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("scan", SCANS)
def test_ssd_scan_gradients_match_sequential_loop(scan):
    args = [a.requires_grad_() for a in random_scan_inputs(1, 40, 2, 3, 4, torch.float32)]
    g_ref = torch.autograd.grad(ssd_scan_sequential(*args)[0].pow(2).sum(), args)
    g = torch.autograd.grad(scan(*args, chunk_size=16)[0].pow(2).sum(), args)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.slow     # Inductor compiles the chunked scan and its backward: ~15 s on a cold cache
def test_compiled_ssd_scan_equals_sequential_loop():
    """ssd_scan's fast path under torch.compile (Inductor, as in a compiled model; here on a CPU), in one
    graph: the outputs and gradients of the sequential loop, one B, C for all heads as in the mixer."""
    args = [a.requires_grad_() for a in random_scan_inputs(1, 40, 4, 3, 4, torch.float32, groups=1)]
    y_ref, s_ref = ssd_scan_sequential(*args)
    g_ref = torch.autograd.grad(y_ref.pow(2).sum() + s_ref.sum(), args)
    y, s = torch.compile(ssd_scan_fast, fullgraph=True)(*args, chunk_size=16)
    g = torch.autograd.grad(y.pow(2).sum() + s.sum(), args)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    for name, a, b in zip('x dt A B C'.split(), g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=name)


class LargestTensor(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, torch.Tensor):
                self.numel = max(self.numel, o.numel())
        return out


@pytest.mark.parametrize("scan", SCANS)
def test_ssd_scan_has_nothing_quadratic_in_chunks(scan):
    largest = {}
    for chunks in (16, 256):
        args = [a.requires_grad_() for a in random_scan_inputs(1, 4 * chunks, 2, 4, 4, torch.float32)]
        with LargestTensor() as mode:
            y, _ = scan(*args, chunk_size=4)
            y.sum().backward()
        assert torch.isfinite(y).all()
        largest[chunks] = mode.numel
    # 16x the chunks: the largest intermediate, forward or backward, grows 16x (linear); a (chunks x chunks) one, 256x
    assert largest[256] <= 16 * largest[16]


def test_mamba2_layer_keeps_nothing_per_chunk_matrix_for_backward(eager):
    # A (chunk x chunk) matrix per head and chunk kept for backward would make the saved memory grow
    # with the chunk length (the tokens stay the same); the written-out backward rebuilds them.
    x = torch.randn(2, 256, 32, requires_grad=True)
    saved = {}
    for chunk in (8, 128):
        torch.manual_seed(0)
        block = M.Block(tiny(block_pattern='M', chunk_size=chunk, dropout=0.1, dropout_site='vpad'), 0)
        saved[chunk] = saved_for_backward_bytes(lambda: block(x)[0], exclude=list(block.parameters()))
    # at chunk 128 one (l x l) matrix per head, chunk and row (4 x 2 x 2) is 1 MiB, 2/3 of what is kept now
    assert saved[128] < 1.1 * saved[8]


def ran_compiled(kernel):
    """Whether a kernels.compiled kernel ran through torch.compile (not its op-by-op fallback)."""
    return hasattr(kernel.kernel, '_torchdynamo_orig_callable')


# compiled at T = 1 (a size torch.compile specializes on) and 37 (longer than the kernel); T = 2 eagerly only
@pytest.mark.parametrize("T, use_compile", [(1, False), (2, False), (37, False), (1, True),
                                           pytest.param(37, True, marks=pytest.mark.slow)])
def test_causal_conv_silu_equals_the_depthwise_conv1d_it_replaces(T, use_compile, monkeypatch):
    """Mamba2's conv as shifted multiply-adds with a written-out backward: the same output and
    gradients (x, weight, bias) as nn.Conv1d(groups=C, padding=K-1) cut to T, then silu; x is a
    strided slice, as in the mixer; T < K: taps that fall before the first token."""
    monkeypatch.setattr(kernels, 'USE_COMPILE', use_compile)
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(6, 6, 4, groups=6, padding=3)
    x = torch.randn(2, T, 10)[..., 2:8].requires_grad_()          # (B, T, C), not contiguous
    g = torch.randn(2, T, 6)
    outs = []
    for f in (lambda: F.silu(conv(x.transpose(1, 2))[..., :T].transpose(1, 2)),
              lambda: M.causal_conv_silu(x, conv.weight, conv.bias, fast=True)):
        x.grad = conv.weight.grad = conv.bias.grad = None
        y = f()
        y.backward(g)
        outs.append((y, x.grad, conv.weight.grad, conv.bias.grad))
    for ref, got in zip(*outs):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    if use_compile:
        assert all(ran_compiled(k) for k in (kernels._conv_silu_forward, kernels._conv_silu_grad, kernels._conv_grads))


def test_causal_conv_silu_in_bfloat16_returns_bfloat16_and_fp32_weight_grads(eager):
    """Under autocast x arrives in bf16: the conv computes in fp32 and returns bf16, the gradient of
    x is bf16, those of the fp32 parameters fp32; all within bf16 rounding of the fp32 op."""
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(6, 6, 4, groups=6, padding=3)
    x0 = torch.randn(2, 9, 6).bfloat16()
    ref = F.silu(conv(x0.float().transpose(1, 2))[..., :9].transpose(1, 2))
    for fast in (False, True):
        x = x0.clone().requires_grad_()
        conv.weight.grad = conv.bias.grad = None
        with torch.autocast('cpu', dtype=torch.bfloat16):        # the readable conv computes in fp32 all the same
            y = M.causal_conv_silu(x, conv.weight, conv.bias, fast)
        y.float().sum().backward()
        assert ((y.dtype, x.grad.dtype, conv.weight.grad.dtype, conv.bias.grad.dtype)
                == (torch.bfloat16, torch.bfloat16, torch.float32, torch.float32))
        torch.testing.assert_close(y.float(), ref, rtol=1e-2, atol=1e-2)


def test_gated_norm_fused_equals_the_ops_one_by_one():
    """Mamba2's skip + gate + output norm, RMSNorm((y + D x) * silu(z)) * weight: compiled into one kernel
    (the fast path) it gives the output and gradients of the readable code run op by op."""
    torch.manual_seed(0)
    y, x, z = (torch.randn(2, 5, 3, 4, requires_grad=True) for _ in range(3))
    D = torch.randn(3, requires_grad=True)
    outs = []
    for fast in (False, True):
        norm = M.GatedRMSNorm(12, fast)
        out = norm(y, x, D, z.flatten(2))
        outs.append((out, *torch.autograd.grad(out.square().sum(), (y, x, D, z, norm.weight))))
    assert ran_compiled(M.gated_rms_norm_fused)
    for ref, got in zip(*outs):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def train_a_few_steps(cfg, steps=4):
    """AdamW steps of a fresh GPT(cfg) on fixed random batches, each step's masks from a fixed seed. ->
    (the losses, the first step's gradients by name)"""
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses, grads = [], None
    for step in range(steps):
        batch = torch.randint(0, cfg.vocab_size, (4, cfg.block_size + 1), generator=g)
        torch.manual_seed(100 + step)
        _, loss, _ = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        grads = grads or {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, grads


@pytest.mark.parametrize('pattern, site', [('A', 'vpad'), ('A', 'pre_norm'), ('M', 'vpad'), ('M', 'pre_linear')])
def test_the_readable_model_trains_as_the_fast_one(pattern, site, monkeypatch):
    """fast_kernels=False runs model.py's readable definitions alone (every base/kernels.py entry point is
    made to fail): from the same weights, over the same batches and masks, 4 AdamW steps give the fast
    path's losses within rtol 1e-5 and its first gradients within rtol 1e-4, atol 1e-6 (float32: the two
    sum in other orders)."""
    cfg = dict(block_pattern=pattern, dropout=0.1, dropout_site=site, short_conv=2 if pattern == 'A' else 0)
    with kernels.eager():
        fast = train_a_few_steps(tiny(**cfg))
    for name in ('masked_scale', 'ssd_scan_fast', 'CausalConvSilu'):
        monkeypatch.setattr(kernels, name, None)
    monkeypatch.setattr(M, 'gated_rms_norm_fused', None)
    readable = train_a_few_steps(tiny(**cfg, fast_kernels=False))
    torch.testing.assert_close(readable[0], fast[0], rtol=1e-5, atol=0)
    assert fast[1].keys() == readable[1].keys()
    for name, g in fast[1].items():
        torch.testing.assert_close(readable[1][name], g, rtol=1e-4, atol=1e-6, msg=name)


# ----------------------------------------------------------------------------- attention

def test_rope_rotates_each_pair_by_its_position_angle_at_any_length():
    """rope with GPT's tables is the rotation by definition, (x1 + i x2) e^(i t theta^(-2k/D)) in
    complex numbers; and past the length GPT keeps tables for, where forward computes them, the
    model equals one that keeps tables that long."""
    T, D, theta = 40, 8, 10000.0
    x = torch.randn(2, 3, T, D, dtype=torch.float64)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ref = torch.complex(x[..., :D // 2], x[..., D // 2:]) * torch.polar(torch.ones_like(angle), angle)
    cos, sin = M.rope_tables(T, D, theta, 'cpu')                      # fp32: compared at fp32 tolerances
    torch.testing.assert_close(M.rope(x.float(), cos, sin), torch.cat([ref.real, ref.imag], -1).float())
    short = GPT(tiny(block_size=16, window=8, nope_every=2)).eval()
    long = GPT(tiny(block_size=64, window=8, nope_every=2)).eval()
    long.load_state_dict(short.state_dict())
    idx = torch.randint(0, 64, (2, T))
    with torch.no_grad():
        assert torch.equal(all_logits(short, idx), all_logits(long, idx))


@pytest.mark.parametrize("T,window", [(150, 32), (64, 16), (20, 32), (33, 1)])
def test_sliding_window_equals_band_masked_full_attention(T, window):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g) for _ in range(3))
    i = torch.arange(T)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)   # (T, T)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=band)
    torch.testing.assert_close(M.sliding_window_attention(q, k, v, window), ref, rtol=1e-5, atol=1e-5)


def all_logits(model, idx):
    logits, _, _ = model(idx, torch.zeros_like(idx))
    return logits.view(*idx.shape, -1)


def test_token_outside_every_layers_reach_does_not_change_output():
    L, W, T = 3, 8, 64
    model = GPT(tiny(n_layer=L, window=W)).eval()
    idx = torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[0, 0] = (idx[0, 0] + 1) % 64
    with torch.no_grad():
        a, b = all_logits(model, idx), all_logits(model, changed)
    reach = L * (W - 1)                        # position 0 reaches positions 0 .. L*(W-1)
    assert torch.equal(a[0, reach + 1:], b[0, reach + 1:])
    assert not torch.allclose(a[0, reach], b[0, reach])


def test_short_conv_adds_reach_and_is_zero_at_init():
    """Each layer's short convolution carries a token short_conv positions further than the window
    does (the reach train.py reports), and at init (zero weights) the model is the one without it."""
    L, W, K, T = 2, 4, 3, 32
    idx = torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[0, 0] = (idx[0, 0] + 1) % 64
    torch.manual_seed(0)
    plain = GPT(tiny(n_layer=L, window=W)).eval()
    torch.manual_seed(0)
    model = GPT(tiny(n_layer=L, window=W, short_conv=K)).eval()
    with torch.no_grad():
        torch.testing.assert_close(all_logits(model, idx), all_logits(plain, idx))
        for b in model.blocks:
            b.mixer.conv.weight.normal_()
        a, b = all_logits(model, idx), all_logits(model, changed)
    reach = L * (W - 1 + K)
    assert torch.equal(a[0, reach + 1:], b[0, reach + 1:])
    assert not torch.allclose(a[0, reach], b[0, reach])


def test_short_conv_equals_depthwise_conv1d():
    conv = M.ShortConv(6, 3)
    with torch.no_grad():
        conv.weight.normal_()
    x = torch.randn(2, 10, 6)
    # the same filter as a causal depthwise conv1d: taps x_{t-3} .. x_t, the last one fixed at 1
    kernel = torch.cat([conv.weight.flip(0), torch.ones(1, 6)]).T.unsqueeze(1)   # (C, 1, K + 1)
    ref = F.conv1d(F.pad(x.transpose(1, 2), (3, 0)), kernel, groups=6).transpose(1, 2)
    torch.testing.assert_close(conv(x), ref)


def test_64k_token_forward_memory_is_linear():
    # A T x T boolean mask alone would take 4 GiB at T = 65536; the whole process stays under 1.5 GiB.
    code = (
        "import resource, torch\n"
        "from model import GPT, GPTConfig\n"
        "torch.manual_seed(0)\n"
        "m = GPT(GPTConfig(vocab_size=64, n_layer=1, n_head=2, n_embd=64, window=64, nope_every=0, "
        "short_conv=0)).eval()\n"
        "with torch.no_grad():\n"
        "    logits, _, _ = m(torch.randint(0, 64, (1, 65536)))\n"
        "assert logits.shape == (1, 1, 64) and torch.isfinite(logits).all()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    peak_kib = int(out.stdout.split()[-1])
    assert peak_kib < 1.5 * 2**20, f"peak RSS {peak_kib / 2**20:.2f} GiB"


@pytest.mark.parametrize("arch", [
    dict(window=8),                               # pure sliding window
    dict(window=8, nope_every=2),                 # sliding window + global NoPE layers
    dict(block_pattern='M'),                      # pure Mamba2
    dict(block_pattern='AM', window=8),           # hybrid
])
def test_forward_at_64x_block_size(arch):
    cfg = tiny(**arch)
    model = GPT(cfg).eval()
    T = 64 * cfg.block_size
    idx = torch.randint(0, cfg.vocab_size, (1, T))
    targets = torch.full_like(idx, -1)
    targets[0, -5:] = idx[0, -5:]
    with torch.no_grad():
        logits, loss, _ = model(idx, targets)
    assert logits.shape == (5, cfg.vocab_size)
    assert torch.isfinite(loss)


def test_nope_layers_are_global_and_ropeless():
    model = GPT(tiny(n_layer=4, window=8, nope_every=2))
    assert model.describe_layers() == ['W', 'N', 'W', 'N']
    assert model.blocks[1].mixer.window == 0 and not model.blocks[1].mixer.use_rope
    # nope_every counts attention layers: in a hybrid the 2nd attention layer is layer 2
    assert GPT(tiny(n_layer=4, window=8, nope_every=2, block_pattern='AM')).describe_layers() == ['W', 'M', 'N', 'M']


# ----------------------------------------------------------------------------- dropout sites

NORM_FED = ('mixer.c_attn', 'mlp.c_fc', 'mixer.in_proj', 'mixer.out_proj')


def site_model(site, state=None):
    torch.manual_seed(0)
    m = GPT(tiny(block_pattern='AM', dropout=0.3, dropout_site=site, window=8))
    if state is not None:
        m.load_state_dict(state)                 # strict: the sites share one parameter set
    return m


def test_one_state_dict_loads_into_all_sites_and_eval_is_identical():
    """Every site's model holds the same parameters (a strict load across sites) and, in eval mode, computes
    the same logits as VPAD's; in training mode 'none' still does (no noise anywhere), every other site not."""
    base = site_model('vpad')
    idx = torch.randint(0, 64, (2, 40))
    with torch.no_grad():
        ref = all_logits(base.eval(), idx)
        for site in SITES:
            m = site_model(site, base.state_dict())
            assert torch.equal(all_logits(m.eval(), idx), ref), site
            assert torch.equal(all_logits(m.train(), idx), ref) == (site == 'none'), site


@pytest.mark.parametrize("site", SITES)
def test_noise_appears_exactly_where_the_site_says(site, eager):
    m = site_model(site).train()
    fired, fed_by_dropout = [], set()
    outputs = {}

    def on_dropout(name):
        def fn(mod, args, out):
            if out is not args[0]:
                fired.append(name)
                outputs[out.data_ptr()] = out   # kept alive: a freed output's memory could be reused by a later input
        return fn

    def on_linear(name):
        def fn(mod, args):
            if args[0].data_ptr() in outputs:
                fed_by_dropout.add(name.split('.', 2)[2])
        return fn

    for name, mod in m.named_modules():
        if isinstance(mod, M.Dropout):
            mod.register_forward_hook(on_dropout(name))
        if isinstance(mod, nn.Linear):
            mod.register_forward_pre_hook(on_linear(name))
    m(torch.randint(0, 64, (2, 24)), torch.randint(0, 64, (2, 24)))
    if site == 'none':
        assert fired == []
    elif site == 'pre_norm':
        assert fed_by_dropout == set()
        assert sorted(fired) == ['blocks.0.drop_res', 'blocks.0.drop_res', 'blocks.1.drop_res']
    else:
        assert fed_by_dropout == set(NORM_FED)
        assert all('drop_res' not in f for f in fired)
        assert len(fired) == 4                 # c_attn, c_fc, in_proj, out_proj: once each


@pytest.mark.parametrize("site", ['pre_linear', 'vpad'])
def test_first_projection_input_is_the_sites_transform(site, eager):
    m = site_model(site)
    seen = {}
    m.blocks[0].mixer.c_attn.register_forward_pre_hook(lambda mod, a: seen.setdefault(mod.training, a[0].detach()))
    idx = torch.randint(0, 64, (2, 24))
    m.eval()(idx)
    m.train()(idx)
    clean, noisy = seen[False], seen[True]
    scale = 1 / (1 - 0.3) if site == 'pre_linear' else 1 / math.sqrt(1 - 0.3)
    mu = clean.mean(dim=(0, 1)) if site == 'vpad' else torch.zeros(clean.shape[-1])
    ratio = (noisy - mu) / (clean - mu)
    kept = (ratio - scale).abs() < 1e-3
    dropped = ratio.abs() < 1e-5
    assert (kept | dropped).all()
    assert 0.2 < dropped.float().mean() < 0.4


# ----------------------------------------------------------------------------- config, optimizer, MFU

@pytest.mark.parametrize("kw,word", [(dict(dropout_site='residual'), 'pre_linear'),
                                     (dict(block_pattern='AX'), "'M'"),
                                     (dict(dropout=1.0), 'dropout'),
                                     (dict(short_conv=-1), 'short_conv')])
def test_bad_config_raises_naming_valid_values(kw, word):
    with pytest.raises(ValueError, match=word):
        tiny(**kw)


def test_weight_decay_only_on_linear_matrices():
    m = GPT(tiny(block_pattern='AM'))
    opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu')
    names = {id(p): n for n, p in m.named_parameters()}
    decayed = {names[id(p)] for p in opt.param_groups[0]['params']}
    plain = {names[id(p)] for p in opt.param_groups[1]['params']}
    assert opt.param_groups[0]['weight_decay'] == 0.1 and opt.param_groups[1]['weight_decay'] == 0
    assert decayed == {n for n, mod in m.named_modules() if isinstance(mod, nn.Linear) for n in [n + '.weight']}
    for n in ('wte.weight', 'blocks.1.mixer.A_log', 'blocks.1.mixer.D', 'blocks.1.mixer.dt_bias',
              'blocks.0.norm_1.weight', 'blocks.1.mixer.conv1d_bias'):
        assert n in plain
    assert len(decayed) + len(plain) == len(list(m.parameters()))


def test_mfu_uses_the_given_peak_and_the_window():
    full, windowed = GPT(tiny(block_size=256)), GPT(tiny(block_size=256, window=16))
    assert windowed.flops_per_token(256) < full.flops_per_token(256)
    head = 6 * full.config.vocab_size * full.config.n_embd
    assert math.isclose(full.flops_per_token(256) - full.flops_per_token(256, head_fraction=0.25), 0.75 * head)
    a = full.estimate_mfu(1000, 1.0, peak_flops=1e12)
    assert math.isclose(full.estimate_mfu(1000, 1.0, peak_flops=2e12), a / 2)
    assert math.isclose(a, full.flops_per_token(256) * 1000 / 1e12)


def test_lm_head_only_where_targets_are_set():
    m = GPT(tiny()).eval()
    idx = torch.randint(0, 64, (2, 10))
    targets = torch.full_like(idx, -1)
    targets[0, 3], targets[1, 7] = 5, 9
    logits, loss, _ = m(idx, targets)
    full = all_logits(m, idx)
    torch.testing.assert_close(logits, torch.stack([full[0, 3], full[1, 7]]))
    torch.testing.assert_close(loss, F.cross_entropy(logits, torch.tensor([5, 9])))
    last, none, _ = m(idx)
    assert last.shape == (2, 1, 64) and none is None
    torch.testing.assert_close(last[:, 0], full[:, -1])


def test_compiled_model_returns_the_eager_logits_rows():
    """train.py's compiled model (kernels.CompiledOrEager) gives the eager model's logits: the (N, V)
    rows of the positions with a target, row-major. Its graph runs the LM head on all B*T positions
    (no matmul changes shape) and the rows are picked after the call."""
    m = GPT(tiny()).eval()
    idx = torch.randint(0, 64, (2, 16))
    targets = idx.roll(-1, dims=1)
    targets[:, :9], targets[1, 12] = -1, -1
    with torch.no_grad():
        eager, compiled = m(idx, targets), CompiledOrEager(m)(idx, targets)
        whole = torch.compile(m)(idx, targets)[0]               # the graph's own output: every position
    assert whole.shape == (2 * 16, 64)
    assert compiled[0].shape == eager[0].shape == (int((targets != -1).sum()), 64)
    torch.testing.assert_close(compiled[:2], eager[:2])
    torch.testing.assert_close(compiled[0], whole[targets.flatten() != -1], rtol=0, atol=0)


@pytest.mark.parametrize("pattern", ['A', pytest.param('M', marks=pytest.mark.slow), 'AM'])   # AM holds M
def test_whole_model_traces_as_one_graph(pattern):
    """train.py --compile=True compiles the whole model: no graph break for any layer kind or dropout
    site (the masks come from torch.randint, the LM head has a fixed shape under the compiler)."""
    idx = torch.randint(0, 64, (2, 24))
    targets = idx.clone()
    targets[:, :5] = -1
    for site in SITES:
        torch.manual_seed(0)
        m = GPT(tiny(block_pattern=pattern, dropout=0.1, dropout_site=site, window=8, short_conv=2))
        explanation = torch._dynamo.explain(m)(idx, targets)
        assert explanation.graph_break_count == 0, (site, [str(b.reason)[:200] for b in explanation.break_reasons])


def test_compiled_graphs_read_the_rope_tables_and_hold_no_scan():
    """What a compiled training step hands Inductor, forward and backward, attention and Mamba2
    layers: no cos or sin (the RoPE tables are buffers; computed in the graph, Inductor put them
    into every layer's kernels) and no cumsum or cumprod (its GPU codegen of those failed on Mamba2)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    ops = set()

    def record(gm, example_inputs):
        ops.update(str(n.target) for n in gm.graph.nodes if n.op == 'call_function')
        return make_boxed_func(gm)
    m = GPT(tiny(block_pattern='AM', window=8, dropout=0.1, dropout_site='vpad'))
    idx = torch.randint(0, 64, (2, 16))
    _, loss, _ = torch.compile(m, backend=aot_autograd(fw_compiler=record, bw_compiler=record))(idx, idx)
    loss.backward()
    assert 'aten.bmm.default' in ops and 'aten.exp.default' in ops     # the graphs hold the model
    assert [o for o in ops if any(w in o for w in ('cos', 'sin', 'cumsum', 'cumprod'))] == []


def train_losses(model, idx, targets, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        _, loss, _ = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


# slow: the first compile of a training model, ~20 s a pattern on a cold cache (a fresh clone); the kernels
# compiled alone, and the compiled model's logits, are checked in the default run
@pytest.mark.slow
@pytest.mark.parametrize("pattern", ['A', 'AM'])
def test_compiled_training_equals_eager_and_replays_its_masks_from_the_rng_state(pattern):
    """A compiled model trains like the eager one: same losses over 3 steps from the same seed,
    dropout included. fallback_random makes the compiled graph draw its masks with torch's own
    random ops, so they equal eager's bit for bit; either way the masks follow torch's RNG state,
    so restoring a checkpoint's state replays them (resume stays exact)."""
    torch.manual_seed(0)
    eager_model = GPT(tiny(n_layer=2, block_pattern=pattern, dropout=0.1, dropout_site='vpad', window=8))
    twin = GPT(eager_model.config)
    twin.load_state_dict(eager_model.state_dict())
    compiled_model = torch.compile(twin, options={'fallback_random': True})
    idx = torch.randint(0, 64, (2, 24))
    targets = idx.roll(-1, dims=1)
    targets[:, :8] = -1
    losses = {}
    for name, m in (('eager', eager_model), ('compiled', compiled_model)):
        torch.manual_seed(1)
        losses[name] = train_losses(m.train(), idx, targets, steps=3)
    torch.testing.assert_close(losses['compiled'], losses['eager'], rtol=1e-5, atol=1e-6)
    assert len(set(losses['eager'])) == 3
    state = torch.get_rng_state()
    first = compiled_model(idx, targets)[1]
    torch.set_rng_state(state)
    assert torch.equal(compiled_model(idx, targets)[1], first)


@pytest.mark.parametrize("where", ['forward', 'backward'])
def test_train_compile_failure_is_one_line_and_training_goes_on_eagerly(where, capsys):
    """train.py --compile=True wraps the model in kernels.CompiledOrEager: a compiler that fails (here a
    stand-in backend raising what Inductor raised on Mamba2) costs one printed line, and the step runs
    eagerly with the eager model's loss; a failing backward compiler is caught at the first forward."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def fails(gm, example_inputs):
        raise TypeError("list indices must be integers or slices, not NoneType")
    backend = fails if where == 'forward' else aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm),
                                                            bw_compiler=fails)
    model = GPT(tiny(block_pattern='AM', window=8, fast_kernels=False))   # (the kernels' own compiles: not this test's)
    idx = torch.randint(0, 64, (2, 16))
    wrapped = CompiledOrEager(model, backend=backend)
    capsys.readouterr()
    _, loss, _ = wrapped(idx, idx)
    loss.backward()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torch.compile failed (TypeError: list indices")
    assert torch.equal(loss, model(idx, idx)[1])
    wrapped(idx, idx)
    assert capsys.readouterr().out == ""                # said once
