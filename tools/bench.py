"""
Performance figures, each a ratio against a baseline measured in the same run.

    python -m tools.bench                  # all CPU sections
    python -m tools.bench --only=sites     # one of: sites, mamba, dropout, readable, saved, scan, memory, stream
    python -m tools.bench --device=cuda --peak_flops=989e12   # the GPU sections: gpu_sites, gpu_4k

Timed sections run their variants in alternating rounds (a, b, c, a, b, c, ...), so a load that
comes and goes on a shared machine hits every variant alike, and print the median with the spread
(min-max over rounds) and the median of the per-round ratios: two variants whose ranges overlap
are not ranked. Rerun before believing a small difference.
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import contextlib
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import model as M
from configurator import configure, settings_of
from model import GPT, SITES, CompiledOrEager, GPTConfig, ssd_scan, ssd_scan_sequential
from base import kernels

# The shapes of results/bench: an earlier main run's transformer (window 64, NoPE every 2nd layer,
# config/archive/niah_128.py) and config/mamba2.py's Mamba2, both at width 128, depth 4
TRANSFORMER = dict(n_layer=4, n_head=4, n_embd=128, window=64, nope_every=2, short_conv=0)
MAMBA2 = dict(n_layer=4, n_embd=128, block_pattern='M', d_state=32, expand=2, headdim=32, chunk_size=64)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository: its configs, model.py

SETTINGS = dict(
    only='',           # one section: sites, mamba, dropout, readable, saved, scan, memory, stream; with --device=cuda
                       # (or --tiny=True) gpu_sites, gpu_4k
    device='cpu',      # 'cuda' (or 'cuda:1'): the GPU sections, compiled, bf16 autocast, fused AdamW
    peak_flops=0.0,    # the GPU's dense bf16 peak in FLOP/s, for MFU (H100 / H200 SXM: 989e12); 0 = no MFU
    tiny=False,        # the GPU sections' code at tiny shapes, eager, on any device (tools/gpu_check.py's dry run)
)


def alternating(fns, rounds, warmup=1):
    """{name: fn} -> {name: [seconds per round]}, the fns timed in turn within each round."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def report(times, base, unit=1000, label='ms'):
    """One line per variant: median [min-max], and the median [min-max] of its per-round ratio to base."""
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times[base])]
        print(f"{name:<28} {statistics.median(ts) * unit:8.1f} {label} [{min(ts) * unit:.1f}-{max(ts) * unit:.1f}]"
              f"   {statistics.median(ratios):5.2f}x {base} [{min(ratios):.2f}-{max(ratios):.2f}]")


def timed_step(cfg, batch, T, answers_only):
    """A closure running one training step (forward, backward, AdamW) of a fresh model on fixed data.
    answers_only: targets on the last 1/8 of each row, as loss_on='answers' leaves few targets."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=T, **cfg))
    opt = m.configure_optimizers(0.0, 1e-3, (0.9, 0.95), 'cpu')
    idx = torch.randint(0, cfg['vocab_size'], (batch, T + 1))
    x, y = idx[:, :-1], idx[:, 1:].clone()
    if answers_only:
        y[:, :T - T // 8] = -1

    def step():
        _, loss, _ = m(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def bench_sites(rounds=6):
    """Training step per dropout site: the transformer at 4 layers, width 128, 16 x 256 tokens."""
    print("\n== training step per dropout site: transformer, 4 layers, width 128, 16 x 256 tokens, "
          f"dropout 0.1, {rounds} alternating rounds ==")
    steps = {site: timed_step(dict(vocab_size=2048, dropout=0.1, dropout_site=site, **TRANSFORMER), 16, 256, False)
             for site in SITES}
    report(alternating(steps, rounds), 'none')


def bench_mamba(rounds=6):
    """Mamba2 (config/mamba2.py) vs the transformer above, a step each, both with vpad."""
    for batch, T, vocab in ((32, 128, 1310), (16, 256, 2048)):
        print(f"\n== training step, Mamba2 vs transformer: 4 layers, width 128, {batch} x {T} tokens, vocab {vocab}, "
              f"vpad 0.1, targets on the last 1/8 of each row, {rounds} alternating rounds ==")
        steps = {name: timed_step(dict(vocab_size=vocab, dropout=0.1, dropout_site='vpad', **arch), batch, T, True)
                 for name, arch in (('transformer', TRANSFORMER), ('mamba2', MAMBA2))}
        report(alternating(steps, rounds), 'transformer')


def bench_dropout(rounds=15):
    """The dropout ops on one tensor, forward + backward. F.dropout draws a float per element; both
    ops here draw 16-bit slices of 64-bit random words (4 elements per draw), which is where their
    speed-up over F.dropout comes from; the compiled kernels then fuse the arithmetic."""
    print(f"\n== dropout ops on a (4096, 512) fp32 tensor, p = 0.1, forward + backward, {rounds} alternating rounds ==")
    x = torch.randn(16 * 256, 512, requires_grad=True)
    g = torch.randn_like(x)

    def fb(op, compiled=True):
        def run():
            with contextlib.nullcontext() if compiled else kernels.eager():
                op().backward(g)
        return run
    ops = {'F.dropout (float masks)': fb(lambda: F.dropout(x, 0.1, True)),
           'inverted_dropout (kernel)': fb(lambda: M.inverted_dropout(x, 0.1, fast=True)),
           'inverted_dropout (eager)': fb(lambda: M.inverted_dropout(x, 0.1, fast=True), False),
           'vpad (kernel)': fb(lambda: M.vpad(x, 0.1, fast=True)),
           'vpad (eager)': fb(lambda: M.vpad(x, 0.1, fast=True), False),
           'vpad (readable)': fb(lambda: M.vpad(x, 0.1))}
    report(alternating(ops, rounds, warmup=2), 'F.dropout (float masks)')


def bench_readable(rounds=7, calls=20):
    """What each fast kernel buys: model.py's readable definition of the op under torch.compile (forward and
    backward compiled together, as compile=True runs the model) against the kernel the model runs by default,
    forward + backward at the shapes the studies train: 32 rows x 64 tokens, the Mamba2 recipe's mixer (width
    64: d_inner 128, 4 heads of 32, d_state 64, one chunk of 64) and the second scale's width (128) for the
    dropout sites. The readable gated norm eagerly, against itself compiled (its fast path)."""
    print(f"\n== readable definitions under torch.compile vs the fast kernels, forward + backward, {calls} calls "
          f"a round, {rounds} alternating rounds ==")
    gen = torch.Generator().manual_seed(0)

    def fb(fn, *args):
        leaves = [a for a in args if a.requires_grad]

        def run():
            for _ in range(calls):
                out = fn(*args)
                out = out[0] if isinstance(out, tuple) else out
                torch.autograd.grad(out.square().sum(), leaves)
        return run
    x = torch.randn(32, 64, 128, generator=gen, requires_grad=True)
    for name, op in (('vpad', M.vpad), ('inverted_dropout', M.inverted_dropout)):
        print(f"-- {name}, x (32, 64, 128), p = 0.1")
        report(alternating({'kernel': fb(lambda x: op(x, 0.1, fast=True), x),
                            'readable, compiled': fb(torch.compile(lambda x: op(x, 0.1)), x)}, rounds, warmup=2),
               'readable, compiled')
    b, t, h, p, n = 32, 64, 4, 32, 64
    scan_args = [torch.randn(b, t, h, p, generator=gen), F.softplus(torch.randn(b, t, h, generator=gen) - 2),
                 -torch.rand(h, generator=gen) * 15 - 1, torch.randn(b, t, 1, n, generator=gen),
                 torch.randn(b, t, 1, n, generator=gen)]
    scan_args = [a.requires_grad_() for a in scan_args]
    print(f"-- ssd_scan, x ({b}, {t}, {h}, {p}), one B, C (n = {n}), chunk 64")
    report(alternating({'kernel': fb(lambda *a: ssd_scan(*a, chunk_size=64, fast=True), *scan_args),
                        'readable, compiled': fb(torch.compile(lambda *a: ssd_scan(*a, chunk_size=64)), *scan_args)},
                       rounds, warmup=2), 'readable, compiled')
    conv = [torch.randn(b, t, 256, generator=gen), torch.randn(256, 1, 4, generator=gen) / 2,
            torch.randn(256, generator=gen) / 2]
    conv = [a.requires_grad_() for a in conv]
    print("-- causal_conv_silu, x (32, 64, 256), 4 taps")
    report(alternating({'kernel': fb(lambda *a: M.causal_conv_silu(*a, fast=True), *conv),
                        'readable, compiled': fb(torch.compile(M.causal_conv_silu), *conv)}, rounds, warmup=2),
           'readable, compiled')
    norm = [torch.randn(b, t, h, p, generator=gen), torch.randn(b, t, h, p, generator=gen),
            torch.randn(h, generator=gen), torch.randn(b, t, h * p, generator=gen), torch.ones(h * p)]
    norm = [a.requires_grad_() for a in norm]
    print("-- gated_rms_norm, y, x (32, 64, 4, 32): its fast path is this code compiled")
    report(alternating({'fused (compiled)': fb(lambda *a: M.gated_rms_norm_fused(*a, 1e-5), *norm),
                        'readable, eager': fb(lambda *a: M.gated_rms_norm(*a, 1e-5), *norm)}, rounds, warmup=2),
           'readable, eager')


def saved_for_backward_bytes(fn, exclude):
    """Bytes of the distinct storages autograd keeps for fn's backward, leaving out `exclude`."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    kept = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            kept[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(kept.values())


def read_config(name):
    """The settings of a run of config/<name>.py, read as train.py reads them (from the repo root: a
    config may run another, as gpu_mamba2_4k runs gpu_vpad_4k)."""
    import train
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return configure(settings_of(vars(train)), [os.path.join('config', name + '.py')], quiet=True)
    finally:
        os.chdir(cwd)


def bench_saved():
    """What one layer keeps for backward per 4096-token row at the GPU configs' width (768, dropout
    0.1, vpad), the parameters left out, fp32 and under bfloat16 autocast (the GPU runs' dtype); then
    each GPU config's total, layers x rows per micro-batch, against an 80 GB card."""
    print("\n== saved for backward, one layer, one 4096-token row, width 768 (saved_tensors_hooks, "
          "distinct storages) ==")
    configs = {name: read_config(name) for name in ('gpu_vpad_4k', 'gpu_mamba2_4k')}
    per_row = {}
    with kernels.eager():                  # what is kept for backward, not speed: no compile time
        for name, kind in (('gpu_vpad_4k', 'attention block (window 1024)'), ('gpu_mamba2_4k', 'Mamba2 block')):
            c = configs[name]
            keys = ('n_layer', 'n_head', 'n_embd', 'window', 'nope_every', 'short_conv', 'dropout', 'dropout_site',
                    'block_pattern', 'd_state', 'expand', 'headdim', 'chunk_size')
            block = M.Block(GPTConfig(vocab_size=2048, **{k: c[k] for k in keys if k in c}), 0).train()
            x = torch.randn(1, c['block_size'], c['n_embd'], requires_grad=True)
            rope_cs = M.rope_tables(c['block_size'], c['n_embd'] // c['n_head'], 10000.0, 'cpu')
            for dtype in ('fp32', 'bf16 autocast'):
                with torch.autocast('cpu', dtype=torch.bfloat16, enabled=dtype != 'fp32'):
                    n = saved_for_backward_bytes(lambda: block(x, rope_cs)[0], exclude=list(block.parameters()))
                per_row[name, dtype] = n
                extra = f", chunk {c['chunk_size']}" if 'chunk_size' in c else ''
                print(f"{kind + extra:<36} {dtype:<14} {n / 2**30:6.3f} GiB per row")
    print("per config, layers x rows per micro-batch x the bf16 figure (activations only: no weights, "
          "optimizer state, logits or eval):")
    for name, c in configs.items():
        total = c['n_layer'] * c['batch_size'] * per_row[name, 'bf16 autocast']
        print(f"{name:<16} {c['n_layer']} layers x {c['batch_size']} rows = {total / 1e9:5.1f} GB of 80 GB "
              f"({total / 80e9:.0%}); tokens per step "
              f"{c['batch_size'] * c['gradient_accumulation_steps'] * c['block_size']:,}")


def bench_scan():
    """The chunked SSD scan as the model runs it (kernels.ssd_scan_fast) and as written to be read
    (model.ssd_scan), vs the sequential loop both must equal."""
    print("\n== ssd_scan_fast and ssd_scan vs the sequential recurrence (b=1, h=8, p=32, n=64, one B, C for all "
          "heads, chunk 64, fp32) ==")
    for t, backward in ((1024, True), (4096, False)):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(1, t, 8, 32, generator=g)
        dt = F.softplus(torch.randn(1, t, 8, generator=g) - 2)
        A = -torch.rand(8, generator=g) * 15 - 1
        B, C = torch.randn(1, t, 1, 64, generator=g), torch.randn(1, t, 1, 64, generator=g)
        args = [a.requires_grad_(backward) for a in (x, dt, A, B, C)]
        y_ref, _ = ssd_scan_sequential(*args)
        scans = {'ssd_scan_fast': lambda: ssd_scan(*args, chunk_size=64, fast=True),
                 'ssd_scan': lambda: ssd_scan(*args, chunk_size=64)}
        err = {name: (scan()[0] - y_ref).abs().max().item() for name, scan in scans.items()}

        def run(fn):
            if backward:
                return lambda: fn()[0].sum().backward()
            return lambda: torch.no_grad()(fn)()
        times = alternating({'sequential': run(lambda: ssd_scan_sequential(*args))}
                            | {name: run(scan) for name, scan in scans.items()}, rounds=3)
        t_seq = statistics.median(times['sequential'])
        what = 'forward+backward' if backward else 'forward'
        print(f"t={t:<5} {what:<17} {'sequential':<14}{t_seq * 1000:8.1f} ms")
        for name in scans:
            t_scan = statistics.median(times[name])
            print(f"{'':<25}{name:<14}{t_scan * 1000:8.1f} ms: {t_seq / t_scan:5.1f}x faster; "
                  f"max |diff| {err[name]:.1e}")


MEMORY_CODE = """
import resource, sys, torch
from model import GPT, CompiledOrEager, GPTConfig
arch, T = sys.argv[1], int(sys.argv[2])
cfg = dict(vocab_size=2048, block_size=128, n_layer=4, n_head=4, n_embd=128, short_conv=0, dropout_site='none')
cfg.update(dict(window=dict(window=64, nope_every=0), mamba2=dict(block_pattern='M'))[arch])
m = GPT(GPTConfig(**cfg)).eval()
with torch.no_grad():
    m(torch.randint(0, 2048, (1, T)))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_memory():
    """Peak memory of an eval forward (batch 1) as the length grows: the growth should be linear."""
    print("\n== eval forward: peak RSS of the whole process (batch 1, 4 layers, width 128) ==")
    for arch in ('window', 'mamba2'):
        peaks = []
        for T in (32768, 65536, 131072):
            out = subprocess.run([sys.executable, '-c', MEMORY_CODE, arch, str(T)], cwd=ROOT,
                                 capture_output=True, text=True, check=True)
            peaks.append(int(out.stdout.split()[-1]) / 1024)
            step = f"  +{peaks[-1] - peaks[-2]:7.1f} MiB for +{T // 2} tokens" if len(peaks) > 1 else ""
            print(f"{arch:<7} T={T:<7} {peaks[-1]:8.1f} MiB{step}")


def bench_stream(rounds=3):
    """The final eval of a Mamba2 run to 1024x: one mqar example per length scored by eval_lengths (streamed in
    segments of STREAM_SEGMENT tokens past that length), seconds per example against the 64x one's per token."""
    import eval_lengths
    import sample_data
    c = read_config('mamba2_sensitive')
    keys = ('n_layer', 'n_embd', 'block_pattern', 'd_state', 'expand', 'headdim', 'd_conv', 'chunk_size')
    tok = sample_data.build_tokenizer()
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=c['block_size'], dropout_site='none',
                          **{k: c[k] for k in keys})).eval()
    print(f"\n== eval of config/mamba2_sensitive.py's model, one mqar example a length, batch 1, streamed past "
          f"{eval_lengths.STREAM_SEGMENT} tokens; {torch.get_num_threads()} thread(s) ==")
    mults = (64, 256, 1024)
    examples = {m: sample_data.eval_examples('mqar', tok, m * c['block_size'], 1) for m in mults}
    times = alternating({m: lambda m=m: eval_lengths.accuracy_on(model, examples[m], 1, 'cpu') for m in mults}, rounds)
    base = statistics.median(times[64]) / 64
    for m in mults:
        t = statistics.median(times[m])
        print(f"{m:>5}x ({m * c['block_size']:>6,} tokens): {t:7.3f} s [{min(times[m]):.3f}-{max(times[m]):.3f}] an "
              f"example, {t / m / base:.2f}x the 64x example's time per token")


# -----------------------------------------------------------------------------
# GPU sections: compiled steps of the GPU configs' models, bf16 autocast, fused AdamW, random tokens
# with a target at every position (vocab 4096), as the first H200 measurement ran them

def gpu_model(name, **changes):
    """The model settings of config/<name>.py, with changes."""
    cfg = read_config(name)
    return {k: cfg[k] for k in GPTConfig.__dataclass_fields__ if k in cfg} | dict(vocab_size=4096) | changes


def gpu_step(cfg, batch, T, device, compile):
    """-> (step, model, run): one training step of a fresh model; run is the model compiled (kernels.py's
    CompiledOrEager, as train.py runs it: on a compiler failure it says so in one line and runs eagerly)
    or the model."""
    torch.manual_seed(0)
    device_type = device.split(':')[0]
    model = GPT(GPTConfig(**{**cfg, 'block_size': T})).to(device)
    opt = model.configure_optimizers(0.0, 1e-4, (0.9, 0.95), device_type)
    run = CompiledOrEager(model) if compile else model
    idx = torch.randint(0, cfg['vocab_size'], (batch, T + 1), device=device)
    x, y = idx[:, :-1], idx[:, 1:]

    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16):
            _, loss, _ = run(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, model, run


def bench_gpu_group(title, variants, base, device, peak_flops, rounds=5, steps=3):
    """variants: {name: (model settings, batch, T, compile)}, all held at once and timed in alternating
    rounds of `steps` steps each. Per variant: ms per step and its ratio to base, tokens/s, MFU against
    peak_flops, and peak memory: weights and optimizer state plus a step's largest transient, what a
    process training that model alone would reach."""
    print(f"\n== {title}, {rounds} alternating rounds of {steps} steps ==")
    cuda = device.startswith('cuda')
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    allocated = (lambda: torch.cuda.memory_allocated(device)) if cuda else (lambda: 0)
    torch._dynamo.reset()                  # Dynamo compiles GPT.forward once per variant: a fresh budget per group
    fns, info = {}, {}
    for name, (cfg, batch, T, compile) in variants.items():
        before, t0 = allocated(), time.perf_counter()
        step, model, run = gpu_step(cfg, batch, T, device, compile)
        for _ in range(2):                                              # compiles, and makes the optimizer state
            step()
        sync()
        how = 'eager' if not compile else 'compiled' if run.compiled else 'eager (compile failed)'
        info[name] = dict(tokens=batch * T, flops=model.flops_per_token(T) * batch * T, resident=allocated() - before,
                          transient=0, how=f"{how}, ready in {time.perf_counter() - t0:.0f} s")

        def timed(step=step, i=info[name]):
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            start = allocated()
            for _ in range(steps):
                step()
            sync()
            if cuda:
                i['transient'] = max(i['transient'], torch.cuda.max_memory_allocated(device) - start)
        fns[name] = timed
    times = alternating(fns, rounds, warmup=0)
    for name, ts in times.items():
        i, dt = info[name], statistics.median(ts) / steps
        ratios = [t / b for t, b in zip(ts, times[base])]
        mfu = f"MFU {i['flops'] / dt / peak_flops:5.1%}" if peak_flops else "MFU n/a"
        print(f"{name:<22} {dt * 1000:7.1f} ms [{min(ts) / steps * 1000:.1f}-{max(ts) / steps * 1000:.1f}]"
              f"  {statistics.median(ratios):5.2f}x {base} [{min(ratios):.2f}-{max(ratios):.2f}]"
              f"  {i['tokens'] / dt / 1e3:6.0f}K tok/s  {mfu}  peak {(i['resident'] + i['transient']) / 2**30:5.1f} GiB"
              f"  ({i['how']})")


def gpu_sites_variants():
    """The dropout sites at 12 layers x 768 (gpu_vpad_4k's width, full causal attention), 16 x 1024
    tokens; 'none, no RoPE' (every layer NoPE) shows what the rotation itself costs."""
    full = dict(window=0, nope_every=0, dropout_site='none')
    variants = {'none, no RoPE': (gpu_model('gpu_vpad_4k', **full | dict(nope_every=1)), 16, 1024, True)}
    return variants | {site: (gpu_model('gpu_vpad_4k', **full | dict(dropout_site=site)), 16, 1024, True)
                       for site in SITES}


def gpu_4k_variants():
    """gpu_vpad_4k's and gpu_mamba2_4k's models (the latter also eager) and, for reference, a
    full-causal transformer without dropout, 4 x 4096 tokens."""
    return {'full causal, none': (gpu_model('gpu_vpad_4k', window=0, nope_every=0, dropout_site='none'), 4, 4096, True),
            'gpu_vpad_4k': (gpu_model('gpu_vpad_4k'), 4, 4096, True),
            'gpu_mamba2_4k': (gpu_model('gpu_mamba2_4k'), 4, 4096, True),
            'gpu_mamba2_4k, eager': (gpu_model('gpu_mamba2_4k'), 4, 4096, False)}


def tiny(variants):
    """The variants at tiny shapes, eager: the GPU sections' code run in seconds on a CPU (a dry run)."""
    shrink = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=256, d_state=16, headdim=16, chunk_size=16)
    return {name: ({**cfg, **shrink, 'window': min(cfg['window'], 16)}, 2, T // 16, False)
            for name, (cfg, batch, T, compile) in variants.items()}


def bench_gpu_sites(device, peak_flops, small=False):
    bench_gpu_group("GPU training step per dropout site: 12 layers x 768, full causal, 16 x 1024 tokens, dropout 0.1"
                    + (" (tiny: 2 x 32, 2 x 64 tokens, eager)" if small else ''),
                    tiny(gpu_sites_variants()) if small else gpu_sites_variants(), 'none', device, peak_flops,
                    **(TINY_ROUNDS if small else {}))


def bench_gpu_4k(device, peak_flops, small=False):
    bench_gpu_group("GPU training step at 4 x 4096 tokens: the 4K configs' models"
                    + (" (tiny: 2 x 32, 2 x 256 tokens, eager)" if small else ''),
                    tiny(gpu_4k_variants()) if small else gpu_4k_variants(), 'gpu_vpad_4k', device, peak_flops,
                    **(TINY_ROUNDS if small else {}))


TINY_ROUNDS = dict(rounds=2, steps=1)     # a dry run checks the code, it measures nothing


if __name__ == '__main__':
    cpu = dict(sites=bench_sites, mamba=bench_mamba, dropout=bench_dropout, readable=bench_readable,
               saved=bench_saved, scan=bench_scan, memory=bench_memory, stream=bench_stream)
    gpu = dict(gpu_sites=bench_gpu_sites, gpu_4k=bench_gpu_4k)
    if any(a in ('-h', '--help') for a in sys.argv[1:]):
        print(__doc__.strip() + '\n')
    cfg = configure(SETTINGS, sys.argv[1:])
    only, device = cfg['only'], cfg['device']
    benches = gpu if device.startswith('cuda') or cfg['tiny'] else cpu
    if device != 'cpu' and not device.startswith('cuda'):
        sys.exit(f"--device={device}: use cpu or cuda (cuda:N)")
    if only and only not in benches:
        sys.exit(f"--only={only}: with --device={device} choose one of {', '.join(benches)}")
    if device.startswith('cuda') and not torch.cuda.is_available():
        sys.exit(f"--device={device}: no CUDA device here (torch {torch.__version__}"
                 f"{', a CPU-only build' if torch.version.cuda is None else ''}); the GPU sections need a GPU")
    if device.startswith('cuda'):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True   # as train.py
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}")
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    configurator.started()   # checked: Ctrl-C mid-bench is Python's KeyboardInterrupt again
    for name, fn in benches.items():
        if only in ('', name) and benches is gpu:
            with kernels.eager() if cfg['tiny'] else contextlib.nullcontext():   # tiny: no compile at all
                fn(device, cfg['peak_flops'], cfg['tiny'])
        elif only in ('', name):
            fn()
