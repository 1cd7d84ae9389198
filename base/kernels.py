"""
The fast paths behind model.py, to skip on a first read. Each kernel computes the numbers of its
readable definition in model.py (the `fast=False` branch at its call) in fewer kernels and with less
memory saved for backward; tests/test_model.py checks each against that definition, compiled and eager,
and tools/bench.py times them. They take tensors model.py has prepared, and import nothing of the repo.
Top to bottom:

  compiled, eager          torch.compile of one function; op by op inside `with eager():` or without a compiler
  masked_scale             vpad and inverted_dropout (vpad_kernel, dropout_kernel): one fused kernel, a
                           backward that keeps only the mask
  ssd_scan_fast            ssd_scan's chunks with a written-out backward, no scan inside a chunk
  CausalConvSilu           causal_conv_silu: shifted multiply-adds with a written-out backward
"""

import contextlib

import torch
from torch.nn import functional as F

USE_COMPILE = True   # False inside `with eager():` only


@contextlib.contextmanager
def eager():
    """The kernels op by op inside (not compiled): the same numbers without the compile time (tests, bench)."""
    global USE_COMPILE
    was, USE_COMPILE = USE_COMPILE, False
    try:
        yield
    finally:
        USE_COMPILE = was

def compiled(fn):
    """fn fused by torch.compile, built on its first call (kept as .kernel). Inside a compiled model,
    fn itself: the model's graph fuses it. With USE_COMPILE off, or without a working compiler
    (torch.compile needs a C++ compiler on a CPU), fn op by op."""
    def run(*args):
        if not USE_COMPILE or torch.compiler.is_compiling():
            return fn(*args)
        if run.kernel is None:
            run.kernel = torch.compile(fn, dynamic=True)
        try:
            return run.kernel(*args)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            print(f"base/kernels.py: torch.compile of {fn.__name__} failed ({type(e.inner_exception).__name__}); "
                  f"running it op by op")
            run.kernel = fn
            return fn(*args)
    run.kernel = None
    return run

# Dropout (model.vpad, model.inverted_dropout): the centring, masking and scaling in one kernel fused by
# torch.compile, and a backward that keeps only the mask. r and threshold: model.draw_mask's.

@compiled
def vpad_kernel(x, r, threshold: int, scale: float):
    keep = r >= threshold
    mu = x.detach().mean(dim=tuple(range(x.dim() - 1)), keepdim=True)      # (1, .., 1, C) per coordinate
    return mu + keep * (x - mu) * scale, keep

@compiled
def dropout_kernel(x, r, threshold: int, scale: float):
    keep = r >= threshold
    return keep * x * scale, keep

class _MaskedScale(torch.autograd.Function):
    """y = kernel(x); dy/dx = keep * scale for both kernels (mu carries no gradient), so the
    backward keeps the boolean mask and nothing else."""
    @staticmethod
    def forward(ctx, x, r, threshold, scale, kernel):
        y, keep = kernel(x, r, threshold, scale)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None, None, None, None

def masked_scale(x, r, threshold, scale, kernel):
    """kernel (vpad_kernel or dropout_kernel) on x, keeping the elements where r >= threshold; scale: the
    factor on a kept element."""
    if torch.compiler.is_compiling():    # in a compiled model the graph fuses the kernel and derives its backward
        return kernel(x, r, threshold, scale)[0]
    return _MaskedScale.apply(x, r, threshold, scale, kernel)

# The chunked scan (model.ssd_scan's steps 1-4), with a written-out backward. No scans inside a chunk:
# Inductor's GPU codegen failed on the cumsum of the log decays at gpu_mamba2_4k's shapes (torch
# 2.11, "list indices must be integers or slices, not NoneType" in a SplitScan buffer), so the
# cumulative sums are products with triangular 0/1 matrices, which tensor cores run, and the decay
# matrix is an exp of their differences.

def ssd_scan_fast(x, dt, A, B, C, chunk_size, initial_state):
    """model.ssd_scan's steps 1-4, the same numbers (to rounding), by _ChunkedScan: what the Mamba2 mixer
    runs. The inputs are model.scan_inputs': fp32 at least, padded to whole chunks; initial_state (b, h, p, n)
    in their dtype. -> (y, final state). C_i.B_j is computed once per group of heads (once in all for the
    mixer's g = 1), not once per head."""
    return _ChunkedScan.apply(x, dt, A, B, C, chunk_size, initial_state)

def prefix_sums(v, ones):
    """v @ ones, with ones a triangular 0/1 matrix (l, l): the cumulative sums of v (..., l) along its
    last dim, inclusive (ones.triu()), exclusive (ones.triu(1)) or from the end (ones.tril()). Under
    TF32 (train.py turns it on for GPUs) a product rounds fp32 v to 11 significant bits. The top 16
    bits of v are exact in TF32, so v goes in as those plus the rest, and only the rest, < 2^-7 of v,
    is rounded. (A bf16 round trip gives the same split eagerly, but a compiled graph drops it.)"""
    if v.dtype != torch.float32:
        return v @ ones
    hi = (v.view(torch.int32) & -65536).view(torch.float32)        # sign, exponent, 7 mantissa bits
    return hi @ ones + (v - hi) @ ones

@compiled
def decay_matrix_t(a_cum):
    """a_cum: (..., l) cumulative log decays (non-increasing) -> Lt: (..., l, l), a chunk's decay
    matrix transposed: Lt[j, i] = exp(a_cum[i] - a_cum[j]) = exp(a[j+1] + .. + a[i]) for i >= j, and 1
    below the diagonal (callers multiply by an upper-triangular matrix). The difference costs
    |a_cum| * eps in the exponent (fp32: 1e-5 at |a_cum| = 200, where the chunk start's weight is
    e^-200), as to_end already did; model.segsum avoids it with a masked cumsum, a scan.
    Compiled, one pass: on a CPU 2x faster than the running product of exp(a) it replaces."""
    return torch.exp((a_cum[..., None, :] - a_cum[..., :, None]).clamp(max=0))

class _ChunkedScan(torch.autograd.Function):
    """ssd_scan_fast on inputs padded to whole chunks and cast. The backward is written out and
    rebuilds each chunk's intermediates from the inputs, so autograd keeps only the inputs and one
    state per chunk: no (l x l) matrix and no copy of x (bench.py's saved-memory section measures it).
    Layouts: token-major X = dt x (b, c, l, h, p), as x, for the products with B and C, which all
    heads of a group share; head-major Xh (b, c, h, l, p) for the per-head (l x l) products; B, C as
    (b, c, g, l, n); states as (b, c, g, r p, n), the r = h/g heads of a group stacked in the rows."""

    @staticmethod
    def chunks(x, dt, A, B, C, l):
        """The per-chunk tensors both passes start from."""
        b, T, h, p = x.shape
        g, n = B.shape[-2:]
        c = T // l
        X = (x * dt[..., None]).view(b, c, l, h, p)                               # dt_t x_t
        Xh = X.transpose(2, 3).contiguous()                                       # (b, c, h, l, p)
        a = (dt * A).view(b, c, l, h).transpose(2, 3)                             # (b, c, h, l): log decay
        a_cum = prefix_sums(a, torch.ones(l, l, device=a.device, dtype=a.dtype).triu_())   # a.cumsum(-1)
        to_end = torch.exp(a_cum[..., -1:] - a_cum).transpose(2, 3)[..., None]    # (b, c, l, h, 1)
        from_start = torch.exp(a_cum).transpose(2, 3)[..., None]                  # (b, c, l, h, 1)
        Bc, Cc = (u.view(b, c, l, g, n).transpose(2, 3) for u in (B, C))          # (b, c, g, l, n)
        CBt = (Bc @ Cc.transpose(-1, -2)).triu_()          # (b, c, g, l, l): B_j.C_i once per group, not per head
        return X, Xh, a_cum, to_end, from_start, Bc, Cc, CBt

    @staticmethod
    def forward(ctx, x, dt, A, B, C, l, S0):
        b, T, h, p = x.shape
        g, n = B.shape[-2:]
        c, r = T // l, h // g
        X, Xh, a_cum, to_end, from_start, Bc, Cc, CBt = _ChunkedScan.chunks(x, dt, A, B, C, l)
        # 1. within each chunk: y_i = sum_{j<=i} C_i.B_j exp(a_{j+1}+..+a_i) X_j
        Mt = decay_matrix_t(a_cum)                                                # (b, c, h, l, l)
        Mt.view(b, c, g, r, l, l).mul_(CBt[:, :, :, None])
        Yh = Mt.transpose(-1, -2) @ Xh                                            # (b, c, h, l, p)
        # 2. the state each chunk writes, as seen at its end
        Xd = (X * to_end).view(b, c, l, g, r * p).transpose(2, 3)                 # (b, c, g, l, r p)
        chunk_states = Xd.transpose(-1, -2) @ Bc                                  # (b, c, g, r p, n)
        # 3. between chunks: a recurrence over c states, linear in the number of chunks
        chunk_decay = from_start[:, :, -1].view(b, c, g, r, 1, 1)                 # exp(a_cum[-1])
        states = [S0.view(b, g, r, p, n)]
        for i in range(c):
            states.append(chunk_decay[:, i] * states[-1] + chunk_states[:, i].view(b, g, r, p, n))
        S = torch.stack(states, dim=1).view(b, c + 1, g, r * p, n)   # S[:, i] enters chunk i, S[:, c] is final
        # 4. what the incoming state contributes inside each chunk, plus step 1's output
        y = (Cc @ S[:, :c].transpose(-1, -2)).transpose(2, 3).reshape(b, c, l, h, p)
        y.mul_(from_start).add_(Yh.transpose(2, 3))
        ctx.save_for_backward(x, dt, A, B, C, S)
        ctx.l = l
        return y.reshape(b, T, h, p), S[:, c].reshape(b, h, p, n)

    @staticmethod
    def backward(ctx, dy, d_final):
        x, dt, A, B, C, S = ctx.saved_tensors
        b, T, h, p = x.shape
        g, n = B.shape[-2:]
        l = ctx.l
        c, r = T // l, h // g
        X, Xh, a_cum, to_end, from_start, Bc, Cc, CBt = _ChunkedScan.chunks(x, dt, A, B, C, l)
        dy = dy.contiguous().view(b, c, l, h, p)      # the gradient of y.sum() comes expanded (stride 0)
        S_in = S[:, :c]                                                            # (b, c, g, r p, n)
        # 4. y += (C S_in^T) exp(a_cum)
        Z = (Cc @ S_in.transpose(-1, -2)).transpose(2, 3).reshape(b, c, l, h, p)
        dZ = dy * from_start                                                      # (b, c, l, h, p)
        d_cum = (dZ * Z).sum(-1)                                                  # (b, c, l, h): d a_cum
        dZ = dZ.view(b, c, l, g, r * p).transpose(2, 3)                           # (b, c, g, l, r p)
        dC = dZ @ S_in                                                            # (b, c, g, l, n)
        dS_in = (dZ.transpose(-1, -2) @ Cc).view(b, c, g, r, p, n)
        # 3. the recurrence backwards: S[i+1] = decay_i S[i] + chunk_states_i
        chunk_decay = from_start[:, :, -1].view(b, c, g, r, 1, 1)
        S = S.view(b, c + 1, g, r, p, n)
        carry = x.new_zeros(b, g, r, p, n) if d_final is None else d_final.view(b, g, r, p, n)   # d S[i+1]
        d_states, d_decay = [None] * c, [None] * c
        for i in reversed(range(c)):
            d_states[i] = carry
            d_decay[i] = (carry * S[:, i]).sum((-2, -1))                           # (b, g, r)
            carry = dS_in[:, i] + chunk_decay[:, i] * carry
        d_states = torch.stack(d_states, dim=1).view(b, c, g, r * p, n)
        d_cum[:, :, -1] += torch.stack(d_decay, dim=1).view(b, c, h) * chunk_decay.view(b, c, h)
        # 2. chunk_states = (X exp(a_cum[-1] - a_cum))^T B
        Xd = (X * to_end).view(b, c, l, g, r * p).transpose(2, 3)                 # (b, c, g, l, r p)
        dB = Xd @ d_states                                                        # (b, c, g, l, n)
        dXd = (Bc @ d_states.transpose(-1, -2)).transpose(2, 3).reshape(b, c, l, h, p)
        d_to_end = (dXd * X).sum(-1) * to_end[..., 0]                             # (b, c, l, h)
        d_cum -= d_to_end
        d_cum[:, :, -1] += d_to_end.sum(2)
        dX = dXd.mul_(to_end)                                                     # (b, c, l, h, p)
        # 1. Yh = Mt^T Xh, Mt = Lt * CBt. With M[i, j] = CB[i, j] exp(S[i, j]), S[i, j] = a[j+1] + .. + a[i]:
        # dS = dM * M, and a[k] is in S[i, j] iff j < k <= i, so
        # da[k] = (sum of dS over columns j < k) - (sum over rows i < k)
        dYh = dy.transpose(2, 3).contiguous()                                     # (b, c, h, l, p)
        Mt = decay_matrix_t(a_cum)                                                # Lt for now
        dMt = (Xh @ dYh.transpose(-1, -2)).mul_(Mt)                               # (b, c, h, l, l): dM * L
        dCBt = dMt.view(b, c, g, r, l, l).sum(3).triu_()                          # (b, c, g, l, l)
        Mt.view(b, c, g, r, l, l).mul_(CBt[:, :, :, None])
        dX += (Mt @ dYh).transpose(2, 3)
        dB += dCBt @ Cc
        dC += dCBt.transpose(-1, -2) @ Bc
        dSt = dMt.view(b, c, g, r, l, l).mul_(CBt[:, :, :, None]).view(b, c, h, l, l)   # dM * M
        ones = torch.ones(l, l, device=x.device, dtype=x.dtype)
        da = prefix_sums(dSt.sum(-1) - dSt.sum(-2), ones.triu(1))                 # (b, c, h, l)
        # a_cum = cumsum(a): a[k] is in a_cum[m] for m >= k
        da += prefix_sums(d_cum.transpose(2, 3), ones.tril())
        # X = x dt, a = dt A
        dt = dt.view(b, c, l, h)
        dx = (dX * dt[..., None]).reshape(b, T, h, p)
        d_dt = (dX * x.view(b, c, l, h, p)).sum(-1) + da.transpose(2, 3) * A      # (b, c, l, h)
        dA = (da.transpose(2, 3) * dt).sum((0, 1, 2))
        dB, dC = (u.transpose(2, 3).reshape(b, T, g, n) for u in (dB, dC))
        return dx, d_dt.view(b, T, h), dA, dB, dC, None, carry.reshape(b, h, p, n)     # carry: d S[0]

# Mamba2's conv (model.causal_conv_silu): the causal depthwise convolution and its silu,
# out_t = silu(bias + sum_k w_k x_{t-K+1+k}), written as K shifted multiply-adds in the (B, T, C)
# layout: the same numbers as nn.Conv1d(groups=C, padding=K-1) cut to T, without its two
# transposes, and on a CPU its backward is several times cheaper than the convolution's (bench.py
# --only=mamba). The backward keeps only x (a view of in_proj's output, which autograd keeps
# anyway) and recomputes the rest.

def _conv_pre(x, w, bias):                     # x: (B, T, C), w: (C, K) -> (B, T, C) before the silu
    T, K = x.shape[1], w.shape[-1]
    # in-place adds on slices of x: a padded copy of x here made the compiled forward 2x slower
    out = torch.addcmul(bias, x, w[:, K - 1])                          # tap K-1 reads the current token
    for s in range(1, min(K, T)):                                      # tap K-1-s reads the token s steps back
        out[:, s:].addcmul_(x[:, :T - s], w[:, K - 1 - s])
    return out

@compiled
def _conv_silu_forward(x, w, bias):
    return F.silu(_conv_pre(x.float(), w, bias)).to(x.dtype)         # fp32 inside (autocast's conv runs in bf16)

# Two kernels for the backward, not one: fused into one, the compiler recomputes the silu's input
# inside each of the K weight-gradient sums (2x slower on a CPU).
@compiled
def _conv_silu_grad(dout, x, w, bias):        # -> d pre
    pre = _conv_pre(x.float(), w, bias)
    s = torch.sigmoid(pre)
    return dout.float() * s * (1 + pre * (1 - s))                             # silu'(u) = s (1 + u (1 - s))

@compiled
def _conv_grads(dpre, x, w):                  # -> dx, dw, d bias; dpre and w in fp32
    T, K = x.shape[1], w.shape[-1]
    dx = dpre * w[:, K - 1]
    for s in range(1, min(K, T)):                                     # x_t reaches out_{t+s} through tap K-1-s
        dx[:, :T - s].addcmul_(dpre[:, s:], w[:, K - 1 - s])
    xp = F.pad(x.float(), (0, 0, K - 1, 0))                           # (B, T+K-1, C): here the padded copy is faster
    dw = torch.stack([(dpre * xp[:, k:k + T]).sum((0, 1)) for k in range(K)], dim=-1)   # (C, K)
    return dx.to(x.dtype), dw, dpre.sum((0, 1))

class CausalConvSilu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias):
        ctx.save_for_backward(x, w, bias)
        return _conv_silu_forward(x, w, bias)

    @staticmethod
    def backward(ctx, dout):
        x, w, bias = ctx.saved_tensors
        return _conv_grads(_conv_silu_grad(dout, x, w, bias), x, w)
