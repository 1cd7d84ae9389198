"""
Synthetic retrieval accuracy at growing lengths: does a model trained at length T still find the
needle at 2T, 4T, ... 64T?

    python eval_lengths.py --out_dir=out/vpad                        # one run
    python eval_lengths.py --out_dir=out/none,out/pre_norm,out/vpad  # an ablation, side by side

Scoring is one forward pass per example: feed prompt + gold answer (teacher forcing); a value
counts when every one of its tokens is the argmax. For one value that is exactly greedy decoding's
exact match; for several values (niah_multivalue, multiquery, vt) each value is scored on its own
and the score is the fraction found (recall-based, like RULER's string_match_all). Unlike RULER's
metric on free generation, the values are fed in the gold order and each is judged given the gold
values before it, so one wrong value does not spoil the next. Only answer positions go through the LM head. The
examples come from a fixed seed that is never a training seed, so every run and every call sees
the same ones. Writes eval_lengths.json into each run dir and eval_lengths.png (if matplotlib is
installed) into the first.
"""

import json
import math
import os
import sys
import time

import torch
from tqdm import tqdm

from configurator import configure, settings_of
from model import GPT, GPTConfig
import sample_data

# -----------------------------------------------------------------------------
out_dir = 'out/vpad'        # a run dir with ckpt.pt, or several separated by commas
tasks = 'niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt'
multiples = '1,2,4,8,16,32,64'   # lengths, as multiples of each run's training length
num_samples = 50            # examples per (task, length)
batch_size = 8
device = 'auto'             # 'cpu', 'cuda', 'cuda:1', ... or 'auto'
seed = 0                    # the evaluation seed stream (sample_data keeps it apart from training)
plot = True                 # write eval_lengths.png when matplotlib is installed
# -----------------------------------------------------------------------------


def parse_multiples(key, text):
    """'1,2,4' -> [1, 2, 4]; anything else is a ValueError naming the key."""
    try:
        mults = [int(m) for m in text.split(',') if m]
    except ValueError:
        mults = []
    if not mults or min(mults) < 1:
        raise ValueError(f"{key}={text!r}: give positive integers separated by commas, e.g. 1,2,4")
    return mults


def pick_device(device):
    return ('cuda' if torch.cuda.is_available() else 'cpu') if device == 'auto' else device


def load_run(run_dir, device):
    """-> (model in eval mode, tokenizer, checkpoint's config dict) from run_dir/ckpt.pt."""
    path = os.path.join(run_dir, 'ckpt.pt')
    if not os.path.isfile(path):
        raise SystemExit(f"no checkpoint at {path}; train one first: python train.py config/vpad.py --out_dir={run_dir}")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
        model = GPT(GPTConfig(**ckpt['model_args']))
        model.load_state_dict(ckpt['model'])
    except Exception as e:
        raise SystemExit(f"{path} is not a readable lengthgen checkpoint ({type(e).__name__}: {e}); "
                         f"retrain with: python train.py --out_dir={run_dir}")
    try:
        tok = sample_data.load_tokenizer(run_dir)
    except ValueError as e:
        raise SystemExit(str(e))
    if tok.vocab_size != model.config.vocab_size or tok.name != ckpt.get('tokenizer', tok.name):
        raise SystemExit(f"{run_dir}/tokenizer.json ({tok.name!r}, {tok.vocab_size} tokens) does not belong to "
                         f"this checkpoint ({ckpt.get('tokenizer')!r}, {model.config.vocab_size} tokens)")
    return model.to(device).eval(), tok, ckpt['config']


def estimate_bytes(config, batch, T, device='cpu'):
    """Rough peak memory of a no-grad forward at length T (one layer's activations live at a time):
    a handful of (B, T, width) activations, the sliding-window score blocks where SDPA materializes
    them (on the CPU; GPU kernels do not), and Mamba2's per-chunk (l x l) decay matrices.
    Full-causal layers use SDPA's memory-efficient kernels, linear in T."""
    c = config
    mlp_hidden = 32 * math.ceil(8 * c.n_embd / 3 / 32)                   # as in model.MLP
    width = max(3 * c.n_embd, 2 * mlp_hidden, 2 * c.expand * c.n_embd + 2 * c.d_state)
    per_token = 6 * width
    if c.window and not str(device).startswith('cuda'):
        per_token += 3 * c.n_head * 2 * c.window          # scores, probabilities, mask: (W x 2W) per block
    if 'M' in c.block_pattern:
        per_token += 2 * (c.expand * c.n_embd // c.headdim) * c.chunk_size * 2
    return 4 * batch * T * per_token + 4 * c.vocab_size * c.n_embd


def available_bytes(device):
    if str(device).startswith('cuda'):  # free on the card, plus what torch holds cached but unused
        dev = torch.device(device)
        return torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    with open('/proc/meminfo') as f:
        info = dict(line.split(':') for line in f)
    return int(info['MemAvailable'].split()[0]) * 1024


@torch.no_grad()
def score(model, examples, device):
    """Teacher-forced exact match. -> list over examples of lists of booleans (one per value)."""
    seqs = [ex.prompt + ex.answer for ex in examples]
    T = max(len(s) for s in seqs) - 1
    idx = torch.zeros(len(seqs), T, dtype=torch.long)
    targets = torch.full((len(seqs), T), -1, dtype=torch.long)
    for b, (ex, s) in enumerate(zip(examples, seqs)):
        idx[b, :len(s) - 1] = torch.tensor(s[:-1])
        start = len(ex.prompt) - 1                        # position t predicts token t + 1
        targets[b, start:start + len(ex.answer)] = torch.tensor(ex.answer)
    device_type = 'cuda' if str(device).startswith('cuda') else 'cpu'
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=device_type == 'cuda'):
        logits, _ = model(idx.to(device), targets.to(device))  # (N, V), N = all answer tokens, row-major
    hit = (logits.argmax(-1) == targets[targets != -1].to(device)).cpu().tolist()
    out, i = [], 0
    for ex in examples:
        ok = hit[i:i + len(ex.answer)]
        i += len(ex.answer)
        out.append([all(ok[s:e]) for s, e in ex.value_spans])
    return out


def accuracy(values_correct):
    """Recall-based accuracy: mean over examples of the fraction of values found (RULER string_match_all)."""
    return sum(sum(v) / len(v) for v in values_correct) / len(values_correct)


def evaluate(model, tok, task, length, n, batch_size, device, seed=0):
    """Accuracy of `model` on n fixed held-out examples of `task` with prompts of `length` tokens.
    Raises MemoryError (with the estimate) for a length that will not fit, before any work."""
    need, have = estimate_bytes(model.config, min(batch_size, n), length, device), available_bytes(device)
    if need > 0.8 * have:
        raise MemoryError(f"{task} at {length} tokens needs about {need / 2**30:.1f} GiB with batch_size="
                          f"{batch_size}, and {have / 2**30:.1f} GiB are free; lower batch_size or the multiples")
    examples = sample_data.eval_examples(task, tok, length, n, seed=seed)
    correct = []
    for i in range(0, n, batch_size):
        correct += score(model, examples[i:i + batch_size], device)
    return accuracy(correct)


def format_table(results, runs, task_names, mults):
    """results: {(run, task, multiple): accuracy} -> a text table, one row per run and task."""
    head = f"{'run':<24}{'task':<18}" + "".join(f"{str(m) + 'x':>7}" for m in mults)
    lines = [head, '-' * len(head)]
    for run in runs:
        for task in task_names + ['mean']:
            accs = [results.get((run, task, m)) for m in mults]
            lines.append(f"{run:<24}{task:<18}" + "".join(f"{a:7.2f}" if a is not None else f"{'-':>7}" for a in accs))
    return "\n".join(lines)


def plot_results(results, runs, task_names, mults, block_sizes, path):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib for eval_lengths.png)")
        return
    panels = task_names + ['mean']
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3), sharey=True, squeeze=False)
    for ax, task in zip(axes[0], panels):
        for run in runs:
            xs = [m * block_sizes[run] for m in mults if (run, task, m) in results]
            ys = [results[(run, task, m)] for m in mults if (run, task, m) in results]
            ax.plot(xs, ys, marker='o', label=run)
        ax.set_xscale('log', base=2)
        ax.set_title(task)
        ax.set_xlabel('length (tokens)')
        ax.set_ylim(-0.02, 1.02)
    axes[0][0].set_ylabel('accuracy')
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv):
    cfg = configure(settings_of(globals()), argv)
    dev = pick_device(cfg['device'])
    runs = [r for r in cfg['out_dir'].split(',') if r]
    task_names = [t for t in cfg['tasks'].split(',') if t]
    for t in task_names:
        if t not in sample_data.TASKS:
            raise SystemExit(f"unknown task '{t}'; tasks are {', '.join(sample_data.TASKS)}")
    try:
        mults = parse_multiples('multiples', cfg['multiples'])
    except ValueError as e:
        raise SystemExit(str(e))
    results, block_sizes = {}, {}
    for run in runs:
        model, tok, train_cfg = load_run(run, dev)
        T = block_sizes[run] = model.config.block_size
        points = [(t, m) for t in task_names for m in mults]
        rows, t0 = [], time.time()
        for task, m in tqdm(points, desc=run, disable=None):
            length = m * T
            if length < sample_data.min_length(task, tok):
                tqdm.write(f"skipped: {task} needs at least {sample_data.min_length(task, tok)} tokens, "
                           f"{m}x{T} = {length} is too short")
                continue
            try:
                acc = evaluate(model, tok, task, length, cfg['num_samples'], cfg['batch_size'], dev, cfg['seed'])
            except MemoryError as e:
                tqdm.write(f"skipped: {e}")
                continue
            results[(run, task, m)] = acc
            rows.append({'task': task, 'multiple': m, 'length': length, 'accuracy': acc, 'n': cfg['num_samples']})
        for m in mults:  # the RULER-style score: mean over tasks
            accs = [results[(run, t, m)] for t in task_names if (run, t, m) in results]
            if len(accs) == len(task_names):
                results[(run, 'mean', m)] = sum(accs) / len(accs)
        with open(os.path.join(run, 'eval_lengths.json'), 'w') as f:
            json.dump({'run': run, 'block_size': T, 'tokenizer': tok.name, 'seed': cfg['seed'],
                       'elapsed_s': round(time.time() - t0, 1), 'results': rows}, f, indent=1)
    print(f"\naccuracy by length (multiples of each run's training length; {cfg['num_samples']} examples per point)")
    print(format_table(results, runs, task_names, mults))
    if cfg['plot']:
        plot_results(results, runs, task_names, mults, block_sizes, os.path.join(runs[0], 'eval_lengths.png'))


if __name__ == '__main__':
    main(sys.argv[1:])
