"""
Train a small model from scratch on the synthetic retrieval corpus, watching length
generalization as it trains. On one CPU or GPU:

    python train.py config/vpad.py
    python train.py config/vpad.py --dropout_site=pre_norm --out_dir=out/pre_norm

On several GPUs (or CPU processes) of one machine, with DDP:

    torchrun --standalone --nproc_per_node=4 train.py config/vpad.py

Every step draws one global batch of batch_size * gradient_accumulation_steps rows, and the
processes split its rows between them, so the tokens per step do not depend on the number of
processes. The loss is the mean over the answer tokens of the whole step. What training draws
(initial weights, batch order, dropout masks) comes from `seed` alone, the corpus from `data_seed`:
the masks of a step are seeded by (seed, step, micro-batch), so a resumed run continues exactly.
Every eval_interval the checkpoint is written atomically, then val loss and a quick length eval go
to out_dir/log.jsonl. The run has fit at the first quick eval whose 1x accuracy reaches fit_accuracy
on every eval task (logged as fit_iter); with steps_after_fit the learning rate stays constant until
the fit and decays to min_lr over the steps_after_fit steps after it, where the run stops: runs that
fit at different steps end after the same training past the fit. init_from='resume' continues
out_dir's run; init_from=<run dir or ckpt.pt> starts from another run's weights with a fresh
optimizer and this run's settings.
"""

import json
import math
import os
import shlex
import signal
import sys
import time
from contextlib import nullcontext
from datetime import timedelta
from dataclasses import dataclass
from types import SimpleNamespace
from typing import NamedTuple, Optional

if __name__ == '__main__':   # Ctrl-C while torch loads (a second or more): one line, not a traceback from
    # inside the import; rundir.exit_on_signals takes over once the run starts
    signal.signal(signal.SIGINT, lambda *_: sys.exit("stopped while loading torch: nothing was written"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

# -----------------------------------------------------------------------------
# default config values: the main run (config/vpad.py states it with its reasons); a config file and --key=value
# override them (see configurator.py). A 2-layer VPAD transformer learns mqar at 64 tokens and is
# evaluated at 1x..64x that length; a few minutes on a 2-core CPU, data generation included.
# I/O
out_dir = 'out/vpad'       # the run dir: ckpt.pt, log.jsonl, tokenizer.json
eval_interval = 250        # steps between checkpoint + val loss + quick length eval
log_interval = 50          # steps between progress lines
eval_iters = 20            # val loss over a fixed set of eval_iters * batch_size val rows
init_from = 'scratch'      # 'scratch', 'resume' (out_dir/ckpt.pt), or another run's dir / ckpt.pt (weights only)
# data (generated into data_dir on first use with these settings)
data_dir = 'data/mqar_64'  # the corpus; generated here on first use
tasks = 'mqar'             # task[:weight],... (sample_data.TASKS); mqar: 4 key-value pairs, 2 keys asked
num_tokens = 6_000_000     # training tokens to generate when data_dir is empty
data_seed = 1337           # seeds the corpus; `seed` never changes it
loss_on = 'answers'        # 'answers': loss only on answer tokens (as Zoology's MQAR); 'all': LM loss
min_doc_len = 40           # shortest training document in tokens (0 = each task's own minimum); 40 of 64
                           # leaves >= 23 noise tokens before the first query, beyond the convolutions'
                           # 2 x 3 tokens, so every training answer needs global attention (the share is printed)
block_size = 64            # the training length: the longest training document
batch_size = 32            # rows per micro-batch
gradient_accumulation_steps = 1  # micro-batches per optimizer step, over all processes together
# model: global attention without position encoding (NoPE) in every layer, so no layer meets a position or
# distance at 64x that it never met in training
n_layer = 2                # layers
n_head = 1                 # attention heads
n_embd = 64                # width
window = 0                 # sliding-window size of RoPE attention layers (0 = full causal)
nope_every = 1             # every k-th attention layer is global without RoPE (0 = never)
nope_first = False         # True: the NoPE layer comes first in each group of nope_every (N W N W, not W N W N)
short_conv = 3             # attention layers mix in the previous short_conv positions first (0 = off): one layer
                           # can then match the asked key against "the token before"; without it this model
                           # stayed at 0.23 (any of the values) for 2000 steps
block_pattern = 'A'        # cycled over layers: 'A' attention + MLP, 'M' Mamba2 ('AM' = hybrid)
rope_theta = 10000.0       # RoPE base
d_state = 64               # Mamba2 state size
expand = 2                 # Mamba2 inner width = expand * n_embd
headdim = 32               # Mamba2 channels per head
d_conv = 4                 # Mamba2 causal conv width
chunk_size = 64            # Mamba2 SSD chunk length
dropout = 0.1              # the drop probability p
dropout_site = 'vpad'      # 'none', 'pre_norm', 'pre_linear' or 'vpad'
# AdamW
learning_rate = 3e-3       # peak learning rate
max_iters = 4000           # optimizer steps; with steps_after_fit the cap on the search for the fit: a run not
                           # fit by then never fit
fit_accuracy = 0.95        # the run has fit at the first quick eval with 1x accuracy >= this on every eval task
steps_after_fit = 1000     # stop this many steps after the fit, so runs compare after equal training past
                           # it (0 = always run max_iters); a run that never fits stops at max_iters
cooldown_iters = 0         # with steps_after_fit: the learning rate decays over the last cooldown_iters steps
                           # before the stop (0 = all steps_after_fit of them, from the fit on)
snapshots_after_fit = ''   # e.g. '1000,4000,10000': a trunk, held at the peak rate to its stop, that keeps its
                           # state at these steps past the fit, each the start of a cooldown branch in
                           # out_dir/cooldown<k> (resume it there: it decays over cooldown_iters steps)
weight_decay = 0.0         # 0 = off (the paper: weight decay speeds up the loss of length generalization)
beta1 = 0.9                # AdamW beta1
beta2 = 0.95               # AdamW beta2
grad_clip = 1.0            # clip the gradient norm at this value (0 = off)
decay_lr = True            # after the warmup, cosine down to min_lr (with steps_after_fit: constant until the
                           # decay over the last cooldown_iters steps before the stop); False: constant
warmup_iters = 100         # steps of linear warmup
lr_decay_iters = 0         # steps of the cosine without steps_after_fit; 0 = max_iters
min_lr = 1e-4              # the learning rate at the end of the cosine
# length eval during training
eval_tasks = ''            # tasks of the quick length eval, comma-separated ('' = the trained tasks)
eval_multiples = '1,4,16'  # the quick eval at each eval_interval, in multiples of block_size
final_multiples = '1,2,4,8,16,32,64'   # the eval at the last step
eval_samples = 32          # held-out examples per task and length
eval_batch_size = 8        # examples per forward pass in the length eval
# system
device = 'auto'            # 'auto', 'cpu', 'cuda', 'cuda:0', ...
dtype = 'auto'             # 'auto' (bfloat16 on CUDA when supported, else float32), 'float32', 'bfloat16'
compile = False            # torch.compile the model (worth it on GPU)
peak_flops = 0.0           # the device's peak FLOP/s per process, for MFU in the log (0 = no MFU)
seed = 1337                # seeds initial weights, batch order and dropout masks
# -----------------------------------------------------------------------------
from configurator import configure, settings_of  # noqa: E402  (after the defaults, as in nanoGPT)
from model import GPT, GPTConfig  # noqa: E402
import sample_data  # noqa: E402
import eval_lengths  # noqa: E402
import rundir  # noqa: E402


# -----------------------------------------------------------------------------
# the settings, checked before anything is generated or written

MODEL_KEYS = [f for f in GPTConfig.__dataclass_fields__ if f != 'vocab_size']
POSITIVE = ('eval_interval', 'log_interval', 'eval_iters', 'num_tokens', 'block_size', 'batch_size',
            'gradient_accumulation_steps', 'n_layer', 'n_head', 'n_embd', 'max_iters', 'eval_samples',
            'eval_batch_size', 'd_state', 'expand', 'headdim', 'd_conv', 'chunk_size')
# sizes past these cannot be built on any machine (a tensor's size overflows before memory is checked)
AT_MOST = {'n_embd': 2 ** 16, 'n_layer': 2 ** 12, 'n_head': 2 ** 12, 'd_state': 2 ** 16, 'expand': 64, 'headdim': 2 ** 16,
           'd_conv': 2 ** 10, 'chunk_size': 2 ** 16, 'learning_rate': 1e38, 'min_lr': 1e38}
AT_MOST_WHY = dict.fromkeys(AT_MOST, "no model that size can be built; lower it") | dict.fromkeys(
    ('learning_rate', 'min_lr'), "float32 overflows in AdamW's update; lower it")
NON_NEGATIVE = ('window', 'nope_every', 'weight_decay', 'grad_clip', 'warmup_iters', 'lr_decay_iters',
                'min_lr', 'peak_flops', 'min_doc_len', 'steps_after_fit', 'cooldown_iters')
# what RoPE layers read; set away from these while every attention layer is NoPE, a run would not change
ROPE_ONLY = {'window': window, 'rope_theta': rope_theta}


def check_config(cfg, here=True):
    """Every setting a user can get wrong, checked before anything is generated or written; the
    device and the memory only where the run will run here (not for a cluster's node).
    -> the parsed (eval tasks, quick multiples, final multiples)."""
    try:
        for k, v in cfg.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{k}={v} must be a finite number")
        for k in POSITIVE:
            if cfg[k] <= 0:
                raise ValueError(f"{k}={cfg[k]} must be positive")
        for k in NON_NEGATIVE:
            if cfg[k] < 0:
                raise ValueError(f"{k}={cfg[k]} must be >= 0")
        for k, most in AT_MOST.items():
            if cfg[k] > most:
                raise ValueError(f"{k}={cfg[k]} is more than {most:g}: {AT_MOST_WHY[k]}")
        for k in ('learning_rate', 'rope_theta'):
            if not cfg[k] > 0:
                raise ValueError(f"{k}={cfg[k]} must be positive")
        for k in ('beta1', 'beta2'):
            if not 0 <= cfg[k] < 1:
                raise ValueError(f"{k}={cfg[k]} must be in [0, 1): AdamW's decay of its moment estimates")
        if not 0 <= cfg['seed'] < 2 ** 63:
            raise ValueError(f"seed={cfg['seed']} must be in 0..2**63-1 (torch's generators take 64-bit seeds)")
        if cfg['short_conv'] > cfg['block_size']:
            raise ValueError(f"short_conv={cfg['short_conv']} is longer than block_size={cfg['block_size']}: "
                             f"a convolution longer than the training length mixes in nothing more")
        if cfg['batch_size'] * cfg['gradient_accumulation_steps'] > 2 ** 24:
            raise ValueError(f"batch_size x gradient_accumulation_steps = {cfg['batch_size'] * cfg['gradient_accumulation_steps']:,} "
                             f"rows per step, more than the {2 ** 24:,} a step can draw: lower gradient_accumulation_steps")
        for k in ('out_dir', 'data_dir'):
            if not cfg[k].strip():
                raise ValueError(f"{k} is empty: give a folder, e.g. --{k}=out/run1")
            if os.path.exists(cfg[k]) and not os.path.isdir(cfg[k]):
                raise ValueError(f"{k}={cfg[k]!r} is a file, not a folder: give a folder, e.g. --{k}=out/run1")
        if os.path.realpath(cfg['out_dir']) == os.path.realpath(cfg['data_dir']):
            raise ValueError(f"out_dir and data_dir are the same folder ({cfg['out_dir']!r}): the run dir and the corpus "
                             f"need one each, e.g. --data_dir=data/{os.path.basename(os.path.normpath(cfg['data_dir']))}")
        if cfg['loss_on'] not in ('answers', 'all'):
            raise ValueError(f"loss_on={cfg['loss_on']!r}: use 'answers' or 'all'")
        if cfg['dtype'] not in ('auto', 'float32', 'bfloat16'):
            raise ValueError(f"dtype={cfg['dtype']!r}: use 'auto', 'float32' or 'bfloat16'")
        device = rundir.pick_device(cfg['device']) if here else None     # exits with one line if unusable
        if cfg['init_from'] not in ('scratch', 'resume'):
            if not os.path.isfile(rundir.ckpt_path(cfg['init_from'])):
                raise ValueError(f"init_from={cfg['init_from']!r}: no checkpoint there; give 'scratch', "
                                 f"'resume', or a run dir / ckpt.pt of a finished run")
        GPTConfig(**{k: cfg[k] for k in MODEL_KEYS})
        tok = sample_data.build_tokenizer()
        trained, _ = sample_data.parse_tasks(cfg['tasks'])
        for t in trained:
            if cfg['block_size'] < sample_data.min_length(t, tok):
                raise ValueError(f"block_size={cfg['block_size']} is shorter than {t}'s shortest document "
                                 f"({sample_data.min_length(t, tok)} tokens)")
        eval_tasks = sample_data.parse_tasks(cfg['eval_tasks'], 'eval_tasks', weighted=False)[0] if cfg['eval_tasks'].strip() else trained
        quick = eval_lengths.parse_multiples('eval_multiples', cfg['eval_multiples'])
        final = eval_lengths.parse_multiples('final_multiples', cfg['final_multiples'])
        if cfg['steps_after_fit'] and 1 not in quick:
            raise ValueError(f"steps_after_fit needs the fit, judged at 1x: add 1 to eval_multiples={cfg['eval_multiples']!r}")
        check_schedule(cfg)
        if not 0 < cfg['fit_accuracy'] <= 1:
            raise ValueError(f"fit_accuracy={cfg['fit_accuracy']} must be in (0, 1]")
        for note in no_effect(cfg):
            print(f"note: {note}")
        if cfg['min_doc_len'] > cfg['block_size']:
            raise ValueError(f"min_doc_len={cfg['min_doc_len']} is longer than block_size={cfg['block_size']}")
        for t in eval_tasks:
            need = sample_data.min_length(t, tok)
            if cfg['block_size'] * min(quick + final) < need:
                raise ValueError(f"{t} needs examples of at least {need} tokens; the length eval asks for "
                                 f"{cfg['block_size'] * min(quick + final)} (block_size x the smallest multiple)")
        if here:
            check_memory(cfg, tok.vocab_size, device, cfg['block_size'] * min(quick + final))
    except ValueError as e:
        raise SystemExit(f"config error: {e}")
    return eval_tasks, quick, final


def check_schedule(cfg):
    """The decay and the snapshots: a cooldown inside the steps after the fit, snapshots inside a trunk
    that has a fit to count from and branches that decay."""
    saf, cool = cfg['steps_after_fit'], cfg['cooldown_iters']
    if saf and cool > saf:
        raise ValueError(f"cooldown_iters={cool} is longer than steps_after_fit={saf}: the decay starts at the fit at the "
                         f"earliest; lower it (0 = all of steps_after_fit)")
    snapshots = parse_snapshots(cfg['snapshots_after_fit'])
    if not snapshots:
        return
    if not saf or snapshots[-1] > saf:
        raise ValueError(f"snapshots_after_fit={cfg['snapshots_after_fit']!r} lie past the fit: set steps_after_fit to the "
                         f"trunk's length past it, at least {snapshots[-1]} (now {saf})")
    if not cool or not cfg['decay_lr']:
        raise ValueError(f"snapshots_after_fit needs branches that decay: set cooldown_iters > 0 (now {cool}) "
                         f"and decay_lr=True (now {cfg['decay_lr']})")


def no_effect(cfg):
    """Settings away from their defaults that cannot change this run (a config may set them for a
    recipe that used them): one note each, printed, so `--window=16` on an all-NoPE model is not
    taken for an ablation."""
    notes = []
    if cfg['lr_decay_iters'] and (cfg['steps_after_fit'] or not cfg['decay_lr']):
        why = 'decay_lr=False' if not cfg['decay_lr'] else f"steps_after_fit={cfg['steps_after_fit']} (the decay runs after the fit)"
        notes.append(f"lr_decay_iters={cfg['lr_decay_iters']} has no effect with {why}")
    if cfg['cooldown_iters'] and not cfg['steps_after_fit']:
        notes.append(f"cooldown_iters={cfg['cooldown_iters']} has no effect without steps_after_fit (the decay runs after the fit)")
    c = GPTConfig(**{k: cfg[k] for k in MODEL_KEYS}, vocab_size=1)
    if not any(c.layer_kind(i) == 'A' and not c.global_nope(i) for i in range(c.n_layer)):
        notes += [f"{k}={cfg[k]:g} has no effect: no attention layer uses RoPE (nope_every={cfg['nope_every']}, "
                  f"block_pattern={cfg['block_pattern']!r})" for k, v in ROPE_ONLY.items() if cfg[k] != v]
    return notes


def check_memory(cfg, vocab_size, device, shortest):
    """Refuse a batch or an eval set that cannot fit before anything is written: a batch_size too
    large for the machine otherwise grows until the kernel kills the run without a word, and
    eval_samples too many holds every example of the first quick eval at once."""
    cuda = device.startswith('cuda')
    # a GPU's whole memory, not its free memory: asking for that would open a CUDA context in ablate.py too
    have = torch.cuda.get_device_properties(torch.device(device)).total_memory if cuda else eval_lengths.available_bytes('cpu')
    act_bytes = 2 if cfg['dtype'] == 'bfloat16' or cfg['dtype'] == 'auto' and cuda else 4
    c = GPTConfig(**{k: cfg[k] for k in MODEL_KEYS}, vocab_size=vocab_size)
    weights = 16 * (12 * c.n_layer * c.n_embd ** 2 + vocab_size * c.n_embd)   # + gradients and AdamW's moments
    if weights > 0.8 * have:
        raise ValueError(f"n_layer={c.n_layer} layers of width n_embd={c.n_embd} need about {weights / 2**30:.1f} GiB for the "
                         f"weights, their gradients and AdamW's moments, and {device} has {have / 2**30:.1f} GiB: lower n_embd or n_layer")
    need = train_bytes(cfg, vocab_size, device, act_bytes)
    if need > 0.8 * have:
        raise ValueError(f"batch_size={cfg['batch_size']} rows of {cfg['block_size']} tokens need about {need / 2**30:.1f} GiB "
                         f"to train and {device} has {have / 2**30:.1f} GiB: lower batch_size (raise gradient_accumulation_steps "
                         f"to keep the tokens per step)")
    need, have = eval_lengths.examples_bytes(cfg['eval_samples'], shortest), eval_lengths.available_bytes('cpu')
    if need > 0.8 * have:
        raise ValueError(f"eval_samples={cfg['eval_samples']} examples of {shortest} tokens need about {need / 2**30:.1f} GiB "
                         f"and {have / 2**30:.1f} GiB are free: lower eval_samples")


def train_bytes(cfg, vocab_size, device, act_bytes):
    """Rough peak memory of a training micro-step of batch_size rows: each layer keeps about
    36 x n_embd activations a token for the backward (measured: 34 at width 128 on the CPU; bench.py
    --only=saved: 32 at width 768 in bf16), plus one forward's transients, and the weights, their
    gradients and AdamW's two moments (16 bytes a parameter)."""
    c = GPTConfig(**{k: cfg[k] for k in MODEL_KEYS}, vocab_size=vocab_size)
    tokens, params = cfg['batch_size'] * cfg['block_size'], 12 * c.n_layer * c.n_embd ** 2 + vocab_size * c.n_embd
    return (act_bytes * tokens * 36 * c.n_layer * c.n_embd + 16 * params
            + eval_lengths.estimate_bytes(c, cfg['batch_size'], cfg['block_size'], device))


# -----------------------------------------------------------------------------
# data: the corpus, generated on first use, and the batches drawn from it

class Split(NamedTuple):
    ids: np.ndarray    # token ids, flat
    mask: np.ndarray   # 1 where the token is part of an answer
    n_rows: int        # aligned rows of block_size (+1) tokens


def open_data(cfg, master):
    """Generate the corpus on first use (rank 0; the others wait), then check it matches the run."""
    try:
        if master:                    # one process generates a missing corpus; another run that needs it waits
            sample_data.make_corpus(cfg, "rerun (or point --data_dir elsewhere)")
        if dist.is_initialized():
            dist.barrier()
        meta = sample_data.load_meta(cfg['data_dir'])
        sample_data.check_checksums(cfg['data_dir'], meta)
        tok = sample_data.load_tokenizer(cfg['data_dir'])
    except ValueError as e:
        raise SystemExit(str(e))
    wanted = dict(sample_data.corpus_settings(cfg), tokenizer=sample_data.build_tokenizer().name)
    differ = {k: (meta.get(k), v) for k, v in wanted.items() if meta.get(k) != v}
    if differ:
        raise SystemExit(f"{cfg['data_dir']} was generated with other settings ("
                         + ", ".join(f"{k}={a!r}, this run: {b!r}" for k, (a, b) in differ.items())
                         + f"): point data_dir elsewhere or delete {cfg['data_dir']}")
    data = {}
    for split in ('train', 'val'):
        ids, mask = sample_data.load_split(cfg['data_dir'], split)
        data[split] = Split(ids, mask, (len(ids) - 1) // cfg['block_size'])
    return meta, tok, data


def rows_to_batch(split, rows, T, loss_on, device):
    """Aligned rows -> x (B, T) and y (B, T) with -1 where no loss is taken."""
    x = np.stack([split.ids[r * T: r * T + T] for r in rows]).astype(np.int64)
    y = np.stack([split.ids[r * T + 1: r * T + T + 1] for r in rows]).astype(np.int64)
    if loss_on == 'answers':
        m = np.stack([split.mask[r * T + 1: r * T + T + 1] for r in rows])
        y[m == 0] = -1
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def count_targets(split, rows, T, loss_on):
    """Positions with a loss in these rows: the step's loss is a mean over all of them."""
    if loss_on == 'all':
        return len(rows) * T
    return int(sum(int(split.mask[r * T + 1: r * T + T + 1].sum()) for r in rows))


def window_reach(model):
    """How many tokens back the position-bound routes alone can carry information: each sliding-
    window RoPE layer moves it window - 1 tokens, each attention layer's short convolution
    short_conv more. None when some layer sees the whole context by position (full-causal RoPE)
    or carries state (Mamba2): then there is no window to speak of."""
    layers = model.describe_layers()
    if set(layers) & {'R', 'M'}:
        return None
    return layers.count('W') * (model.config.window - 1) + len(layers) * model.config.short_conv


# -----------------------------------------------------------------------------
# model: from scratch, resumed, or from another run's weights

# what the checkpoint keeps of its step's log record, so that a run killed between its checkpoint
# and its log line (during the length eval) logs that step in full when it resumes
LOGGED = ('train_loss', 'val_loss', 'tokens_per_sec', 'mfu', 'fit_iter')


def load_start(path, own):
    """own: the run's own checkpoint (init_from='resume'), else another run's that it starts from."""
    if not os.path.isfile(path):
        raise SystemExit(f"init_from='resume' but there is no checkpoint at {path}; "
                         f"start the run with init_from='scratch'")
    return rundir.load_checkpoint(path, f"restore a copy, or set it aside (mv {path} {path}.bad) and start again with "
                                        f"--init_from=scratch" if own else "restore a copy, or retrain that run")


def start_model(cfg, tok, device):
    """-> (model, optimizer, iter_num, best_val_loss, resumed, notes for the log, the values the
    checkpoint logged), from scratch, from out_dir's checkpoint (resume), or from another run's
    weights (init_from=<path>)."""
    model_args = {k: cfg[k] for k in MODEL_KEYS} | {'vocab_size': tok.vocab_size}
    init_from, resumed, iter_num, best_val_loss, notes = cfg['init_from'], False, 0, float('inf'), {}
    last = dict.fromkeys(LOGGED)
    torch.manual_seed(cfg['seed'])                      # initial weights
    model = GPT(GPTConfig(**model_args))
    ckpt = None
    if init_from != 'scratch':
        path = os.path.join(cfg['out_dir'], 'ckpt.pt') if init_from == 'resume' else rundir.ckpt_path(init_from)
        ckpt = load_start(path, own=init_from == 'resume')
        if ckpt['tokenizer'] != tok.name or ckpt['model_args']['vocab_size'] != tok.vocab_size:
            raise SystemExit(f"tokenizer mismatch: {path} was trained with {ckpt['tokenizer']!r} (vocab "
                             f"{ckpt['model_args']['vocab_size']}), {cfg['data_dir']} has {tok.name!r} "
                             f"(vocab {tok.vocab_size}); use the data_dir that run was trained on")
        # resume: every model setting must match; init_from=<path>: the shapes must (site, p, window, rope may change)
        keys = MODEL_KEYS if init_from == 'resume' else ['n_layer', 'n_head', 'n_embd', 'block_pattern', 'short_conv',
                                                          'd_state', 'expand', 'headdim', 'd_conv']
        saved = {k: ckpt['model_args'][k] for k in keys}
        changed = {k: (saved[k], model_args[k]) for k in keys if saved[k] != model_args[k]}
        if changed:
            raise SystemExit(f"{path} was trained with other model settings: "
                             + ", ".join(f"{k}={a!r} (this run: {b!r})" for k, (a, b) in changed.items()))
        model.load_state_dict(ckpt['model'])
        if init_from == 'resume':
            iter_num, best_val_loss, resumed = ckpt['iter_num'], ckpt['best_val_loss'], True
            changed = [k for k in cfg if k not in ('init_from', 'max_iters') and ckpt['config'].get(k) != cfg[k]]
            print(f"resumed from {path} at iter {iter_num}" + (
                "; note: settings changed since, so this is not the run an uninterrupted one would be: "
                + ", ".join(f"{k}={ckpt['config'].get(k)!r} -> {cfg[k]!r}" for k in changed) if changed else ""))
        else:
            notes = {'init_from': os.path.abspath(path), 'init_iter': ckpt['iter_num']}
            print(f"initialized from {path} (iter {ckpt['iter_num']}): weights only, fresh optimizer")
    model.to(device)
    device_type = 'cuda' if device.startswith('cuda') else 'cpu'
    optimizer = model.configure_optimizers(cfg['weight_decay'], cfg['learning_rate'],
                                           (cfg['beta1'], cfg['beta2']), device_type)
    if resumed:
        optimizer.load_state_dict(ckpt['optimizer'])
        notes = {k: ckpt[k] for k in ('init_from', 'init_iter') if k in ckpt}
        last = {k: ckpt.get(k) for k in LOGGED}
    return model, optimizer, iter_num, best_val_loss, resumed, notes, last


class CompiledOrEager(torch.nn.Module):
    """model under torch.compile; if compiling fails (at the first call), one line saying so and the
    model runs eagerly from then on. Where torch allows, the backward is compiled with the forward, so
    that its failure shows at that call too (Inductor once failed on Mamba2's cumsum on a GPU)."""
    def __init__(self, model, backend='inductor'):
        super().__init__()
        self.model = model
        self.compiled = [torch.compile(model, backend=backend)]     # in a list: not a second copy of the parameters
        if hasattr(torch._functorch.config, 'force_non_lazy_backward_lowering'):
            torch._functorch.config.force_non_lazy_backward_lowering = True

    def forward(self, *args):
        if self.compiled:
            try:
                return self.compiled[0](*args)
            except torch._dynamo.exc.BackendCompilerFailed as e:
                why = getattr(e, 'inner_exception', None) or e
                print(f"torch.compile failed ({type(why).__name__}: {str(why).strip().splitlines()[0][:200]}); "
                      f"training without it")
                self.compiled.clear()
        return self.model(*args)


# -----------------------------------------------------------------------------
# the processes, the schedule, the log and the steps of the loop

class Procs(NamedTuple):
    """This process's place in a run: its DDP rank, its device, and its share of a step's rows."""
    ddp: bool
    master: bool        # rank 0: owns the run dir, generates missing data, runs the length evals, logs
    rank: int
    world_size: int
    device: str         # 'cpu' or 'cuda:<local rank>'
    dtype: str          # 'float32' or 'bfloat16' (autocast)
    step_rows: int      # rows per step, all processes together
    rank_rows: int      # this process's rows per step
    micro_rows: int     # rows per micro-batch
    micro_steps: int

    @property
    def device_type(self):
        return 'cuda' if self.device.startswith('cuda') else 'cpu'

    def autocast(self):
        return nullcontext() if self.dtype == 'float32' else torch.autocast(self.device_type, dtype=torch.bfloat16)


def setup_processes(cfg):
    """DDP: one process per device, launched by torchrun (else one process). -> Procs"""
    ddp = int(os.environ.get('RANK', -1)) != -1
    device, rank, world_size = rundir.pick_device(cfg['device']), 0, 1
    if ddp:   # rank 0 alone generates missing data and runs the length evals; the others wait that long
        dist.init_process_group(backend='nccl' if device.startswith('cuda') else 'gloo', timeout=timedelta(hours=2))
        rank, world_size = dist.get_rank(), dist.get_world_size()
        if device.startswith('cuda'):
            device = f"cuda:{os.environ['LOCAL_RANK']}"
            torch.cuda.set_device(device)
    step_rows = cfg['batch_size'] * cfg['gradient_accumulation_steps']
    if step_rows % world_size:
        raise SystemExit(f"config error: a step's {step_rows} rows (batch_size x gradient_accumulation_steps) "
                         f"cannot be split evenly over {world_size} processes; make it a multiple of {world_size}")
    rank_rows = step_rows // world_size
    micro_rows = min(cfg['batch_size'], rank_rows)
    dtype = rundir.pick_dtype(cfg['dtype'], device)
    if device.startswith('cuda'):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return Procs(ddp, rank == 0, rank, world_size, device, dtype, step_rows, rank_rows, micro_rows,
                 -(-rank_rows // micro_rows))


def parse_snapshots(text):
    """snapshots_after_fit: '1000,4000,10000' -> (1000, 4000, 10000); '' -> ()."""
    try:
        steps = tuple(int(s) for s in text.split(',') if s.strip())
    except ValueError:
        steps = None
    if steps is None or any(s <= 0 for s in steps) or list(steps) != sorted(set(steps)):
        raise ValueError(f"snapshots_after_fit={text!r}: give increasing positive steps past the fit, e.g. '1000,4000,10000'")
    return steps


def branch_overrides(cfg, k):
    """The settings of the cooldown branch at snapshot k of a trunk: the trunk's own, trained k +
    cooldown_iters steps past the fit and decayed over the last cooldown_iters, in out_dir/cooldown<k>.
    That is the run trained at the peak rate to fit + k and then decayed, which from the snapshot on it is."""
    return {'out_dir': os.path.join(cfg['out_dir'], f'cooldown{k}'), 'snapshots_after_fit': '',
            'steps_after_fit': k + cfg['cooldown_iters']}


def branch_flags(cfg, k):
    """branch_overrides as train.py's --key=value arguments."""
    return [f'--{key}={v}' for key, v in branch_overrides(cfg, k).items()]


@dataclass
class Schedule:
    """The learning rate and the stop of a run, from its settings and its fit (the step of its first
    quick eval whose 1x accuracy reaches fit_accuracy on every eval task; None until then)."""
    cfg: dict
    fit_iter: Optional[int] = None

    def __post_init__(self):
        self.snapshots = parse_snapshots(self.cfg['snapshots_after_fit'])

    def lr(self, it):
        # 1) linear warmup (with decay_lr=False too: a constant rate from step 0 is another recipe); then
        # with steps_after_fit (warmup-stable-decay): 2) the peak until cooldown_iters before the stop
        # (0: from the fit on), 3) cosine down to min_lr at the stop, so every run ends at min_lr after
        # the same decay however late it fit (a trunk holds the peak: its branches decay); without it:
        # 2) cosine over lr_decay_iters (0: max_iters)
        c, peak = self.cfg, self.cfg['learning_rate']
        if it < c['warmup_iters']:
            return peak * (it + 1) / (c['warmup_iters'] + 1)
        if not c['decay_lr'] or self.snapshots:
            return peak
        if c['steps_after_fit']:
            if self.fit_iter is None:
                return peak
            end = self.stop()
            start = end - (c['cooldown_iters'] or c['steps_after_fit'])
            if it <= start:
                return peak
        else:
            start, end = c['warmup_iters'], c['lr_decay_iters'] or c['max_iters']
        if it > end:
            return c['min_lr']
        ratio = (it - start) / max(1, end - start)
        return c['min_lr'] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (peak - c['min_lr'])

    def stop(self):
        """max_iters, or steps_after_fit past the fit: max_iters caps the search for the fit, not the
        decay after it, so a run that fits late still gets its whole decay."""
        if self.fit_iter is None or not self.cfg['steps_after_fit']:
            return self.cfg['max_iters']
        return self.fit_iter + self.cfg['steps_after_fit']

    def snapshot_at(self, it):
        """k where step `it` is a trunk's snapshot, fit + k; else None."""
        k = None if self.fit_iter is None else it - self.fit_iter
        return k if k in self.snapshots else None

    def observe(self, it, accs, final):
        """The fit rule on the length eval of step `it`. -> whether the run fits here. A fit seen only
        in the final eval of a fit-gated run had no steps after it: not a fit."""
        if self.fit_iter is None and fits(accs, self.cfg['fit_accuracy']) and not (final and self.cfg['steps_after_fit']):
            self.fit_iter = it
            return True
        return False


def draw_seed(*parts):
    """A seed from (seed, step, micro-batch, ...): the same on every process and after a resume."""
    s = 0
    for p in parts:
        s = (s * 1_000_003 + int(p)) % 2**61
    return s


def fits(accs, threshold):
    """The fit rule: 1x accuracy >= threshold on every task of a length eval {task: {'1x': acc}}."""
    return all(by_m.get('1x') is not None and by_m['1x'] >= threshold for by_m in accs.values())


def format_accuracy(acc):
    return 'n/a (skipped)' if acc is None else f"{acc:.2f}"


@torch.no_grad()
def estimate_val_loss(model, split, cfg, procs):
    """Mean loss per target over the same val rows every time (a fixed eval set)."""
    model.eval()
    total, count = 0.0, 0
    for k in range(cfg['eval_iters']):
        rows = [(k * cfg['batch_size'] + j) % split.n_rows for j in range(cfg['batch_size'])]
        x, y = rows_to_batch(split, rows, cfg['block_size'], cfg['loss_on'], procs.device)
        with procs.autocast():
            _, loss = model(x, y)
        n = int((y != -1).sum())
        total, count = total + loss.item() * n, count + n
    model.train()
    return total / max(count, 1)


def open_log(out_dir, resumed, iter_num):
    """A fresh run moves aside the log of a run that died before its first checkpoint; a resumed
    run drops what was logged after its checkpoint, in an atomic rewrite. -> (path, {iter: record})"""
    log_path = os.path.join(out_dir, 'log.jsonl')
    if not resumed:          # (a checkpoint here was refused before anything was generated)
        if os.path.exists(log_path):          # a run that died before its first checkpoint
            os.replace(log_path, log_path + '.old')
            print(f"moved the log of an earlier run without a checkpoint to {log_path}.old")
        return log_path, {}
    if os.path.exists(log_path):
        kept = rundir.read_log(log_path, iter_num)
        rundir.write_atomic(log_path, ''.join(json.dumps(r) + '\n' for r in kept).encode())
        return log_path, {r['iter']: r for r in kept}
    return log_path, {}


def where_it_stands(argv, out_dir, saved_iter, world_size):
    """How to go on after an interruption or a disk error: the command that resumes the run from
    its last checkpoint, or that starts it again when it has none yet."""
    launch = ['python'] if world_size == 1 else ['torchrun', '--standalone', f'--nproc_per_node={world_size}']
    if saved_iter is None:
        return f"start again with: {shlex.join(launch + ['train.py', *argv])} (nothing was saved yet)"
    argv = [a for a in argv if not a.startswith('--init_from=')] + ['--init_from=resume']
    return (f"resume with: {shlex.join(launch + ['train.py', *argv])} (it continues from the checkpoint "
            f"of iter {saved_iter}, {os.path.join(out_dir, 'ckpt.pt')})")


def diverged(what, run, cfg):
    """Stop without writing anything: the last checkpoint holds the last good weights."""
    last = f"the last good checkpoint, {run.ckpt_path}, is untouched" if os.path.exists(run.ckpt_path) else "no checkpoint was written"
    raise SystemExit(f"{what}: training diverged; {last}. Lower learning_rate (now {cfg['learning_rate']}) or set grad_clip")


def evaluate_and_log(run, cfg, procs, final, standing):
    """Checkpoint first (nothing is lost if the length eval fails), then the length eval and the
    log line. A resumed run does not checkpoint its first step again. At a trunk's snapshot the
    state is also written as the first checkpoint of its cooldown branch (once: a replayed step
    leaves a branch that may be training alone)."""
    first = run.resumed and run.iter_num == run.start_iter
    if first:
        val_loss = run.last['val_loss']             # the checkpoint's, for a log record its kill cut off
    else:
        val_loss = estimate_val_loss(run.model, run.data['val'], cfg, procs)
        if not math.isfinite(val_loss):
            diverged(f"val loss is {val_loss} at iter {run.iter_num}", run, cfg)
        run.best_val_loss = min(run.best_val_loss, val_loss)
    snapshot = run.schedule.snapshot_at(run.iter_num)
    if procs.master and (not first or snapshot is not None):
        state = {'model': run.model.state_dict(), 'optimizer': run.optimizer.state_dict(),
                 'model_args': run.model.config.__dict__, 'config': cfg, 'iter_num': run.iter_num,
                 'best_val_loss': run.best_val_loss, 'val_loss': val_loss, 'train_loss': run.train_loss,
                 'tokenizer': run.tok.name, 'tokens_per_sec': run.tokens_per_sec, 'mfu': run.mfu,
                 'data_meta': run.meta, 'fit_iter': run.schedule.fit_iter, 'finished': final, **run.notes}
        if snapshot is not None:
            branch = cfg | branch_overrides(cfg, snapshot)
            path = os.path.join(branch['out_dir'], rundir.CKPT)
            if not os.path.exists(path):
                with rundir.writing(path, f'the snapshot of iter {run.iter_num}', standing):
                    os.makedirs(branch['out_dir'], exist_ok=True)
                    rundir.save_checkpoint(state | {'config': branch, 'finished': False}, path)
                print(f"snapshot at iter {run.iter_num} (fit + {snapshot}); its cooldown branch: "
                      f"{shlex.join(['python', 'train.py', *run.argv, *branch_flags(cfg, snapshot), '--init_from=resume'])}")
        if not first:
            with rundir.writing(run.ckpt_path, f'the checkpoint of iter {run.iter_num}', standing):
                rundir.save_checkpoint(state, run.ckpt_path)
            run.saved_iter = run.iter_num
    if procs.master and run.iter_num not in run.logged:
        run.model.eval()                # {task: {'<m>x': accuracy}}, None where a length is skipped
        with procs.autocast():          # the precision the run trains in
            accs = eval_lengths.length_eval(run.model, run.tok, run.eval_tasks, run.final_multiples if final else run.quick_multiples,
                                            cfg['eval_samples'], cfg['eval_batch_size'], procs.device)
        run.model.train()
        if run.schedule.observe(run.iter_num, accs, final):
            print(f"fit at iter {run.iter_num}: 1x accuracy >= {cfg['fit_accuracy']}"
                  + (f"; stopping at iter {run.schedule.stop()}" if cfg['steps_after_fit'] else ""))
        record = {'iter': run.iter_num, 'train_loss': run.train_loss, 'val_loss': val_loss,
                  'lr': run.schedule.lr(run.iter_num), 'tokens_per_sec': run.tokens_per_sec, 'mfu': run.mfu,
                  'elapsed_s': round(time.time() - run.t_start, 1), 'length_eval': accs, 'fit_iter': run.schedule.fit_iter,
                  **({'final': True} if final else {}), **(run.notes if run.iter_num == run.start_iter else {})}
        with rundir.writing(run.log_path, f'the log record of iter {run.iter_num}', standing):
            rundir.append_line(run.log_path, json.dumps(record))
        run.logged[run.iter_num] = record
        for task, by_m in accs.items():
            print(f"eval {run.iter_num}: val loss {val_loss if val_loss is None else round(val_loss, 4)}, {task} accuracy "
                  + ", ".join(f"{int(m[:-1]) * cfg['block_size']} ({m}): {format_accuracy(a)}" for m, a in by_m.items()))
    if procs.ddp:  # every process stops at the step rank 0 decided
        t = torch.tensor([-1 if run.schedule.fit_iter is None else run.schedule.fit_iter], device=procs.device)
        dist.broadcast(t, 0)
        run.schedule.fit_iter = None if t.item() < 0 else int(t.item())


def train_step(model, optimizer, split, cfg, procs, step, lr):
    """One optimizer step on the step's global batch, the same on every process; each takes its
    share of the rows. -> (the step's loss, the mean over its n_step answer tokens; n_step). A loss
    that is not finite takes no step: the weights stay as they were."""
    for group in optimizer.param_groups:
        group['lr'] = lr
    gen = torch.Generator().manual_seed(draw_seed(cfg['seed'], step))
    rows = torch.randint(split.n_rows, (procs.step_rows,), generator=gen).tolist()
    n_step = max(count_targets(split, rows, cfg['block_size'], cfg['loss_on']), 1)
    mine = rows[procs.rank * procs.rank_rows:(procs.rank + 1) * procs.rank_rows]
    loss_sum = 0.0
    for micro in range(procs.micro_steps):
        x, y = rows_to_batch(split, mine[micro * procs.micro_rows:(micro + 1) * procs.micro_rows],
                             cfg['block_size'], cfg['loss_on'], procs.device)
        torch.manual_seed(draw_seed(cfg['seed'], step, procs.rank * procs.micro_steps + micro, 1))   # this micro-batch's masks
        if procs.ddp:  # sync gradients on the last micro-step only
            model.require_backward_grad_sync = micro == procs.micro_steps - 1
        with procs.autocast():
            _, loss = model(x, y)
        n = int((y != -1).sum())
        # loss is the mean over this micro-batch's n targets; weight it so the step's gradient is
        # the mean over all n_step targets (DDP averages over processes, hence * world_size)
        (loss * (n * procs.world_size / n_step)).backward()
        loss_sum += loss.item() * n
    if procs.ddp:  # the logged loss is the step's, not this process's share (in float64, as one process sums it)
        t = torch.tensor([loss_sum], device=procs.device, dtype=torch.float64)
        dist.all_reduce(t)
        loss_sum = t.item()
    loss_f = loss_sum / n_step
    if math.isfinite(loss_f):
        if cfg['grad_clip']:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg['grad_clip'])
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_f, n_step


def main(argv):
    cfg = configure(settings_of(globals()), argv)
    out_dir = cfg['out_dir']
    run = SimpleNamespace(iter_num=0, saved_iter=None, argv=argv)   # the step reached, the step of the last checkpoint written
    run.eval_tasks, run.quick_multiples, run.final_multiples = check_config(cfg)
    # DDP: one process per device, launched by torchrun; rank 0 owns the run dir and speaks for the run
    master, world_size = int(os.environ.get('RANK', 0)) == 0, int(os.environ.get('WORLD_SIZE', 1))

    def standing():
        return where_it_stands(argv, out_dir, run.saved_iter, world_size)
    rundir.exit_on_signals(lambda: f"stopped at iter {run.iter_num}; {standing()}" if master else None)
    rundir.die_with_parent()                        # a trainer that ablate.py started ends with it
    if master:
        with rundir.writing(os.path.join(out_dir, rundir.LOCK), 'the lock file', "start again (or choose another --out_dir)"):
            try:
                rundir.DirLock(out_dir)
            except rundir.Held as e:
                raise SystemExit(f"{out_dir} is in use by {e} (see {out_dir}/{rundir.LOCK}): wait for it to end, or "
                                 f"stop it (kill {e.pid}) and rerun this command") from None
    procs = setup_processes(cfg)

    # the data, the model and the run dir
    run.ckpt_path, run.log_path, run.logged = os.path.join(out_dir, rundir.CKPT), os.path.join(out_dir, 'log.jsonl'), {}
    if cfg['init_from'] != 'resume' and os.path.exists(run.ckpt_path):
        raise SystemExit(f"{out_dir} already holds a run ({run.ckpt_path}): continue it with --init_from=resume, "
                         f"or start over in another --out_dir (or delete {out_dir})")
    run.meta, run.tok, run.data = open_data(cfg, procs.master)
    (run.model, run.optimizer, run.iter_num, run.best_val_loss, run.resumed, run.notes,
     run.last) = start_model(cfg, run.tok, procs.device)
    run.saved_iter = run.iter_num if run.resumed else None
    tokens_per_iter = procs.step_rows * cfg['block_size']
    if procs.master:
        with rundir.writing(run.log_path, 'the log', standing):
            run.log_path, run.logged = open_log(out_dir, run.resumed, run.iter_num)
        tok_path = os.path.join(out_dir, 'tokenizer.json')            # eval_lengths.py reads it from the run dir
        with rundir.writing(tok_path, 'the tokenizer', standing):
            with open(os.path.join(cfg['data_dir'], 'tokenizer.json'), 'rb') as f:
                rundir.write_atomic(tok_path, f.read())
        print(f"tokens per iteration: {tokens_per_iter:,} ({procs.world_size} process(es) x {procs.micro_steps} micro-steps "
              f"x {procs.micro_rows} rows x {cfg['block_size']} tokens); device {procs.device}, {procs.dtype}")
        reach = window_reach(run.model)
        if reach is not None and sample_data.beyond_reach(run.meta, reach) is not None:
            print(f"{sample_data.beyond_reach(run.meta, reach):.1%} of the training answers lie beyond the local layers' "
                  f"reach ({reach} tokens): only a global layer can retrieve them")
    # the step at which the run fit (first quick eval with 1x >= fit_accuracy), kept in every log record:
    # as the checkpoint saw it (before its own step's eval), unless the log holds that step's record (its
    # eval done). A log that a crash cut back further must not make the resume find the fit again, later
    resumed_at = run.logged.get(run.iter_num) if run.resumed else None
    run.schedule = Schedule(cfg, resumed_at['fit_iter'] if resumed_at else run.last['fit_iter'])
    model = CompiledOrEager(run.model) if cfg['compile'] else run.model
    if procs.ddp:
        model = DDP(model, device_ids=[int(os.environ['LOCAL_RANK'])] if procs.device_type == 'cuda' else None)

    # the training loop: evaluate at the top of an iteration, then one step
    run.start_iter, run.t_start = run.iter_num, time.time()
    run.train_loss, run.tokens_per_sec, run.mfu = run.last['train_loss'], run.last['tokens_per_sec'] or 0.0, run.last['mfu'] or 0.0
    t_last, iter_last = run.t_start, run.iter_num
    model.train()
    while True:
        final = run.iter_num == run.schedule.stop()
        if run.iter_num % cfg['eval_interval'] == 0 or final or run.schedule.snapshot_at(run.iter_num) is not None:
            evaluate_and_log(run, cfg, procs, final, standing)
            t_last, iter_last = time.time(), run.iter_num   # the eval's time is not training time
        if run.iter_num >= run.schedule.stop():           # (the eval may have found the fit, and so the stop)
            break
        lr = run.schedule.lr(run.iter_num)
        step = run.notes.get('init_iter', 0) + run.iter_num   # continued training does not replay its source's draws
        run.train_loss, n_step = train_step(model, run.optimizer, run.data['train'], cfg, procs, step, lr)
        if not math.isfinite(run.train_loss):
            diverged(f"loss is {run.train_loss} at iter {run.iter_num}", run, cfg)
        run.iter_num += 1
        if run.iter_num % cfg['log_interval'] == 0 and procs.master:
            t_now = time.time()
            dt = (t_now - t_last) / (run.iter_num - iter_last)
            t_last, iter_last = t_now, run.iter_num
            run.tokens_per_sec = tokens_per_iter / dt
            peak = cfg['peak_flops']
            run.mfu = run.model.estimate_mfu(tokens_per_iter // procs.world_size, dt, peak, n_step / tokens_per_iter) if peak else 0.0
            eta = (run.schedule.stop() - run.iter_num) * dt
            print(f"iter {run.iter_num}/{run.schedule.stop()}: loss {run.train_loss:.4f}, lr {lr:.2e}, "
                  f"{dt * 1000:.0f} ms/iter, {run.tokens_per_sec:,.0f} tok/s" + (f", mfu {run.mfu * 100:.1f}%" if peak else "")
                  + f", eta {eta / 60:.1f} min")

    if procs.master:
        print(f"done: {run.iter_num} iters in {(time.time() - run.t_start) / 60:.1f} min; checkpoint {run.ckpt_path}")
        val = [r['val_loss'] for _, r in sorted(run.logged.items()) if r.get('val_loss') is not None]
        if len(val) > 1 and val[-1] >= val[0]:   # e.g. learning_rate=1e6 ends at chance level without an error
            print(f"note: the val loss did not fall ({val[0]:.4f} at the first eval, {val[-1]:.4f} at the last): "
                  f"the run learned nothing; check learning_rate (now {cfg['learning_rate']})")
    if procs.ddp:  # leave together: a gloo rank that tears down while its peer still works can abort
        dist.barrier()
        dist.destroy_process_group()


if __name__ == '__main__':
    main(sys.argv[1:])
