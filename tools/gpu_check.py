"""
The GPU path measured in one command, about 8 minutes on one H100 or H200: every part runs under its own
timeout, prints one result line and goes on if it fails, and the lines, with the device, driver, CUDA and
torch versions, go to results/bench/gpu_check.md.

    python -m tools.gpu_check                     # on a machine with a CUDA device
    python -m tools.gpu_check --dry=True          # the same parts at tiny shapes on the CPU (the test suite)

  bench     tools.bench's GPU sections: the dropout sites against no dropout at 1K, the 4K configs' models
            (target: a site's step <= 1.1x the baseline's at both shapes; Mamba2 compiled at 4K)
  configs   train.py config/gpu_vpad_4k.py and config/gpu_mamba2_4k.py for 20 compiled steps, then a 64x eval
            of a few examples, plain and (the transformer) --rope_scaling=yarn
  main      python train.py config/vpad.py on the device, end to end (target: under 2 minutes)
  torchrun  torchrun --standalone --nproc_per_node=1 train.py for a few steps (NCCL; gloo on the CPU)
  ctrl_c    a SIGINT to a compiled training run: one line, exit 130, within seconds
  study     a 4-run study of config/vpad.py's recipe (2 arms x 2 seeds, short) at --workers=1 and at
            --workers=4 on the one device: runs per hour (target: 4 workers >= 2.5x)

The dry run goes through the same functions with tiny settings, --device=cpu and bf16 autocast, compiling
one tiny config (the configs part's transformer) and running the rest eagerly; it says which part runs
what only a GPU has (fused AdamW, NCCL) otherwise. It writes its file elsewhere (--out; by default the system's
temporary folder), never results/.
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import concurrent.futures
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join('results', 'bench', 'gpu_check.md')

SETTINGS = dict(
    dry=False,          # the parts at tiny shapes on the CPU, bf16 autocast, one compile: seconds, not minutes
    peak_flops=989e12,  # the GPU's dense bf16 peak in FLOP/s, for MFU (H100 / H200 SXM: 989e12)
    only='',            # one part: bench, configs, main, torchrun, ctrl_c, study ('' = all, in that order)
    out='',             # the result file ('' = results/bench/gpu_check.md; a dry run's: gpu_check_dry.md in the
                        # system's temporary folder, never results/)
    work='',            # where the runs go ('' = a temporary folder, removed at the end)
)


def run(cmd, timeout, cwd=ROOT, env=None):
    """-> (exit code, seconds, output): a command of the repo, its output captured; a timeout is code 124."""
    t0 = time.time()
    try:
        out = subprocess.run([sys.executable, *cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, 'PYTHONUNBUFFERED': '1', **(env or {})})
        return out.returncode, time.time() - t0, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        return 124, time.time() - t0, (e.stdout or b'').decode(errors='replace') if isinstance(e.stdout, bytes) \
            else (e.stdout or '')


def failed(what, code, out):
    """A part's failure as its line says it: the exit code and the last line of output that says something."""
    last = next((line.strip() for line in reversed(out.strip().splitlines()) if line.strip()), '')
    raise RuntimeError(f"{what} {'timed out' if code == 124 else f'exited {code}'}: {last[:300]}")


class Check:
    """The settings every part reads: the device, tiny shapes or the real ones, and where runs go."""

    def __init__(self, dry, work, peak_flops):
        self.dry, self.work, self.peak_flops = dry, work, peak_flops
        self.device = 'cpu' if dry else 'cuda'
        # a dry run compiles one config (the configs part's transformer); torch's own switch keeps the rest
        # eager, the kernels too, each op as the compiled graph would run it
        self.eager = {'TORCH_COMPILE_DISABLE': '1'} if dry else {}
        # a dry run: bf16 autocast on the CPU, small data, short runs, evals of a few examples
        self.train = (['--device=cpu', '--dtype=bfloat16', '--n_layer=1', '--n_embd=32', '--n_head=2', '--batch_size=2',
                       '--eval_samples=2', '--eval_iters=1', '--log_interval=1', '--warmup_iters=1']
                      if dry else ['--device=cuda'])
        # the main config's corpus, which the main, torchrun and ctrl_c parts share (the first makes it)
        self.vpad_data = [self.data('vpad')] + (['--num_tokens=50000'] if dry else [])

    def data(self, name):
        return f"--data_dir={os.path.join(self.work, 'data', name)}"

    def out(self, name):
        return os.path.join(self.work, 'runs', name)


def part_bench(c):
    code, seconds, out = run(['-m', 'tools.bench', f'--device={c.device}', f'--peak_flops={c.peak_flops}',
                              f'--tiny={c.dry}'], 600 if not c.dry else 120, env=c.eager)
    if code:
        failed('tools.bench', code, out)
    ratio = {m.group(1).strip(): float(m.group(2))      # each line: name, ms [range], ratio to the group's base
             for m in re.finditer(r"^(\S[^\n]*?)\s+[\d.]+ ms \[[^\]]*\]\s+([\d.]+)x", out, re.M)}
    sites = {k: ratio[k] for k in ('pre_norm', 'pre_linear', 'vpad') if k in ratio}
    if not sites or 'full causal, none' not in ratio:
        raise RuntimeError(f"tools.bench printed no site or 4K lines: {out.strip()[-300:]}")
    at_4k = 1 / ratio['full causal, none']        # that group's base is gpu_vpad_4k: its step over the baseline's
    mamba = re.search(r"^gpu_mamba2_4k\s.*\((compiled|eager \(compile failed\)|eager)", out, re.M)
    met = max(sites.values()) <= 1.1 and at_4k <= 1.1
    return (f"sites at 1K vs none: {', '.join(f'{k} {v:.2f}x' for k, v in sites.items())}; gpu_vpad_4k {at_4k:.2f}x "
            f"full causal at 4K (target <= 1.1x: {'met' if met else 'not met'}); gpu_mamba2_4k "
            f"{mamba.group(1) if mamba else 'not run'}")


def part_configs(c):
    """The 4K configs for 20 compiled steps each, then a 64x eval of a few examples, plain and (the transformer)
    under yarn. A dry run compiles the transformer alone, on one of their tasks at 96 tokens."""
    said, dirs = {}, {}
    for name, compiled in (('gpu_vpad_4k', True), ('gpu_mamba2_4k', not c.dry)):
        dirs[name] = c.out(name)
        steps = ['--tasks=niah_single', '--block_size=96', '--window=16', '--chunk_size=32', '--num_tokens=20000',
                 '--max_iters=3', '--eval_interval=3', '--gradient_accumulation_steps=1', f'--compile={compiled}'] \
            if c.dry else ['--num_tokens=700000', '--max_iters=20', '--eval_interval=20', '--log_interval=5']
        code, seconds, out = run(['train.py', f'config/{name}.py', *c.train, *steps, '--eval_multiples=1',
                                  '--final_multiples=1', f'--out_dir={dirs[name]}', c.data('mix_4096')],  # one corpus
                                 120 if c.dry else 600, env={} if compiled else c.eager)
        if code:
            failed(f"train.py config/{name}.py", code, out)
        how = 'compile failed, ran eagerly' if 'torch.compile failed' in out else 'compiled' if compiled else 'eager'
        step = re.findall(r"(\d+) ms/iter", out)
        said[name] = f"{name}: {how}, {step[-1] if step else '?'} ms/step, 64x eval"
    for variant, runs in (('plain', dirs.values()), ('yarn', [dirs['gpu_vpad_4k']])):     # Mamba2 has no RoPE
        code, _, out = run(['eval_lengths.py', f"--out_dirs={','.join(runs)}", '--multiples=64', '--eval_samples=2',
                            f'--device={c.device}', '--plot=False', *['--rope_scaling=yarn'] * (variant == 'yarn')],
                           120 if c.dry else 300, env=c.eager)
        if code:
            failed(f"eval_lengths.py {variant} at 64x", code, out)
        for name, run_dir in dirs.items():          # a row per run and task: run, task, accuracy at 64x
            accs = re.findall(rf"^{re.escape(run_dir)}\s+\S+\s+([\d.]+|-)\s*$", out, re.M)
            said[name] += f" {variant} {'/'.join(accs)}" if accs else ''
    return '; '.join(said.values())


def part_main(c):
    """config/vpad.py end to end: fit, then 1x..64x, timed."""
    tiny = ['--max_iters=20', '--eval_interval=10', '--steps_after_fit=0', '--final_multiples=1,2,64'] if c.dry else []
    code, seconds, out = run(['train.py', 'config/vpad.py', *c.train, *tiny, f'--out_dir={c.out("vpad")}',
                              *c.vpad_data], 120 if c.dry else 600, env=c.eager)
    if code:
        failed('train.py config/vpad.py', code, out)
    fit = re.search(r"fit at iter (\d+)", out)
    done = re.search(r"done: (\d+) iters in ([\d.]+) min", out)
    final = re.findall(r"^eval \d+: .*mqar accuracy (.*)$", out, re.M)
    return (f"{done.group(1) if done else '?'} iters, fit at {fit.group(1) if fit else 'none'}, {seconds / 60:.1f} min "
            f"in all (target < 2 min: {'met' if seconds < 120 else 'not met'}); last eval: "
            f"{final[-1] if final else '?'}")


def part_torchrun(c):
    code, seconds, out = run(['-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=1', 'train.py',
                              'config/vpad.py', *c.train, '--max_iters=5', '--eval_interval=5',
                              '--final_multiples=1', f'--out_dir={c.out("torchrun")}', *c.vpad_data],
                             120 if c.dry else 300, env=c.eager)
    if code:
        failed('torchrun', code, out)
    backend = 'gloo (NCCL needs a GPU: not run here)' if c.dry else 'nccl'
    return f"1 process, {backend}: 5 steps in {seconds:.0f} s, " + ("1 process(es)" in out and "ok" or "no DDP line")


def part_ctrl_c(c):
    """A SIGINT once the compiled run trains: one line on stderr, exit 130, and how long it took."""
    cmd = [sys.executable, 'train.py', 'config/vpad.py', *c.train, f'--compile={not c.dry}', '--max_iters=100000',
           '--eval_interval=100000', f'--out_dir={c.out("ctrl_c")}', *c.vpad_data]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, 'PYTHONUNBUFFERED': '1', **c.eager})
    try:
        deadline = time.time() + (120 if c.dry else 300)
        for line in proc.stdout:               # the first progress line: compiled and training
            if line.startswith('iter ') or time.time() > deadline:
                break
        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=60)[1]
        seconds = time.time() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err.strip().splitlines()
    ok = proc.returncode == 130 and len(lines) == 1
    return (f"exit {proc.returncode}, {len(lines)} line(s) on stderr, {seconds:.1f} s after the signal: "
            + ('ok' if ok and seconds < 10 else 'NOT ok: ' + (lines[-1][:200] if lines else 'no line')))


STUDY = """base_config = 'config/vpad.py'
common = {common!r}
arms = {{'none': {{'dropout_site': 'none'}}, 'vpad': {{}}}}
seeds = {seeds!r}
grid_dir = {grid!r}
multiples = {multiples!r}
eval_samples = {samples}
control = ''
extrap_multiple = 1
"""


def part_study(c):
    """The same runs (2 arms x 2 seeds) at 1 worker and at 4: runs per hour of each, from its wall time, evals
    and summary included. A dry run: 2 runs (1 seed) at 2 workers."""
    common = dict(max_iters=300, steps_after_fit=0, eval_interval=100, num_tokens=300000,
                  data_dir=os.path.join(c.work, 'data', 'study'), device=c.device)
    if c.dry:                                           # the corpus of the other dry parts
        common |= dict(max_iters=2, eval_interval=2, num_tokens=50000, n_layer=1, n_embd=32, batch_size=2,
                       data_dir=os.path.join(c.work, 'data', 'vpad'),
                       eval_samples=2, eval_iters=1, warmup_iters=1, final_multiples='1', eval_multiples='1',
                       dtype='bfloat16')
    seeds, rate = '1' if c.dry else '1,2', {}
    for workers in (2,) if c.dry else (1, 4):
        config = os.path.join(c.work, f'study_w{workers}.py')
        with open(config, 'w') as f:
            f.write(STUDY.format(common=common, seeds=seeds, grid=c.out(f'study_w{workers}'),
                                 multiples='1' if c.dry else '1,8,64', samples=2 if c.dry else 20))
        code, seconds, out = run(['ablate.py', config, f'--workers={workers}'], 180 if c.dry else 600, env=c.eager)
        if code or 'wrote' not in out:
            failed(f"ablate.py --workers={workers}", code, out)
        rate[workers] = 2 * len(seeds.split(',')) / (seconds / 3600)
    if c.dry:
        return f"{rate[2]:.0f} runs/h at --workers=2 (a dry run: one leg, nothing judged)"
    return (f"{rate[1]:.0f} runs/h at --workers=1, {rate[4]:.0f} at --workers=4: {rate[4] / rate[1]:.2f}x "
            f"(target >= 2.5x: {'met' if rate[4] / rate[1] >= 2.5 else 'not met'})")


PARTS = dict(bench=part_bench, configs=part_configs, main=part_main, torchrun=part_torchrun, ctrl_c=part_ctrl_c,
             study=part_study)
DRY_ORDER = ['configs', 'study', 'torchrun', 'main', 'ctrl_c', 'bench']     # a dry run's longest parts first
CPU_ONLY = {'bench': 'eager, tiny; fused AdamW and TF32 are CUDA only', 'torchrun': 'gloo, not NCCL; eager',
            'configs': 'the transformer compiled, the one compile; bf16 autocast on the CPU; one task',
            'main': 'eager', 'ctrl_c': 'eager', 'study': '2 runs, 2 workers, eager'}


def versions(device):
    """The device, its driver and CUDA, torch: what the lines were measured on."""
    import torch
    if device == 'cpu':
        return f"CPU dry run: torch {torch.__version__}, {torch.get_num_threads()} threads"
    smi = shutil.which('nvidia-smi')
    driver = subprocess.run([smi, '--query-gpu=driver_version', '--format=csv,noheader'], capture_output=True,
                            text=True).stdout.strip() if smi else 'unknown'
    return (f"{torch.cuda.get_device_name(0)}, driver {driver}, CUDA {torch.version.cuda}, torch {torch.__version__}")


def main(argv):
    cfg = configurator.configure(SETTINGS, argv)
    if cfg['only'] and cfg['only'] not in PARTS:
        raise SystemExit(f"config error: only={cfg['only']!r}: one of {', '.join(PARTS)}")
    out = cfg['out'] or (os.path.join(tempfile.gettempdir(), 'gpu_check_dry.md') if cfg['dry'] else OUT)
    if cfg['dry'] and os.path.abspath(out).startswith(os.path.join(ROOT, 'results')):
        raise SystemExit(f"config error: a dry run writes no results/: give --out=<a file elsewhere> (not {out})")
    if not cfg['dry']:
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device here: run it where there is one, or --dry=True for the CPU dry run")
    configurator.started()
    work = cfg['work'] or tempfile.mkdtemp(prefix='gpu_check_')
    check = Check(cfg['dry'], work, cfg['peak_flops'])
    lines = [f"# GPU check, {datetime.date.today()}: {versions(check.device)}", '',
             f"`python -m tools.gpu_check{' --dry=True' if cfg['dry'] else ''}`", '']
    def result(name):
        t0 = time.time()
        try:
            said = PARTS[name](check)
        except Exception as e:                      # a part that fails says why, and the next one runs
            said = f"FAILED: {e}"
        note = f" [dry: {CPU_ONLY[name]}]" if cfg['dry'] and name in CPU_ONLY else ''
        return f"- {name} ({time.time() - t0:.0f} s): {said}{note}"
    # in order, one at a time: each part times the device alone; a dry run measures nothing, and keeps both
    # CPU cores busy with two parts at a time, the longest first (its lines still in order)
    names = [name for name in PARTS if cfg['only'] in ('', name)]
    with concurrent.futures.ThreadPoolExecutor(2 if cfg['dry'] else 1) as pool:
        try:
            started = {name: pool.submit(result, name) for name in sorted(names, key=DRY_ORDER.index if cfg['dry']
                                                                          else names.index)}
            for name in names:
                lines.append(started[name].result())
                print(lines[-1], flush=True)
        finally:
            if not cfg['work']:
                shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print(f"wrote {out}")


if __name__ == '__main__':
    main(sys.argv[1:])
