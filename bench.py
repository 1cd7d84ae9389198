"""
Performance figures, each a ratio against a baseline measured in the same run (SPEC section 8).

    python bench.py                  # all
    python bench.py --only=dropout   # one of: step, dropout, scan, memory

Times are medians of repeated runs after a warm-up; on a shared machine, rerun before believing
a small difference.
"""

import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import model as M
from model import GPT, GPTConfig, ssd_scan, ssd_scan_sequential


def timeit(fn, reps=10, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_step():
    """Training step (forward, backward, AdamW) at 4 layers, width 128, 16 x 256 tokens."""
    print("\n== training step: 4 layers, width 128, batch 16 x 256 tokens, dropout 0.1 ==")
    idx = torch.randint(0, 2048, (16, 257))
    x, y = idx[:, :-1], idx[:, 1:]
    base = None
    for site in ('none', 'pre_norm', 'pre_linear', 'vpad'):
        torch.manual_seed(0)
        m = GPT(GPTConfig(vocab_size=2048, block_size=256, n_layer=4, n_head=4, n_embd=128,
                          dropout=0.1, dropout_site=site))
        opt = m.configure_optimizers(0.0, 1e-3, (0.9, 0.95), 'cpu')

        def step():
            _, loss = m(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        t = timeit(step, reps=8)
        base = base or t
        print(f"{site:<11} {t * 1000:7.1f} ms/step  {16 * 256 / t:9,.0f} tok/s  {t / base:5.2f}x none")


def bench_dropout():
    """VPAD vs F.dropout on the same (16*256, 512) tensor, forward + backward."""
    print("\n== dropout ops on a (4096, 512) fp32 tensor, p = 0.1, forward + backward ==")
    x = torch.randn(16 * 256, 512, requires_grad=True)
    g = torch.randn_like(x)

    def fb(op):
        return lambda: op().backward(g)
    base = timeit(fb(lambda: F.dropout(x, 0.1, True)), reps=20)
    print(f"{'F.dropout':<26}{base * 1000:7.2f} ms  1.00x")
    for name, compiled, op in (('vpad (torch.compile)', True, M.vpad), ('vpad (eager)', False, M.vpad),
                               ('inverted_dropout (compile)', True, M.inverted_dropout)):
        M.USE_COMPILE = compiled
        t = timeit(fb(lambda: op(x, 0.1)), reps=20)
        print(f"{name:<26}{t * 1000:7.2f} ms  {t / base:4.2f}x F.dropout")
    M.USE_COMPILE = True


def bench_scan():
    """Chunked SSD scan vs the sequential loop it must equal."""
    print("\n== ssd_scan vs the sequential recurrence (b=1, h=8, p=32, n=64, chunk 64, fp32) ==")
    for t, backward in ((1024, True), (4096, False)):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(1, t, 8, 32, generator=g)
        dt = F.softplus(torch.randn(1, t, 8, generator=g) - 2)
        A = -torch.rand(8, generator=g) * 15 - 1
        B, C = torch.randn(1, t, 8, 64, generator=g), torch.randn(1, t, 8, 64, generator=g)
        args = [a.requires_grad_(backward) for a in (x, dt, A, B, C)]
        y_ref, _ = ssd_scan_sequential(*args)
        y, _ = ssd_scan(*args, chunk_size=64)
        err = (y - y_ref).abs().max().item()

        def run(fn):
            if backward:
                return lambda: fn()[0].sum().backward()
            return lambda: torch.no_grad()(fn)()
        t_seq = timeit(run(lambda: ssd_scan_sequential(*args)), reps=3, warmup=1)
        t_ssd = timeit(run(lambda: ssd_scan(*args, chunk_size=64)), reps=3, warmup=1)
        what = 'forward+backward' if backward else 'forward'
        print(f"t={t:<5} {what:<17} sequential {t_seq * 1000:8.1f} ms, ssd_scan {t_ssd * 1000:7.1f} ms: "
              f"{t_seq / t_ssd:5.1f}x faster; max |diff| {err:.1e}")


MEMORY_CODE = """
import resource, sys, torch
from model import GPT, GPTConfig
arch, T = sys.argv[1], int(sys.argv[2])
cfg = dict(vocab_size=2048, block_size=128, n_layer=4, n_head=4, n_embd=128)
cfg.update(dict(window=dict(window=64, nope_every=0), mamba2=dict(block_pattern='M'))[arch])
m = GPT(GPTConfig(**cfg)).eval()
with torch.no_grad():
    m(torch.randint(0, 2048, (1, T)))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_memory():
    """Peak memory of an eval forward (batch 1) as the length grows: the growth should be linear."""
    print("\n== eval forward: peak RSS of the whole process (batch 1, 4 layers, width 128) ==")
    root = os.path.dirname(os.path.abspath(__file__))
    for arch in ('window', 'mamba2'):
        peaks = []
        for T in (32768, 65536, 131072):
            out = subprocess.run([sys.executable, '-c', MEMORY_CODE, arch, str(T)], cwd=root,
                                 capture_output=True, text=True, check=True)
            peaks.append(int(out.stdout.split()[-1]) / 1024)
            step = f"  +{peaks[-1] - peaks[-2]:7.1f} MiB for +{T // 2} tokens" if len(peaks) > 1 else ""
            print(f"{arch:<7} T={T:<7} {peaks[-1]:8.1f} MiB{step}")


if __name__ == '__main__':
    only = next((a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('--only=')), None)
    benches = dict(step=bench_step, dropout=bench_dropout, scan=bench_scan, memory=bench_memory)
    if only and only not in benches:
        sys.exit(f"--only={only}: choose one of {', '.join(benches)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, fn in benches.items():
        if only in (None, name):
            fn()
