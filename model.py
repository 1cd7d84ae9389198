"""
A small GPT / Mamba2 for length-generalization experiments.

The paper's idea in a few lines. Every block is pre-norm, x = x + f(N(x)), with N = RMSNorm.
Where the dropout D goes decides whether the activations a linear layer sees at inference look
like the ones it was trained on (`dropout_site`):

  none        no noise.
  pre_norm    x = x + D(f(N(x))): the usual residual dropout. D keeps E[x] but inflates the
              variance of the residual stream; the next RMSNorm divides by a larger RMS in
              training than at inference, so the *mean* of every normalized coordinate (what
              the next projections see) shifts between train and eval.
  pre_linear  D on the input of each linear layer that reads a normalization output
              (attention qkv, after its optional short convolution; MLP up/gate; Mamba2
              in_proj and out_proj). The norm sees no noise, so the mean the projection sees
              is the same in train and eval; its variance is still inflated.
  vpad        like pre_linear, with Variance-Preserving Affine Dropout instead of D.

VPAD (our reconstruction from the paper's abstract). Inverted dropout y = m x / (1-p) keeps
E[y] = E[x] but Var[y] = Var[x] + p/(1-p) E[x^2]: when coordinates have non-zero means the extra
variance is large. Drop the *centred* value instead and rescale it to keep the variance:

    y = mu + m (x - mu) / sqrt(1 - p),   m ~ Bernoulli(1 - p),   mu = E[x] (per coordinate)

then E[y] = mu = E[x] and Var[y] = E[m^2] Var[x] / (1 - p) = Var[x]. For a projection a = W y,
inverted dropout adds p/(1-p) sum_i W_ji^2 E[x_i^2] to Var[a_j]; VPAD only scales the
cross-covariances of x by (1 - p), so the pre-activation variance barely moves. mu is the
per-coordinate mean over all tokens of the batch, taken without gradient.

Contents, top to bottom: the config; the dropout sites (vpad and inverted_dropout); attention (RoPE,
its rescalings past the training length, full or sliding window, RoPE or NoPE, ShortConv) and the SwiGLU
MLP; the Mamba2 mixer with its selective scan (ssd_scan_sequential, the definition, then ssd_scan, the
chunked algorithm), its gated norm and its causal conv; the block, the model, and the model compiled.

What runs is written here. Where a fast kernel computes the same numbers cheaper, the call picks it
(`fast`, the config's fast_kernels, default True) or the readable code beside it, as nanoGPT's
`if self.flash:` picks attention: a line `# fast path:` names the kernel, in base/kernels.py, to skip
on a first read. fast_kernels=False runs this file's code alone; a test trains both ways and compares.
The train-vs-eval mismatch diagnostic is tools/mismatch.py.
"""

import math
import inspect
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from base import kernels

SITES = ('none', 'pre_norm', 'pre_linear', 'vpad')
BLOCK_KINDS = {'A': 'attention + MLP', 'M': 'Mamba2 mixer'}

# -----------------------------------------------------------------------------
# Config

@dataclass
class GPTConfig:
    # the defaults are the main run's model (config/vpad.py): 2 global NoPE attention layers with short
    # convolutions, width 64, VPAD 0.1
    vocab_size: int = 1024
    block_size: int = 64        # the training length: a default for data and MFU, never a limit
    n_layer: int = 2
    n_head: int = 1
    n_embd: int = 64
    dropout: float = 0.1
    dropout_site: str = 'vpad'  # one of SITES
    window: int = 0             # sliding-window size of RoPE attention layers, 0 = full causal
    short_conv: int = 3         # attention layers first add a learned per-channel mix of the previous short_conv
                                # positions to their input; 0 = off
    nope_every: int = 1         # every k-th attention layer (counted among attention layers) is global NoPE; 0 = never
    block_pattern: str = 'A'    # cycled over layers: 'A' attention block, 'M' Mamba2 block
    rope_theta: float = 10000.0
    d_state: int = 64           # Mamba2: state size n
    expand: int = 2             # Mamba2: d_inner = expand * n_embd
    headdim: int = 32           # Mamba2: p, the channels per head
    d_conv: int = 4             # Mamba2: causal conv width
    chunk_size: int = 64        # Mamba2: SSD chunk length
    fast_kernels: bool = True   # the fast paths of base/kernels.py; False: the readable definitions in this file
                                # (the same numbers to float rounding, slower)

    def __post_init__(self):
        if self.dropout_site not in SITES:
            raise ValueError(f"dropout_site={self.dropout_site!r}: valid sites are {', '.join(SITES)}")
        bad = sorted(set(self.block_pattern) - set(BLOCK_KINDS)) or not self.block_pattern
        if bad:
            raise ValueError(f"block_pattern={self.block_pattern!r}: use the letters "
                             + ", ".join(f"'{k}' ({v})" for k, v in BLOCK_KINDS.items()))
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout}: must be in [0, 1)")
        if self.short_conv < 0:
            raise ValueError(f"short_conv={self.short_conv}: the number of previous positions mixed in, >= 0")
        if 'A' in self.block_pattern and self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if 'M' in self.block_pattern and (self.expand * self.n_embd) % self.headdim:
            raise ValueError(f"expand*n_embd={self.expand * self.n_embd} must be divisible by headdim={self.headdim}")

    @property
    def mlp_hidden(self):
        """SwiGLU's hidden width: 8/3 of the model's (the same parameters as a 4x MLP), in multiples of 32."""
        return 32 * math.ceil(8 * self.n_embd / 3 / 32)

    def layer_kind(self, i):
        return self.block_pattern[i % len(self.block_pattern)]

    def global_nope(self, i):
        """Attention layer i is global without RoPE: every nope_every-th attention layer, counted over
        attention layers only (W N W N)."""
        nth_attention = sum(self.layer_kind(j) == 'A' for j in range(i + 1))
        return self.nope_every > 0 and nth_attention % self.nope_every == 0

    def has_rope(self):
        """Whether some layer is RoPE attention: what rope_theta, window and a LengthScaling act on."""
        return any(self.layer_kind(i) == 'A' and not self.global_nope(i) for i in range(self.n_layer))

    @classmethod
    def from_checkpoint(cls, model_args, path):
        """The config a checkpoint saved (its model_args): every reader of a checkpoint builds it here.
        Checkpoints before nope_first's removal hold it: False is this code's layout, True is refused."""
        if model_args.get('nope_first'):          # the NoPE layer first in each group: N W N W
            raise SystemExit(f"{path} was trained with nope_first=True, which this code no longer builds: load it "
                             f"at the commit that trained it (its log.jsonl's provenance; archived ablate_pilot_niah: "
                             f"f14fc75)")
        return cls(**{k: v for k, v in model_args.items() if k != 'nope_first'})

# -----------------------------------------------------------------------------
# The dropout sites: D (inverted dropout) or VPAD, on the residual or before the linear layers.
# Both draw their keep mask m ~ Bernoulli(1 - p) from 16-bit slices of 64-bit random words: on a CPU a
# dropout's cost is the random number generator, not the arithmetic (F.dropout on 2M floats: ~14 ms, of
# which x * 2 is ~0.4 ms), and one draw for four elements quarters it. p is then quantized to 1/65536.

def draw_mask(x, p):
    """The random bits of a dropout mask on x. -> (r, threshold, p): keep an element where r >= threshold,
    with probability 1 - p, p quantized to 1/65536. torch's generator draws them (torch.randint, which
    Dynamo traces), so the run's seed and a checkpoint's RNG state fix every mask."""
    n = x.numel()
    words = torch.randint(-2**63, 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=x.device)
    r = words.view(torch.int16)[:n].view(x.shape)                          # one uniform int16 per element
    dropped = round(p * 65536)
    return r, dropped - 32768, dropped / 65536

def vpad(x, p, fast=False):
    """Training-mode VPAD: y = mu + m (x - mu) / sqrt(1 - p), m ~ Bernoulli(1 - p) per element, mu the
    per-coordinate mean of x over all the batch's tokens, taken without gradient."""
    if p == 0:
        return x
    r, threshold, p = draw_mask(x, p)
    if fast:   # fast path: this op in one compiled kernel whose backward keeps only the mask (base/kernels.py)
        return kernels.masked_scale(x, r, threshold, 1.0 / math.sqrt(1.0 - p), kernels.vpad_kernel)
    m = r >= threshold
    mu = x.detach().mean(dim=tuple(range(x.dim() - 1)), keepdim=True)      # (1, .., 1, C) per coordinate
    return mu + m * (x - mu) / math.sqrt(1 - p)

def inverted_dropout(x, p, fast=False):
    """Training-mode inverted dropout, D(x) = m x / (1 - p), with vpad's masks."""
    if p == 0:
        return x
    r, threshold, p = draw_mask(x, p)
    if fast:   # fast path: one compiled kernel whose backward keeps only the mask, as vpad's
        return kernels.masked_scale(x, r, threshold, 1.0 / (1.0 - p), kernels.dropout_kernel)
    return (r >= threshold) * x / (1 - p)

class Dropout(nn.Module):
    """D (affine=False) or VPAD (affine=True); the identity in eval mode."""
    def __init__(self, p, affine, fast=False):
        super().__init__()
        self.p, self.affine, self.fast = p, affine, fast

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        return (vpad if self.affine else inverted_dropout)(x, self.p, self.fast)

    def extra_repr(self):
        return f"p={self.p}, {'vpad' if self.affine else 'inverted'}"

def input_dropout(config):
    """The D before a linear layer that reads a normalization output: 'pre_linear' and 'vpad'."""
    if config.dropout_site in ('pre_linear', 'vpad'):
        return Dropout(config.dropout, affine=config.dropout_site == 'vpad', fast=config.fast_kernels)
    return nn.Identity()

def residual_dropout(config):
    """The D on each sublayer's output: 'pre_norm'."""
    return (Dropout(config.dropout, affine=False, fast=config.fast_kernels) if config.dropout_site == 'pre_norm'
            else nn.Identity())

# -----------------------------------------------------------------------------
# Attention: RoPE for any position, sliding window without a T x T mask, NoPE global layers

def rope_tables(T, D, theta, device, scaling=None):
    """(cos, sin) of the angles pos * theta^(-2i/d) for positions 0..T-1 and a head of width D, each
    (T, D/2) in fp32. GPT keeps them for its training length and all its RoPE layers read them:
    computed in each layer, they took ~30% of a compiled GPU step (H200, T=1024, torch.profiler).
    scaling: a LengthScaling past the training length (below), or None for the plain angles."""
    if scaling is not None and scaling.s != 1:
        inv_freq, mscale = scaled_frequencies(D, theta, scaling, device)
    else:
        inv_freq, mscale = theta ** (-torch.arange(0, D, 2, device=device, dtype=torch.float32) / D), 1.0  # (D/2,)
    angles = torch.arange(T, device=device, dtype=torch.float32)[:, None] * inv_freq       # (T, D/2)
    if mscale == 1.0:
        return angles.cos(), angles.sin()
    return angles.cos() * mscale, angles.sin() * mscale   # q and k both rotated: the logits scale by mscale^2

# What a practitioner does first to a RoPE model past its training length T, with no training: rescale
# RoPE at inference for an eval length L, s = L / T (recomputed per length, as Hugging Face's dynamic
# variants do), and/or scale the attention logits. Every variant is the plain model at s = 1, and it acts
# only on RoPE layers (through their tables: a factor c on cos and sin multiplies the logits by c^2).
# Mamba2 has no positions; its training-free fix slows the state's decay, one factor s_l per layer calibrated
# at the eval length: MambaExtend scales the time step (dt s_l), Mamba Modulation the decay rate
# (A = -exp(s_l A_log), so |A| becomes |A|^s_l). At s_l = 1 either is the plain model.
ROPE_SCALINGS = ('none', 'pi', 'ntk', 'yarn')
SSM_SCALINGS = ('none', 'dt', 'decay')

@dataclass(frozen=True)
class LengthScaling:
    rope: str = 'none'     # 'pi': positions / s; 'ntk': base theta s^(D/(D-2)); 'yarn': NTK-by-parts + mscale
    logit: str = 'none'    # 'none'; 'log': logits x log(L) / log(T); 'factor': logits x factor where s > 1
    factor: float = 1.0    # 'factor''s c
    s: float = 1.0         # L / T
    T: int = 64            # the training length (YaRN's original_max_position_embeddings; 'log''s T)
    ssm: str = 'none'      # Mamba2 layers (below): 'dt' multiplies dt by s_l, 'decay' makes A = -exp(s_l A_log)
    ssm_scales: tuple = ()  # s_l, one per Mamba2 layer in order; one value for every layer; () = 1

def scaled_frequencies(D, theta, sc, device):
    """-> (inv_freq (D/2,), mscale): the rotary frequencies and the factor on cos and sin of a LengthScaling."""
    i = torch.arange(0, D, 2, device=device, dtype=torch.float32)           # 2i, i = 0 .. D/2-1
    plain = theta ** (-i / D)
    if sc.rope == 'pi':                            # angles at position s p are the plain ones at p
        inv_freq = plain / sc.s
    elif sc.rope == 'ntk':                         # the lowest frequency, theta^(-(D-2)/D), divided by exactly s
        inv_freq = (theta * sc.s ** (D / (D - 2))) ** (-i / D)
    elif sc.rope == 'yarn':                        # Peng et al. 2023, as transformers' _compute_yarn_parameters
        def dim(rotations):                        # the index i whose wavelength fits `rotations` times in T
            return D * math.log(sc.T / (rotations * 2 * math.pi)) / (2 * math.log(theta))
        low, high = max(math.floor(dim(32)), 0), min(math.ceil(dim(1)), D - 1)   # beta_fast 32, beta_slow 1
        ramp = ((torch.arange(D // 2, device=device, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
        inv_freq = plain / sc.s * ramp + plain * (1 - ramp)   # high frequencies kept, low ones interpolated
    else:
        inv_freq = plain
    mscale = 0.1 * math.log(sc.s) + 1 if sc.rope == 'yarn' and sc.s > 1 else 1.0
    if sc.logit == 'log':
        mscale *= math.sqrt(math.log(sc.s * sc.T) / math.log(sc.T))
    elif sc.logit == 'factor' and sc.s > 1:
        mscale *= math.sqrt(sc.factor)
    return inv_freq, mscale

def rope(x, cos, sin):
    """Rotate pairs (x[..., :d/2], x[..., d/2:]) by rope_tables' angles. x: (B, H, T, D), cos, sin in x's dtype."""
    D = x.shape[-1]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

def sliding_window_attention(q, k, v, window):
    """Causal attention where query t sees keys t-window+1 .. t. q, k, v: (B, H, T, D).
    Queries go in blocks of `window`; each block attends to its own and the previous block of keys
    under a (window x 2 window) band mask, so memory is O(T * window), never O(T^2)."""
    (B, H, T, D), W = q.shape, window
    nb = -(-T // W)                                    # number of query blocks
    pad = nb * W - T
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))           # (B, H, nb*W, D)
    # keys/values of block j are blocks j-1 and j: prepend one block of zeros, then unfold.
    # Blocks go into the batch dimension: 4-D inputs let SDPA use its fused kernels on a GPU.
    q = q.view(B, H, nb, W, D).transpose(1, 2).reshape(B * nb, H, W, D)
    k, v = (F.pad(t, (0, 0, W, 0)).unfold(2, 2 * W, W).transpose(-1, -2)   # (B, H, nb, 2W, D)
            .transpose(1, 2).reshape(B * nb, H, 2 * W, D) for t in (k, v))
    qpos = torch.arange(nb * W, device=q.device).view(nb, W, 1)           # absolute query position
    kpos = qpos[:, :1, :].transpose(1, 2) - W + torch.arange(2 * W, device=q.device)  # (nb, 1, 2W)
    band = (kpos <= qpos) & (kpos > qpos - W) & (kpos >= 0)              # (nb, W, 2W)
    band = band.expand(B, nb, W, 2 * W).reshape(B * nb, 1, W, 2 * W)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=band)          # (B*nb, H, W, D)
    return y.view(B, nb, H, W, D).transpose(1, 2).reshape(B, H, nb * W, D)[:, :, :T]

class ShortConv(nn.Module):
    """y_t = x_t + sum_{k=1..K} w_k * x_{t-k}, per channel, w = 0 at init: a causal depthwise
    convolution with the identity kept. It hands every position its predecessors' tokens without
    any position encoding, so a global NoPE layer can match a query key against "the token before
    this one" and copy the value that follows the key (one-layer associative recall, as the short
    convolutions of Zoology's hybrids and Canon layers do), and it sees the same K neighbours at any
    length. Without it, recall needs a previous-token head in an earlier layer first."""
    def __init__(self, C, K):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(K, C))

    def forward(self, x):                      # (B, T, C)
        y = x
        for k, w_k in enumerate(self.weight, start=1):
            y = y + w_k * F.pad(x, (0, 0, k, 0))[:, :-k]   # x shifted k positions later
        return y

class CausalSelfAttention(nn.Module):
    def __init__(self, config, use_rope, window):
        super().__init__()
        self.n_head, self.use_rope, self.window = config.n_head, use_rope, window
        self.conv = ShortConv(config.n_embd, config.short_conv) if config.short_conv else nn.Identity()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.c_proj.residual_out = True
        self.drop_in = input_dropout(config)

    def forward(self, x, rope_cs):             # x = N(residual): (B, T, C); rope_cs: rope_tables' (cos, sin)
        B, T, C = x.shape
        q, k, v = self.c_attn(self.drop_in(self.conv(x))).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        if self.use_rope:
            cos, sin = (t.to(q.dtype) for t in rope_cs)                     # bf16 under autocast
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = (sliding_window_attention(q, k, v, self.window) if self.window and self.window < T
             else F.scaled_dot_product_attention(q, k, v, is_causal=True))
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

class MLP(nn.Module):
    """SwiGLU: c_proj(silu(gate) * up), gate and up from one fused projection."""
    def __init__(self, config):
        super().__init__()
        hidden = config.mlp_hidden
        self.c_fc = nn.Linear(config.n_embd, 2 * hidden, bias=False)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=False)
        self.c_proj.residual_out = True
        self.drop_in = input_dropout(config)

    def forward(self, x):                      # x = N(residual): (B, T, C)
        gate, up = self.c_fc(self.drop_in(x)).chunk(2, dim=-1)
        return self.c_proj(F.silu(gate) * up)

# -----------------------------------------------------------------------------
# Mamba2: the selective scan and the mixer. The recurrence, per head (p channels, n states):
#     h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T      (p, n)
#     y_t = h_t C_t                                    (p,)
# ssd_scan_sequential is that loop, the definition; ssd_scan computes the same thing in chunks
# (SSD, Mamba2; written as mamba's ssd_minimal.py): inside a chunk as a masked matrix product,
# between chunks as a recurrence over one state per chunk, so cost and memory are linear in t.

def ssd_scan_sequential(x, dt, A, B, C, initial_state=None):
    """The recurrence as a plain loop over time; the reference for ssd_scan (same shapes)."""
    b, t, h, p = x.shape
    B, C = (u.repeat_interleave(h // u.shape[2], dim=2) for u in (B, C))  # (b, t, h, n): head i reads group i // (h/g)
    state = x.new_zeros(b, h, p, B.shape[-1]) if initial_state is None else initial_state
    ys = []
    for i in range(t):
        decay = torch.exp(dt[:, i] * A)                                      # (b, h)
        state = decay[..., None, None] * state + (dt[:, i, :, None] * x[:, i])[..., None] * B[:, i, :, None, :]
        ys.append(torch.einsum('bhpn,bhn->bhp', state, C[:, i]))
    return torch.stack(ys, dim=1), state

def segsum(a):
    """a: (..., l) log decays -> (..., l, l), S[i, j] = a[j+1] + .. + a[i] for j <= i and -inf above
    the diagonal, so that exp(S) is a chunk's decay matrix. A cumsum of a masked copy of a, as in
    ssd_minimal: a_cum[i] - a_cum[j] would cost |a_cum| eps in the exponent."""
    l = a.shape[-1]
    S = a[..., None].expand(*a.shape, l)                                   # (..., l, l): S[i, j] = a[i]
    S = S.masked_fill(~torch.ones(l, l, dtype=torch.bool, device=a.device).tril(-1), 0).cumsum(-2)
    return S.masked_fill(~torch.ones(l, l, dtype=torch.bool, device=a.device).tril(), -torch.inf)

def scan_inputs(x, dt, A, B, C, chunk_size):
    """The scan's setup: cast to fp32 at least (fp64 stays), the tail zero-padded to whole chunks with dt = 0,
    which neither decays nor writes the state: padding is exact."""
    h, g = x.shape[2], B.shape[2]
    assert h % g == 0, f"B, C have {g} groups, which must divide the {h} heads"
    dtype, pad = torch.promote_types(x.dtype, torch.float32), (-x.shape[1]) % chunk_size
    x, dt, A, B, C = (u.to(dtype) for u in (x, dt, A, B, C))
    if pad:
        x, B, C = (F.pad(u, (0, 0, 0, 0, 0, pad)) for u in (x, B, C))
        dt = F.pad(dt, (0, 0, 0, pad))
    return x, dt, A, B, C

def ssd_scan(x, dt, A, B, C, chunk_size, initial_state=None, fast=False):
    """Chunked selective scan. x: (b, t, h, p), dt: (b, t, h) > 0, A: (h,) < 0, B, C: (b, t, g, n)
    with g groups of heads, head i reading group i // (h/g): g = h gives each head its own B, C; the
    Mamba2 mixer has g = 1, one B, C shared by all heads; initial_state: (b, h, p, n), h_0 (None: zero).
    -> y: (b, t, h, p) in x's dtype, final_state: (b, h, p, n) in fp32 (or fp64). Any t (scan_inputs
    pads it)."""
    (b, t, h, p), (g, n), out_dtype, l = x.shape, B.shape[2:], x.dtype, chunk_size
    with torch.autocast(device_type=x.device.type, enabled=False):
        x, dt, A, B, C = scan_inputs(x, dt, A, B, C, l)
        S0 = x.new_zeros(b, h, p, n) if initial_state is None else initial_state.to(x.dtype)
        if fast:   # fast path: steps 1-4 below with a written-out backward (base/kernels.py), tested against them
            y, final_state = kernels.ssd_scan_fast(x, dt, A, B, C, l, S0)
            return y[:, :t].to(out_dtype), final_state
        c = x.shape[1] // l                                                # chunks
        B, C = (u.repeat_interleave(h // g, dim=2).view(b, c, l, h, n) for u in (B, C))  # head i: group i // (h/g)
        X = (x * dt[..., None]).view(b, c, l, h, p)                        # dt_t x_t, what step t writes
        a = (dt * A).view(b, c, l, h).permute(0, 3, 1, 2)                 # (b, h, c, l): log decay of each step
        a_cum = a.cumsum(-1)                                               # (b, h, c, l)
        # 1. the output within each chunk (diagonal blocks): y_i = sum_{j<=i} C_i.B_j exp(a_{j+1}+..+a_i) X_j
        L = torch.exp(segsum(a))                                           # (b, h, c, l, l)
        Y_diag = torch.einsum('bclhn,bcshn,bhcls,bcshp->bclhp', C, B, L, X)
        # 2. the state each chunk writes, decayed to the chunk's end
        decay_states = torch.exp(a_cum[..., -1:] - a_cum)                  # (b, h, c, l)
        states = torch.einsum('bclhn,bhcl,bclhp->bchpn', B, decay_states, X)
        # 3. the states passed between chunks, a recurrence over chunks: S_{k+1} = exp(a_cum_k[-1]) S_k + states_k
        chunk_decay = torch.exp(a_cum[..., -1])                            # (b, h, c)
        S = [S0]
        for k in range(c):
            S.append(chunk_decay[:, :, k, None, None] * S[-1] + states[:, k])
        S_in = torch.stack(S[:-1], dim=1)                                  # (b, c, h, p, n): entering each chunk
        # 4. the output of the incoming states: y_i += exp(a_1 + .. + a_i) S C_i
        Y_off = torch.einsum('bclhn,bchpn,bhcl->bclhp', C, S_in, torch.exp(a_cum))
    y = (Y_diag + Y_off).reshape(b, c * l, h, p)
    return y[:, :t].to(out_dtype), S[-1]

def gated_rms_norm(y, x, D, z, weight, eps: float):
    """RMSNorm((y + D x) * silu(z)) * weight: Mamba2's skip connection, gate and output norm.
    y, x: (B, T, h, p), D: (h,), z: (B, T, h p) -> (B, T, h p)"""
    y = (y + x * D[:, None]).flatten(2)                                       # (B, T, h p)
    return F.rms_norm(y * F.silu(z), (y.shape[-1],), weight, eps)

gated_rms_norm_fused = kernels.compiled(gated_rms_norm)   # this code in one kernel, and one for its backward

class GatedRMSNorm(nn.Module):
    def __init__(self, d, fast=False, eps=1e-5):
        super().__init__()
        self.weight, self.eps, self.fast = nn.Parameter(torch.ones(d)), eps, fast

    def forward(self, y, x, D, z):
        # fast path: gated_rms_norm compiled, one kernel (eagerly it is five: add, flatten, silu, mul, norm)
        return (gated_rms_norm_fused if self.fast else gated_rms_norm)(y, x, D, z, self.weight, self.eps)

def causal_conv_silu(x, w, bias, fast=False):
    """silu(causal depthwise conv1d(x)): out_t = silu(bias + sum_k w_k x_{t-K+1+k}), per channel.
    x: (B, T, C) in any float dtype; w: (C, 1, K) and bias: (C,) in the weights' dtype (fp32, or fp64 in tests), in
    nn.Conv1d's layout. Computed in fp32 at least, returned in x's dtype."""
    if fast:   # fast path: shifted multiply-adds, a backward keeping only x (base/kernels.py); tested against this
        return kernels.CausalConvSilu.apply(x, w[:, 0], bias)
    T, K = x.shape[1], w.shape[-1]
    with torch.autocast(device_type=x.device.type, enabled=False):        # in fp32, not autocast's bf16
        out = F.conv1d(x.to(w.dtype).transpose(1, 2), w, bias, padding=K - 1, groups=x.shape[-1])[..., :T]  # (B, C, T)
    return F.silu(out).transpose(1, 2).to(x.dtype)

class Mamba2(nn.Module):
    def __init__(self, config):
        super().__init__()
        d_inner = config.expand * config.n_embd
        self.d_inner, self.d_state, self.headdim = d_inner, config.d_state, config.headdim
        self.n_heads, self.chunk_size = d_inner // config.headdim, config.chunk_size
        conv_dim = d_inner + 2 * config.d_state                    # x, B, C (one group of B, C)
        self.in_proj = nn.Linear(config.n_embd, 2 * d_inner + 2 * config.d_state + self.n_heads, bias=False)
        # the causal depthwise conv's filters, in nn.Conv1d's layout and with its initialisation, as upstream
        K = config.d_conv
        conv_weight = nn.init.kaiming_uniform_(torch.empty(conv_dim, 1, K), a=math.sqrt(5))   # (C, 1, K)
        conv_bias = torch.empty(conv_dim).uniform_(-1 / math.sqrt(K), 1 / math.sqrt(K))       # (C,)
        # upstream initialisation: A in [1, 16], dt in [1e-3, 1e-1] log-uniform, D = 1
        self.A_log = nn.Parameter(torch.log(torch.empty(self.n_heads).uniform_(1, 16)))
        dt = torch.exp(torch.empty(self.n_heads).uniform_(math.log(1e-3), math.log(1e-1))).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))          # inverse softplus
        self.D = nn.Parameter(torch.ones(self.n_heads))
        # drawn before A_log, registered after D: the random draws and the parameter order of an
        # nn.Conv1d, as in mamba2_simple, so a seed gives the same model as that layout would
        self.conv1d_weight, self.conv1d_bias = nn.Parameter(conv_weight), nn.Parameter(conv_bias)
        self.norm = GatedRMSNorm(d_inner, fast=config.fast_kernels)
        self.fast = config.fast_kernels
        self.out_proj = nn.Linear(d_inner, config.n_embd, bias=False)
        self.out_proj.residual_out = True
        self.drop_in = input_dropout(config)
        self.drop_out_proj = input_dropout(config)      # out_proj also reads a norm's output

    def forward(self, u, state=None, ssm=None):
        """u = N(residual): (B, T, C). state: where the sequence continues from, (h_0 (B, h, p, n), the conv's last
        d_conv - 1 inputs (B, d_conv - 1, conv channels)), either None for a zero start (a document's start).
        ssm: (LengthScaling.ssm, s) or None. -> (B, T, C), the state at the sequence's end (the same pair)."""
        Bsz, T, _ = u.shape
        h, p, n = self.n_heads, self.headdim, self.d_state
        h0, conv0 = state if state is not None else (None, None)
        z, xBC, dt = self.in_proj(self.drop_in(u)).split([self.d_inner, self.d_inner + 2 * n, h], dim=-1)
        K = self.conv1d_weight.shape[-1]
        if conv0 is not None:               # a continued sequence: the conv reads the previous segment's last inputs
            xBC = torch.cat([conv0.to(xBC.dtype), xBC], dim=1)                   # (B, K-1+T, C)
        tail = xBC[:, max(xBC.shape[1] - (K - 1), 0):]                         # the conv's state at the end
        conv_tail = F.pad(tail, (0, 0, K - 1 - tail.shape[1], 0))                # (B, K-1, C), zeros before a start
        xBC = causal_conv_silu(xBC, self.conv1d_weight, self.conv1d_bias, self.fast)[:, xBC.shape[1] - T:]  # (B, T, C)
        x, B, C = xBC.split([self.d_inner, n, n], dim=-1)
        dt = F.softplus(dt.float() + self.dt_bias)                               # (B, T, h), fp32
        A_log = self.A_log.float()
        if ssm is not None and ssm[0] == 'dt' and ssm[1] != 1:
            dt = dt * ssm[1]                                                     # MambaExtend: every step s x longer
        if ssm is not None and ssm[0] == 'decay' and ssm[1] != 1:
            A_log = A_log * ssm[1]                                               # Mamba Modulation: |A| -> |A|^s
        A = -torch.exp(A_log)                                                    # (h,) < 0
        x = x.view(Bsz, T, h, p)
        y, final_state = ssd_scan(x, dt, A, B[:, :, None], C[:, :, None], self.chunk_size, h0,
                                  self.fast)                                     # (B, T, h, p); g = 1
        y = self.norm(y, x, self.D, z)                                           # (B, T, h p)
        return self.out_proj(self.drop_out_proj(y)), (final_state, conv_tail)    # (B, T, C), ((B, h, p, n), (B, K-1, C))

# -----------------------------------------------------------------------------
# Blocks and the model

class Block(nn.Module):
    """x = x + D_res(f(N(x))) per sublayer; D_res is the identity unless dropout_site='pre_norm'."""
    def __init__(self, config, i):
        super().__init__()
        self.kind = config.layer_kind(i)
        self.norm_1 = nn.RMSNorm(config.n_embd, eps=1e-5)
        self.drop_res = residual_dropout(config)
        if self.kind == 'A':
            global_nope = config.global_nope(i)
            self.mixer = CausalSelfAttention(config, use_rope=not global_nope,
                                             window=0 if global_nope else config.window)
            self.norm_2 = nn.RMSNorm(config.n_embd, eps=1e-5)
            self.mlp = MLP(config)
        else:
            self.mixer = Mamba2(config)

    def forward(self, x, rope_cs=None, state=None, ssm=None):
        """x: (B, T, C); rope_cs: GPT's RoPE tables; state, ssm: a Mamba2 layer's (Mamba2.forward).
        -> (x, the Mamba2 layer's state at the end; None for attention)"""
        if self.kind == 'M':
            y, state = self.mixer(self.norm_1(x), state, ssm)
            return x + self.drop_res(y), state
        x = x + self.drop_res(self.mixer(self.norm_1(x), rope_cs))
        return x + self.drop_res(self.mlp(self.norm_2(x))), None

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)   # tied with the LM head
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.norm_f = nn.RMSNorm(config.n_embd, eps=1e-5)
        # RoPE tables for the training length as buffers (not saved), so that a compiled step reads them:
        # computed inside the graph, Inductor inlines cos and sin into every layer's kernels, backward too.
        cos, sin = rope_tables(config.block_size, config.n_embd // config.n_head, config.rope_theta, 'cpu')
        self.register_buffer('rope_cos', cos, persistent=False)
        self.register_buffer('rope_sin', sin, persistent=False)
        self.apply(self._init_weights)
        print(f"model: {self.get_num_params() / 1e6:.2f}M parameters, layers " + "".join(self.describe_layers())
              + " (N global NoPE, R global RoPE, W sliding-window RoPE, M Mamba2)")

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            std = 0.02 / math.sqrt(2 * self.config.n_layer) if getattr(m, 'residual_out', False) else 0.02
            nn.init.normal_(m.weight, mean=0.0, std=std)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def describe_layers(self):
        """One letter per layer: W sliding-window RoPE, R full RoPE, N global NoPE, M Mamba2."""
        return ['M' if b.kind == 'M' else 'N' if not b.mixer.use_rope else 'W' if b.mixer.window else 'R'
                for b in self.blocks]

    def local_reach(self):
        """How many tokens back the position-bound routes alone can carry information: each sliding-
        window RoPE layer moves it window - 1 tokens, each attention layer's short convolution
        short_conv more. None when some layer sees the whole context by position (full-causal RoPE)
        or carries state (Mamba2): then there is no window to speak of."""
        layers = self.describe_layers()
        return None if set(layers) & {'R', 'M'} else (
            layers.count('W') * (self.config.window - 1) + len(layers) * self.config.short_conv)

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None, scaling=None, states=None):
        """idx: (B, T) token ids. targets: (B, T) ids, -1 = no loss there. -> (logits, loss, states), loss
        the mean cross-entropy over the positions with a target. The LM head runs only where a
        target is set: logits is (N, vocab) for the N positions with targets != -1, in row-major
        order. Under torch.compile the head runs on every position (a selection whose size depends on
        the data would split the graph) and CompiledOrEager, below, keeps those N rows after the call.
        Without targets, logits is (B, 1, vocab) for the last position and loss is None. scaling: a
        LengthScaling past the training length (RoPE layers, Mamba2 layers), None for the plain model.
        states: where each layer continues from, a list over layers of a Mamba2 layer's state
        (Mamba2.forward; None for attention layers), or None: every sequence starts afresh. The states
        returned are each layer's at the end of idx, in that form: the next call continues from them (a long
        sequence streamed in segments, or training from carried states)."""
        x = self.wte(idx)                                     # (B, T, C)
        T, cfg = idx.shape[1], self.config
        if T <= len(self.rope_cos) and (scaling is None or scaling.s == 1):
            rope_cs = self.rope_cos[:T], self.rope_sin[:T]    # (T, D/2) each, shared by all layers
        else:                              # longer than training, or rescaled: the angles computed here
            rope_cs = rope_tables(T, cfg.n_embd // cfg.n_head, cfg.rope_theta, idx.device, scaling)
        finals = []
        for i, block in enumerate(self.blocks):
            x, state = block(x, rope_cs, states[i] if states else None, self.ssm_scale(scaling, i))
            finals.append(state)
        x = self.norm_f(x)
        if targets is None:
            return F.linear(x[:, [-1], :], self.wte.weight), None, finals   # (B, 1, V)
        n_targets = (targets != -1).sum().clamp(min=1)
        if torch.compiler.is_compiling():                           # (B*T, V) logits; CompiledOrEager keeps N rows
            x, targets = x.flatten(0, 1), targets.flatten()         # (B*T, C), (B*T,)
        else:
            sel = targets != -1
            x, targets = x[sel], targets[sel]                       # (N, C), (N,)
        logits = F.linear(x, self.wte.weight)
        loss = F.cross_entropy(logits.float(), targets, ignore_index=-1, reduction='sum') / n_targets
        return logits, loss, finals

    def ssm_scale(self, scaling, i):
        """Layer i's (LengthScaling.ssm, s_l) where a LengthScaling rescales Mamba2 layers, else None."""
        if scaling is None or scaling.ssm == 'none' or self.blocks[i].kind != 'M' or not scaling.ssm_scales:
            return None
        s = scaling.ssm_scales
        return scaling.ssm, s[0] if len(s) == 1 else s[sum(b.kind == 'M' for b in self.blocks[:i])]

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW with decay on the weight matrices of linear layers only: not on norms, biases,
        the (tied) embedding, the conv filters, or Mamba2's A_log, D and dt_bias."""
        matrices = {id(m.weight) for m in self.modules() if isinstance(m, nn.Linear)}
        decay = [p for p in self.parameters() if id(p) in matrices]
        no_decay = [p for p in self.parameters() if id(p) not in matrices]
        groups = [{'params': decay, 'weight_decay': weight_decay}, {'params': no_decay, 'weight_decay': 0.0}]
        names = {id(p): n for n, p in self.named_parameters()}
        kinds = sorted({'.'.join(names[id(p)].split('.')[2:]) if names[id(p)].startswith('blocks.') else names[id(p)]
                        for p in no_decay})
        print(f"weight decay {weight_decay}: {len(decay)} matrices, {sum(p.numel() for p in decay):,} params; "
              f"no decay: {len(no_decay)} tensors, {sum(p.numel() for p in no_decay):,} params ({', '.join(kinds)})")
        fused = device_type == 'cuda' and 'fused' in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({'fused': True} if fused else {}))

    def flops_per_token(self, T, head_fraction=1.0):
        """Forward + backward FLOPs per token at length T: 6 per parameter (PaLM appendix B), with
        the tied LM head counted only on the fraction of positions that reach it (head_fraction:
        the share of positions with a target), plus attention scores over the keys each layer
        actually sees (the window, if any). The SSD scan's own FLOPs are small next to the
        projections and are left out."""
        cfg = self.config
        head = cfg.vocab_size * cfg.n_embd
        flops = 6 * (self.get_num_params() - head) + 6 * head * head_fraction
        for b in self.blocks:
            if b.kind == 'A':
                keys = min(T, b.mixer.window) if b.mixer.window else T
                flops += 12 * cfg.n_embd * keys
        return flops

    def estimate_mfu(self, tokens_per_iter, dt, peak_flops, head_fraction=1.0):
        """Model FLOPs utilization: achieved FLOP/s over `peak_flops` (the device's, per process;
        a config key, since it depends on the hardware and the dtype)."""
        return self.flops_per_token(self.config.block_size, head_fraction) * tokens_per_iter / dt / peak_flops

# -----------------------------------------------------------------------------
# The model compiled

class CompiledOrEager(nn.Module):
    """A GPT under torch.compile (train.py's compile=True); if compiling fails (at the first call), one line
    saying so and the model runs eagerly from then on. Where torch allows, the backward is compiled with the forward, so
    that its failure shows at that call too (Inductor once failed on Mamba2's cumsum on a GPU)."""
    def __init__(self, model, backend='inductor'):
        super().__init__()
        self.model = model
        self.compiled = [torch.compile(model, backend=backend)]     # in a list: not a second copy of the parameters
        if hasattr(torch._functorch.config, 'force_non_lazy_backward_lowering'):
            torch._functorch.config.force_non_lazy_backward_lowering = True

    def forward(self, *args, **kw):
        """GPT.forward's (logits, loss, states). The compiled graph runs the LM head on every
        position, logits (B*T, V): a selection whose size depends on the data would split it; the rows with a
        target are picked here, after it: (N, V), as eagerly."""
        if self.compiled:
            try:
                logits, loss, states = self.compiled[0](*args, **kw)
            except torch._dynamo.exc.BackendCompilerFailed as e:
                why = getattr(e, 'inner_exception', None) or e
                print(f"torch.compile failed ({type(why).__name__}: {str(why).strip().splitlines()[0][:200]}); "
                      f"training without it")
                self.compiled.clear()
            else:
                targets = args[1] if len(args) > 1 else None
                if targets is not None and len(logits) == targets.numel():   # (not if Dynamo ran it eagerly)
                    logits = logits[targets.flatten() != -1]
                return logits, loss, states
        return self.model(*args, **kw)
