"""
Train a small model from scratch on the synthetic retrieval corpus, watching length
generalization as it trains. On one CPU or GPU, or on several with DDP:

    python train.py config/vpad.py --dropout_site=pre_norm --out_dir=out/pre_norm
    torchrun --standalone --nproc_per_node=4 train.py config/vpad.py

A step's rows and dropout masks come from (seed, step), so a resumed run continues exactly. Every
eval_interval: the checkpoint, then val loss and a quick length eval to out_dir/log.jsonl. The run
fits at the first quick eval with 1x >= fit_accuracy; base/schedule.py makes that the learning rate,
the stop and a trunk's snapshots. start() does everything that can fail before the first step.
"""

from configurator import configure, settings_of  # first: a script's start-up (configurator.startup)

import json
import math
import os
import pathlib
import shlex
import sys
import time
from contextlib import nullcontext
from datetime import timedelta
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from base import rundir
from base.schedule import Schedule, branch_argv, branch_overrides, check_schedule
from model import GPT, CompiledOrEager, GPTConfig
import sample_data
import eval_lengths

# -----------------------------------------------------------------------------
# default config values: the main run, whose reasons config/vpad.py gives. A config file and
# --key=value override them (configurator.py); `python train.py --help` lists them.
# I/O
out_dir = 'out/vpad'       # the run dir: ckpt.pt, log.jsonl, tokenizer.json
eval_interval = 250        # steps between checkpoint + val loss + quick length eval
log_interval = 50          # steps between progress lines
eval_iters = 20            # val loss over a fixed set of eval_iters * batch_size val rows
init_from = 'scratch'      # 'scratch', 'resume' (out_dir/ckpt.pt), or a run dir / ckpt.pt (weights)
# data
data_dir = 'data/mqar_64'  # the corpus; generated here on first use
tasks = 'mqar'             # task[:weight],... (sample_data.TASKS)
num_tokens = 6_000_000     # training tokens to generate when data_dir is empty
data_seed = 1337           # seeds the corpus; `seed` never changes it
loss_on = 'answers'        # 'answers': loss only on answer tokens; 'all': LM loss
min_doc_len = 40           # shortest training document in tokens (0 = each task's own minimum)
distractors = 0.0          # mqar_haystack: the chance that a haystack line is a distractor pair
block_size = 64            # the training length: the longest training document
batch_size = 32            # rows per micro-batch
gradient_accumulation_steps = 1  # micro-batches per optimizer step, over all processes together
# model
n_layer = 2                # layers
n_head = 1                 # attention heads
n_embd = 64                # width
window = 0                 # sliding-window size of RoPE attention layers (0 = full causal)
nope_every = 1             # every k-th attention layer is global without RoPE (0 = never)
short_conv = 3             # attention layers mix in the previous short_conv positions (0 = off)
block_pattern = 'A'        # cycled over layers: 'A' attention + MLP, 'M' Mamba2 ('AM' = hybrid)
rope_theta = 10000.0       # RoPE base
d_state = 64               # Mamba2 state size
expand = 2                 # Mamba2 inner width = expand * n_embd
headdim = 32               # Mamba2 channels per head
d_conv = 4                 # Mamba2 causal conv width
chunk_size = 64            # Mamba2 SSD chunk length
state_passing = ''         # Mamba2, in training only: each row's initial state in every Mamba2 layer. '': zero, as in
                           # evaluation; 'carry': the detached final state of a row of the previous step (training
                           # from carried states); 'noise': noise with those states' per-coordinate mean and sd
fast_kernels = True        # base/kernels.py's fast paths; False: model.py's readable code alone (the same numbers
                           # to float rounding, slower)
dropout = 0.1              # the drop probability p
dropout_site = 'vpad'      # 'none', 'pre_norm', 'pre_linear' or 'vpad'
# AdamW and the schedule (base/schedule.py)
learning_rate = 3e-3       # peak learning rate
max_iters = 4000           # optimizer steps; with steps_after_fit, the cap on steps to the fit
fit_accuracy = 0.95        # the run fits at the first quick eval with 1x accuracy >= this
steps_after_fit = 1000     # stop this many steps after the fit (0 = always run max_iters)
cooldown_iters = 0         # decay steps before the stop (0 = from the fit, or lr_decay_iters' cosine)
snapshots_after_fit = ''   # e.g. '1000,4000': a trunk's snapshots, branches in out_dir/cooldown<k>
snapshots_at_iter = ''     # e.g. '6000,16000': a trunk's snapshots at fixed steps, branches in out_dir/at<k>
weight_decay = 0.0         # AdamW weight decay (0 = off)
beta1 = 0.9                # AdamW beta1
beta2 = 0.95               # AdamW beta2
grad_clip = 1.0            # clip the gradient norm at this value (0 = off)
decay_lr = True            # cosine down to min_lr (base/schedule.py says when); False: constant
warmup_iters = 100         # steps of linear warmup
lr_decay_iters = 0         # steps of the cosine without steps_after_fit; 0 = max_iters
min_lr = 1e-4              # the learning rate at the end of the decay
# length eval during training
eval_tasks = ''            # tasks of the quick length eval ('' = the trained tasks)
eval_multiples = '1,4,16'  # the quick eval at each eval_interval, in multiples of block_size
final_multiples = '1,2,4,8,16,32,64'   # the eval at the last step
eval_samples = 32          # held-out examples per task and length
eval_batch_size = 8        # examples per forward pass in the length eval
# system
device = 'auto'            # 'auto', 'cpu', 'cuda', 'cuda:0', ...
dtype = 'auto'             # 'auto' (bfloat16 on CUDA where supported), 'float32', 'bfloat16'
compile = False            # torch.compile the model (worth it on GPU)
peak_flops = 0.0           # the device's peak FLOP/s per process, for MFU in the log (0 = no MFU)
seed = 1337                # seeds initial weights, batch order and dropout masks
# -----------------------------------------------------------------------------
# what shapes the weights, so init_from=<path> needs them equal (site, p, window, RoPE may change)
SHAPE_KEYS = 'n_layer n_head n_embd block_pattern short_conv d_state expand headdim d_conv'.split()


# -----------------------------------------------------------------------------
# the settings, checked before anything is generated or written: train.py's own here, the corpus',
# the evals' and the schedule's by the files that own them

MODEL_KEYS = [f for f in GPTConfig.__dataclass_fields__ if f != 'vocab_size']
POSITIVE = ('eval_interval', 'log_interval', 'eval_iters', 'num_tokens', 'block_size', 'batch_size',
            'gradient_accumulation_steps', 'n_layer', 'n_head', 'n_embd', 'max_iters', 'eval_samples',
            'eval_batch_size', 'd_state', 'expand', 'headdim', 'd_conv', 'chunk_size')
# sizes past these cannot be built on any machine (a tensor's size overflows before memory is checked)
AT_MOST = {'n_embd': 2 ** 16, 'n_layer': 2 ** 12, 'n_head': 2 ** 12, 'd_state': 2 ** 16, 'expand': 64,
           'headdim': 2 ** 16, 'd_conv': 2 ** 10, 'chunk_size': 2 ** 16, 'learning_rate': 1e38, 'min_lr': 1e38}
AT_MOST_WHY = dict.fromkeys(AT_MOST, "no model that size can be built; lower it") | dict.fromkeys(
    ('learning_rate', 'min_lr'), "float32 overflows in AdamW's update; lower it")
NON_NEGATIVE = ('window', 'nope_every', 'weight_decay', 'grad_clip', 'warmup_iters', 'lr_decay_iters',
                'min_lr', 'peak_flops', 'min_doc_len', 'steps_after_fit', 'cooldown_iters')
# what RoPE layers read; set away from their defaults while every attention layer is NoPE, a run would not change
ROPE_ONLY = ('window', 'rope_theta')
STATE_PASSING = ('', 'carry', 'noise')


class Checked(NamedTuple):
    """What check_config parsed: the eval tasks, the quick and the final multiples, a trunk's snapshots and
    whether they are fixed steps (check_schedule), the model's config."""
    eval_tasks: list
    quick: list
    final: list
    snapshots: tuple
    fixed: bool
    model: GPTConfig


def check_config(cfg, here=True):
    """Every setting of a run (cfg) that a user can get wrong, checked before anything is generated or
    written, each by the file that owns it (the corpus: sample_data.check_corpus; the evals' lengths and
    examples: eval_lengths.check_lengths; the schedule: base/schedule.check_schedule); the device and the
    memory only where the run will run here (not for a cluster's node). -> Checked, the parsed values"""
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
            raise ValueError(f"batch_size x gradient_accumulation_steps = "
                             f"{cfg['batch_size'] * cfg['gradient_accumulation_steps']:,} rows per step, more than the "
                             f"{2 ** 24:,} a step can draw: lower gradient_accumulation_steps")
        for k in ('out_dir', 'data_dir'):
            if not cfg[k].strip():
                raise ValueError(f"{k} is empty: give a folder, e.g. --{k}=out/run1")
            if os.path.exists(cfg[k]) and not os.path.isdir(cfg[k]):
                raise ValueError(f"{k}={cfg[k]!r} is a file, not a folder: give a folder, e.g. --{k}=out/run1")
        if os.path.realpath(cfg['out_dir']) == os.path.realpath(cfg['data_dir']):
            raise ValueError(f"out_dir and data_dir are the same folder ({cfg['out_dir']!r}): the run dir and the "
                             f"corpus need one each, e.g. --data_dir=data/"
                             f"{os.path.basename(os.path.normpath(cfg['data_dir']))}")
        if cfg['state_passing'] not in STATE_PASSING:
            raise ValueError(f"state_passing={cfg['state_passing']!r}: use '' (zero initial states), 'carry' or 'noise'")
        if cfg['state_passing'] and 'M' not in cfg['block_pattern']:
            raise ValueError(f"state_passing={cfg['state_passing']!r} gives Mamba2 layers their initial states, and "
                             f"block_pattern={cfg['block_pattern']!r} has none: drop it, or add 'M' layers")
        if cfg['loss_on'] not in ('answers', 'all'):
            raise ValueError(f"loss_on={cfg['loss_on']!r}: use 'answers' or 'all'")
        if cfg['dtype'] not in ('auto', 'float32', 'bfloat16'):
            raise ValueError(f"dtype={cfg['dtype']!r}: use 'auto', 'float32' or 'bfloat16'")
        device = rundir.pick_device(cfg['device']) if here else None     # exits with one line if unusable
        if cfg['init_from'] not in ('scratch', 'resume'):
            path = rundir.ckpt_path(cfg['init_from'])
            if not os.path.isfile(path):
                raise ValueError(f"init_from={cfg['init_from']!r}: no checkpoint there; give 'scratch', "
                                 f"'resume', or a run dir / ckpt.pt of a finished run")
            owner = rundir.busy(os.path.dirname(path))
            if owner:     # its checkpoint is the latest of a run still training, not the run it will end as
                raise ValueError(f"init_from={cfg['init_from']!r} is being trained by {owner}: wait for it to "
                                 f"finish (or stop it), then rerun")
        tok = sample_data.build_tokenizer()
        model = GPTConfig(**{k: cfg[k] for k in MODEL_KEYS}, vocab_size=tok.vocab_size)
        trained = sample_data.check_corpus(cfg, tok)
        eval_tasks = (sample_data.parse_tasks(cfg['eval_tasks'], 'eval_tasks', weighted=False)[0]
                      if cfg['eval_tasks'].strip() else trained)
        quick = eval_lengths.parse_multiples('eval_multiples', cfg['eval_multiples'])
        final = eval_lengths.parse_multiples('final_multiples', cfg['final_multiples'])
        if cfg['steps_after_fit'] and 1 not in quick:
            raise ValueError(f"steps_after_fit needs the fit, judged at 1x: add 1 to "
                             f"eval_multiples={cfg['eval_multiples']!r}")
        snapshots, fixed = check_schedule(cfg)
        if not 0 < cfg['fit_accuracy'] <= 1:
            raise ValueError(f"fit_accuracy={cfg['fit_accuracy']} must be in (0, 1]")
        for note in no_effect(cfg, model):
            print(f"note: {note}")
        shortest = cfg['block_size'] * min(quick + final)
        eval_lengths.check_lengths(eval_tasks, shortest, tok, '(block_size x the smallest multiple)')
        if here:
            check_memory(cfg, model, device)
            eval_lengths.check_examples('eval_samples', cfg['eval_samples'], shortest)
    except ValueError as e:
        raise SystemExit(f"config error: {e}")
    return Checked(eval_tasks, quick, final, snapshots, fixed, model)


def no_effect(cfg, c):
    """Settings away from their defaults that cannot change this run (a config may set them for a
    recipe that used them): one note each, printed, so `--window=16` on an all-NoPE model is not
    taken for an ablation."""
    notes = []
    if cfg['lr_decay_iters'] and (cfg['steps_after_fit'] or cfg['cooldown_iters'] or not cfg['decay_lr']):
        why = ('decay_lr=False' if not cfg['decay_lr'] else
               f"steps_after_fit={cfg['steps_after_fit']} (the decay runs after the fit)" if cfg['steps_after_fit']
               else f"cooldown_iters={cfg['cooldown_iters']} (the decay runs over the last steps before max_iters)")
        notes.append(f"lr_decay_iters={cfg['lr_decay_iters']} has no effect with {why}")
    if cfg['decay_lr'] and not cfg['steps_after_fit'] and cfg['max_iters'] <= cfg['warmup_iters']:
        notes.append(f"the run stops at max_iters={cfg['max_iters']}, inside its warmup (warmup_iters="
                     f"{cfg['warmup_iters']}): its learning rate never decays" + (
                         f" (cooldown_iters={cfg['cooldown_iters']} has no effect)" if cfg['cooldown_iters'] else ''))
    if not c.has_rope():
        notes += [f"{k}={cfg[k]:g} has no effect: no attention layer uses RoPE (nope_every={cfg['nope_every']}, "
                  f"block_pattern={cfg['block_pattern']!r})" for k in ROPE_ONLY if cfg[k] != globals()[k]]
    return notes


def check_memory(cfg, c, device):
    """Refuse a batch that cannot fit before anything is written: a batch_size too large for the machine
    otherwise grows until the kernel kills the run without a word."""
    cuda = device.startswith('cuda')
    # a GPU's whole memory, not its free memory: asking for that would open a CUDA context in ablate.py too
    have = (torch.cuda.get_device_properties(torch.device(device)).total_memory if cuda
            else eval_lengths.available_bytes('cpu'))
    act_bytes = 2 if cfg['dtype'] == 'bfloat16' or cfg['dtype'] == 'auto' and cuda else 4
    weights = 16 * (12 * c.n_layer * c.n_embd ** 2 + c.vocab_size * c.n_embd)   # + gradients and AdamW's moments
    if weights > 0.8 * have:
        raise ValueError(f"n_layer={c.n_layer} layers of width n_embd={c.n_embd} need about {rundir.size_text(weights)} "
                         f"for the weights, their gradients and AdamW's moments, and {device} has "
                         f"{rundir.size_text(have)}: lower n_embd or n_layer")
    need = train_bytes(cfg, c, device, act_bytes)
    if need > 0.8 * have:
        raise ValueError(f"batch_size={cfg['batch_size']} rows of {cfg['block_size']} tokens need about "
                         f"{rundir.size_text(need)} to train and {device} has {rundir.size_text(have)}: lower batch_size "
                         f"(raise gradient_accumulation_steps to keep the tokens per step)")


def train_bytes(cfg, c, device, act_bytes):
    """Rough peak memory of a training micro-step of batch_size rows: each layer keeps about
    36 x n_embd activations a token for the backward (measured: 34 at width 128 on the CPU; python -m
    tools.bench --only=saved: 32 at width 768 in bf16), plus one forward's transients, and the weights, their
    gradients and AdamW's two moments (16 bytes a parameter)."""
    tokens, params = cfg['batch_size'] * cfg['block_size'], 12 * c.n_layer * c.n_embd ** 2 + c.vocab_size * c.n_embd
    return (act_bytes * tokens * 36 * c.n_layer * c.n_embd + 16 * params
            + eval_lengths.estimate_bytes(c, cfg['batch_size'], cfg['block_size'], device))


# -----------------------------------------------------------------------------
# the processes (DDP ranks, devices and their share of a step) and the run's state

class Procs(NamedTuple):
    """This process's place in a run: its DDP rank, its device, and its share of a step's rows."""
    ddp: bool
    master: bool        # rank 0: owns the run dir, generates missing data, runs the evals, logs
    rank: int
    world_size: int
    device: str         # 'cpu' or 'cuda:<local rank>'
    dtype: str          # 'float32' or 'bfloat16' (autocast)
    step_rows: int      # rows per step, all processes together
    rank_rows: int      # this process's rows per step
    micro_rows: int     # rows per micro-batch
    micro_steps: int
    device_type: str    # 'cpu' or 'cuda'

    def autocast(self):
        bf16 = self.dtype == 'bfloat16'
        return torch.autocast(self.device_type, dtype=torch.bfloat16) if bf16 else nullcontext()


def setup_processes(cfg):
    """DDP: one process per device, launched by torchrun (else one process). -> Procs"""
    ddp = int(os.environ.get('RANK', -1)) != -1
    device, rank, world_size = rundir.pick_device(cfg['device']), 0, 1
    if ddp:   # rank 0 alone generates missing data and runs the length evals; the others wait
        backend = 'nccl' if device.startswith('cuda') else 'gloo'
        dist.init_process_group(backend=backend, timeout=timedelta(hours=2))
        rank, world_size = dist.get_rank(), dist.get_world_size()
        if device.startswith('cuda'):
            device = f"cuda:{os.environ['LOCAL_RANK']}"
            torch.cuda.set_device(device)
    step_rows = cfg['batch_size'] * cfg['gradient_accumulation_steps']
    if step_rows % world_size:
        raise SystemExit(f"config error: {step_rows} rows a step cannot be split over {world_size} "
                         f"processes: make batch_size x gradient_accumulation_steps divisible")
    rank_rows = step_rows // world_size
    micro_rows = min(cfg['batch_size'], rank_rows)
    dtype = rundir.pick_dtype(cfg['dtype'], device)
    if device.startswith('cuda'):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return Procs(ddp, rank == 0, rank, world_size, device, dtype, step_rows, rank_rows, micro_rows,
                 -(-rank_rows // micro_rows), device.split(':')[0])


def draw_seed(*parts):
    """A seed from (seed, step, micro-batch, ...): the same on every process and after a resume."""
    s = 0
    for p in parts:
        s = (s * 1_000_003 + int(p)) % 2**61
    return s


@dataclass
class Run:
    cfg: dict
    procs: Procs
    argv: list                     # the command line, for the commands that continue the run
    checked: object                # checks.Checked: eval tasks, quick and final multiples, model
    ckpt_path: str
    log_path: str
    iter_num: int = 0              # the step reached
    saved_iter: Optional[int] = None   # the step of the last checkpoint written
    start_iter: int = 0            # the step this process started (or resumed) at
    resumed: bool = False
    meta: dict = None              # the corpus: meta.json, tokenizer, {'train', 'val'} splits
    tok: object = None
    data: dict = None
    model: object = None           # the model (uncompiled, unwrapped) and its optimizer
    optimizer: object = None
    schedule: object = None        # Schedule: the fit, the learning rate, the stop, the snapshots
    best_val_loss: float = float('inf')
    train_loss: Optional[float] = None
    tokens_per_sec: float = 0.0
    mfu: float = 0.0
    notes: dict = field(default_factory=dict)    # init_from and init_iter of continued training
    last: dict = field(default_factory=dict)     # the resumed checkpoint, less its tensors
    logged: dict = field(default_factory=dict)   # {iter: log record} written so far
    carried: Optional[list] = None               # state_passing: per micro-step, its rows' last final states
    provenance: Optional[dict] = None            # rundir.provenance(): in the first record logged
    t_start: float = 0.0

    def standing(self):
        """Where the run stands after an interruption or a disk error, and how to go on."""
        return rundir.where_it_stands(self.argv, self.cfg['out_dir'], self.saved_iter, self.procs.world_size)


# -----------------------------------------------------------------------------
# data and model: the corpus (sample_data's, opened and checked here) and the batches drawn from it, and the model fresh,
# resumed, or from another run's weights

class Split(NamedTuple):
    ids: np.ndarray    # token ids, flat (sample_data.load_split's memmap)
    mask: np.ndarray   # 1 where the token is part of an answer
    n_rows: int        # aligned rows of block_size (+1) tokens


def open_corpus(cfg, master, wait=None):
    """The run's corpus: generated on first use (by rank 0; `wait` lets the others wait), then checked against
    the run's settings and its checksums. -> (meta, tokenizer, {'train', 'val': Split}); anything wrong is one
    line that says what to do."""
    try:
        if master:                    # one process generates a missing corpus; another run that needs it waits
            sample_data.make_corpus(cfg, "rerun (or point --data_dir elsewhere)")
        if wait:
            wait()
        meta = sample_data.load_meta(cfg['data_dir'])
        sample_data.check_checksums(cfg['data_dir'], meta)
        tok = sample_data.load_tokenizer(cfg['data_dir'])
    except ValueError as e:
        raise SystemExit(str(e))
    differ = sample_data.differing_settings(meta, cfg)
    if differ:
        raise SystemExit(f"{cfg['data_dir']} was generated with other settings ("
                         + ", ".join(f"{k}={a!r}, this run: {b!r}" for k, (a, b) in differ.items())
                         + f"): point data_dir elsewhere or delete {cfg['data_dir']}")
    data = {}
    for split in ('train', 'val'):
        ids, mask = sample_data.load_split(cfg['data_dir'], split)
        data[split] = Split(ids, mask, (len(ids) - 1) // cfg['block_size'])
        if not data[split].n_rows:
            raise SystemExit(f"{cfg['data_dir']}/{split}.bin holds {len(ids):,} tokens, less than one row of "
                             f"block_size={cfg['block_size']} + 1: delete {cfg['data_dir']} and rerun (train.py "
                             f"generates it again), or raise num_tokens")
    return meta, tok, data


def batch_rows(split, rows, T, loss_on):
    """Aligned rows of a Split -> x (B, T) and y (B, T), int64, y -1 where no loss is taken."""
    x = np.stack([split.ids[r * T: r * T + T] for r in rows]).astype(np.int64)
    y = np.stack([split.ids[r * T + 1: r * T + T + 1] for r in rows]).astype(np.int64)
    if loss_on == 'answers':
        m = np.stack([split.mask[r * T + 1: r * T + T + 1] for r in rows])
        y[m == 0] = -1
    return x, y


def count_targets(split, rows, T, loss_on):
    """Positions with a loss in these rows: the step's loss is a mean over all of them."""
    if loss_on == 'all':
        return len(rows) * T
    return int(sum(int(split.mask[r * T + 1: r * T + T + 1].sum()) for r in rows))


def rows_to_batch(split, rows, T, loss_on, device):
    """Aligned rows -> x (B, T) and y (B, T) with -1 where no loss is taken, on the device."""
    x, y = (torch.from_numpy(a) for a in batch_rows(split, rows, T, loss_on))
    if device.startswith('cuda'):
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in (x, y))
    return x, y


def load_start(path, resume):
    """The checkpoint a run starts from, its own (resume) or another run's; one line if unusable."""
    if not os.path.isfile(path):
        raise SystemExit(f"no checkpoint at {path} to resume: start the run with init_from=scratch")
    fix = (f"set it aside (mv {path} {path}.bad) and start again with --init_from=scratch" if resume
           else "retrain that run")
    return rundir.load_checkpoint(path, f"restore a copy, or {fix}")


def start_model(run, config):
    """run.model and run.optimizer from scratch, from out_dir's checkpoint (resume: also its step,
    best val loss and the values it logged), or from another run's weights (init_from=<path>).
    config: the model's GPTConfig, as check_config built it."""
    cfg, tok, init_from = run.cfg, run.tok, run.cfg['init_from']
    torch.manual_seed(cfg['seed'])                      # initial weights
    run.model = model = GPT(config)
    if init_from != 'scratch':
        path = run.ckpt_path if init_from == 'resume' else rundir.ckpt_path(init_from)
        ckpt = load_start(path, init_from == 'resume')
        was = vars(GPTConfig.from_checkpoint(ckpt['model_args'], path))
        if ckpt['tokenizer'] != tok.name or was['vocab_size'] != tok.vocab_size:
            raise SystemExit(f"tokenizer mismatch: {path} was trained with {ckpt['tokenizer']!r} "
                             f"(vocab {was['vocab_size']}), {cfg['data_dir']} has {tok.name!r} "
                             f"(vocab {tok.vocab_size}); use the data_dir that run was trained on")
        keys = [k for k in MODEL_KEYS if k != 'fast_kernels'] if init_from == 'resume' else SHAPE_KEYS
        changed = [f"{k}={was[k]!r} (this run: {getattr(config, k)!r})" for k in keys
                   if was[k] != getattr(config, k)]
        if changed:
            raise SystemExit(f"{path} was trained with other model settings: {', '.join(changed)}")
        model.load_state_dict(ckpt['model'])
        if init_from == 'resume':
            run.iter_num, run.best_val_loss = ckpt['iter_num'], ckpt['best_val_loss']
            was = {k: ckpt['config'].get(k, rundir.ADDED.get(k)) for k in cfg}
            changed = [f"{k}={was[k]!r} -> {cfg[k]!r}" for k in cfg
                       if k not in ('init_from', 'max_iters', 'out_dir') and was[k] != cfg[k]]
            print(f"resumed from {path} at iter {run.iter_num}" + (
                "; note: settings changed since, so this is not the run an uninterrupted one would "
                f"be: {', '.join(changed)}" if changed else ""))
        else:
            run.notes = {'init_from': os.path.abspath(path), 'init_iter': ckpt['iter_num']}
            print(f"initialized from {path} (iter {ckpt['iter_num']}): weights only")
    model.to(run.procs.device)
    run.optimizer = model.configure_optimizers(cfg['weight_decay'], cfg['learning_rate'],
                                               (cfg['beta1'], cfg['beta2']), run.procs.device_type)
    if init_from == 'resume':
        run.optimizer.load_state_dict(ckpt['optimizer'])
        run.resumed, run.saved_iter = True, run.iter_num
        run.notes = {k: ckpt[k] for k in ('init_from', 'init_iter') if k in ckpt}
        run.last = {k: v for k, v in ckpt.items() if k not in ('model', 'optimizer')}


# -----------------------------------------------------------------------------
# the evals, the checkpoint, the log and the step

@torch.no_grad()
def estimate_val_loss(model, split, cfg, procs):
    """Mean loss per target over the same val rows every time (a fixed eval set)."""
    model.eval()
    total, count = 0.0, 0
    for k in range(cfg['eval_iters']):
        rows = [(k * cfg['batch_size'] + j) % split.n_rows for j in range(cfg['batch_size'])]
        x, y = rows_to_batch(split, rows, cfg['block_size'], cfg['loss_on'], procs.device)
        with procs.autocast():
            _, loss, _ = model(x, y)
        n = int((y != -1).sum())
        total, count = total + loss.item() * n, count + n
    model.train()
    return total / max(count, 1)


def diverged(what, run):
    """Stop without writing anything: the last checkpoint holds the last good weights."""
    kept = os.path.exists(run.ckpt_path)
    last = f"{run.ckpt_path} holds the last good weights" if kept else "no checkpoint was written"
    raise SystemExit(f"{what}: training diverged; {last}. Lower learning_rate (now "
                     f"{run.cfg['learning_rate']}) or set grad_clip")


def save(run, final):
    """The checkpoint of this step, first: nothing is lost if the length eval fails. A resumed run
    does not checkpoint its first step again. At a trunk's snapshot the state is also written as the
    first checkpoint of its cooldown branch (once: a replayed step leaves alone a branch that may be
    training). -> the step's val loss"""
    cfg, first, it = run.cfg, run.resumed and run.iter_num == run.start_iter, run.iter_num
    if first:
        val_loss = run.last.get('val_loss')      # the checkpoint's, for a record its kill cut off
    else:
        val_loss = estimate_val_loss(run.model, run.data['val'], cfg, run.procs)
        if not math.isfinite(val_loss):
            diverged(f"val loss is {val_loss} at iter {it}", run)
        run.best_val_loss = min(run.best_val_loss, val_loss)
    snapshot = run.schedule.snapshot_at(it)
    carried = gather_carried(run)
    if not run.procs.master or first and snapshot is None:
        return val_loss
    state = {'model': run.model.state_dict(), 'optimizer': run.optimizer.state_dict(),
             'model_args': run.model.config.__dict__, 'config': cfg, 'iter_num': it,
             'best_val_loss': run.best_val_loss, 'val_loss': val_loss, 'train_loss': run.train_loss,
             'tokenizer': run.tok.name, 'tokens_per_sec': run.tokens_per_sec, 'mfu': run.mfu,
             'data_meta': run.meta, 'fit_iter': run.schedule.fit_iter, 'finished': final,
             **({'carried_states': carried} if carried is not None else {}), **run.notes}
    if snapshot is not None:
        branch = cfg | branch_overrides(cfg, snapshot, run.schedule.fixed)
        path = os.path.join(branch['out_dir'], rundir.CKPT)
        if not os.path.exists(path):
            with rundir.writing(path, f'the snapshot of iter {it}', run.standing):
                os.makedirs(branch['out_dir'], exist_ok=True)
                rundir.save_checkpoint(state | {'config': branch, 'finished': False}, path)
            argv = ['python', 'train.py', *branch_argv(run.argv, cfg, snapshot, run.schedule.fixed)]
            print(f"snapshot at iter {it}{'' if run.schedule.fixed else f' (fit + {snapshot})'}; its cooldown "
                  f"branch: {shlex.join(argv + ['--init_from=resume'])}")
    if not first:
        with rundir.writing(run.ckpt_path, f'the checkpoint of iter {it}', run.standing):
            rundir.save_checkpoint(state, run.ckpt_path)
        run.saved_iter = it
    return val_loss


def gather_carried(run):
    """state_passing: every process's carried states, a list over ranks, for the checkpoint (rank 0 writes it
    and each process resumes its own); None without the option."""
    if run.carried is None:
        return None
    if not run.procs.ddp:
        return [run.carried]
    everyone = [None] * run.procs.world_size
    dist.all_gather_object(everyone, [[None if s is None else s.cpu() for s in m] if m else m for m in run.carried])
    return everyone


def resume_carried(run, saved):
    """state_passing: this process's carried states from a checkpoint's, on its device; zero states (None) for
    a checkpoint without them, or saved by another number of processes (said once)."""
    procs = run.procs
    if saved is None or len(saved) != procs.world_size:
        if procs.master:
            print(f"note: state_passing={run.cfg['state_passing']!r}: the checkpoint holds no carried states for "
                  f"{procs.world_size} process(es); the first step after the resume starts from zero states")
        return [None] * procs.micro_steps
    return [[None if s is None else s.to(procs.device) for s in m] if m else m for m in saved[procs.rank]]


def length_eval(run, final):
    """The quick length eval (the final one at the last step): {task: {'<m>x': accuracy}}, None
    where a length is skipped; in the precision the run trains in."""
    cfg, procs = run.cfg, run.procs
    multiples = run.checked.final if final else run.checked.quick
    run.model.eval()
    with procs.autocast():
        accs = eval_lengths.length_eval(run.model, run.tok, run.checked.eval_tasks, multiples,
                                        cfg['eval_samples'], cfg['eval_batch_size'], procs.device,
                                        progress=f"eval {run.iter_num}", leave=False, distractors=cfg['distractors'])
    run.model.train()
    return accs


def log_eval(run, val_loss, accs, final):
    """The step's record in log.jsonl (appended, never torn) and its lines on stdout."""
    it = run.iter_num
    record = {'iter': it, 'train_loss': run.train_loss, 'val_loss': val_loss,
              'lr': run.schedule.lr(it), 'tokens_per_sec': run.tokens_per_sec, 'mfu': run.mfu,
              'elapsed_s': round(time.time() - run.t_start, 1), 'length_eval': accs,
              'fit_iter': run.schedule.fit_iter, **({'final': True} if final else {}),
              **(run.notes if it == run.start_iter else {}),
              **({'provenance': run.provenance} if run.provenance else {})}
    with rundir.writing(run.log_path, f'the log record of iter {it}', run.standing):
        rundir.append_line(run.log_path, json.dumps(record))
    run.logged[it] = record
    run.provenance = None
    loss, T = val_loss if val_loss is None else round(val_loss, 4), run.cfg['block_size']
    for task, by_m in accs.items():
        shown = ", ".join(f"{int(m[:-1]) * T} ({m}): {'n/a (skipped)' if a is None else f'{a:.2f}'}"
                          for m, a in by_m.items())
        print(f"eval {it}: val loss {loss}, {task} accuracy {shown}")


def log_progress(run, lr, n_step, dt):
    """The progress line, at dt seconds a step since the last: loss, speed, MFU, time left."""
    tokens, peak = run.procs.step_rows * run.cfg['block_size'], run.cfg['peak_flops']
    run.tokens_per_sec = tokens / dt
    run.mfu = (run.model.estimate_mfu(tokens // run.procs.world_size, dt, peak, n_step / tokens)
               if peak else 0.0)
    eta = (run.schedule.stop() - run.iter_num) * dt
    print(f"iter {run.iter_num}/{run.schedule.stop()}: loss {run.train_loss:.4f}, lr {lr:.2e}, "
          f"{dt * 1000:.0f} ms/iter, {run.tokens_per_sec:,.0f} tok/s"
          + (f", mfu {run.mfu * 100:.1f}%" if peak else "") + f", eta {eta / 60:.1f} min")


def agree_on_fit(schedule, procs):
    """DDP: every process takes the fit (so the decay and the stop) rank 0 decided."""
    if procs.ddp:
        fit = schedule.fit_iter
        t = torch.tensor([-1 if fit is None else fit], device=procs.device)
        dist.broadcast(t, 0)
        schedule.fit_iter = None if t.item() < 0 else int(t.item())


def initial_states(carried, cfg, gen):
    """The initial states of a micro-batch's Mamba2 layers (state_passing), from the final states its rows
    reached the step before (carried: one entry per layer, (rows, h, p, n) or None; None: a first step, zero
    states): those states ('carry'), or ('noise') Gaussian draws from gen with their mean and sd per
    coordinate, fitted over the rows (states no row reached, on a new trajectory at every step)."""
    if cfg['state_passing'] == 'carry' or carried is None:
        return carried
    # one row has no spread (its sd over rows is NaN): its draw is its own state
    return [None if s is None else s.mean(0) + (s.std(0) if len(s) > 1 else torch.zeros_like(s[0]))
            * torch.randn(s.shape, generator=gen).to(s.device) for s in carried]


def train_step(model, optimizer, split, cfg, procs, step, lr, carried=None):
    """One optimizer step on the step's global batch, the same on every process; each takes its
    share of the rows. -> (the step's loss, the mean over its n_step answer tokens; n_step). A loss
    that is not finite takes no step: the weights stay as they were. carried (state_passing): per
    micro-step, the final states its rows reached at the previous step (initial_states), replaced by this
    step's, detached: each micro-step, and each process, carries its own rows' states."""
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
        # this micro-batch's dropout masks
        torch.manual_seed(draw_seed(cfg['seed'], step, procs.rank * procs.micro_steps + micro, 1))
        if procs.ddp:  # sync gradients on the last micro-step only
            model.require_backward_grad_sync = micro == procs.micro_steps - 1
        with procs.autocast():
            if carried is None:
                _, loss, _ = model(x, y)
            else:             # from carried states: the noise from a stream of its own, apart from the masks'
                gen = torch.Generator().manual_seed(draw_seed(cfg['seed'], step, procs.rank * procs.micro_steps + micro, 2))
                states = initial_states(carried[micro], cfg, gen) or [None] * cfg['n_layer']
                # the SSM state alone: a row is a new document, so its conv starts afresh
                _, loss, finals = model(x, y, states=[None if s is None else (s, None) for s in states])
                carried[micro] = [None if f is None else f[0].detach() for f in finals]
        n = int((y != -1).sum())
        # loss is the mean over this micro-batch's n targets; weight it so the step's gradient is
        # the mean over all n_step targets (DDP averages over processes, hence * world_size)
        (loss * (n * procs.world_size / n_step)).backward()
        loss_sum += loss.item() * n
    if procs.ddp:  # the step's loss, not this process's share (in float64, as one process sums it)
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


# -----------------------------------------------------------------------------
# the start (everything that can fail on bad input or a bad run dir), the loop, the end

def start(argv):
    """The settings, the processes, the run dir, the corpus, the model, the log and the schedule.
    -> (run, the model to train: compiled and wrapped in DDP where asked)"""
    cfg = configure(settings_of(globals()), argv)
    checked = check_config(cfg)
    procs = setup_processes(cfg)
    out_dir = cfg['out_dir']
    run = Run(cfg, procs, argv, checked, os.path.join(out_dir, rundir.CKPT),
              os.path.join(out_dir, rundir.LOG))
    rundir.exit_on_signals(lambda: f"stopped at iter {run.iter_num}; {run.standing()}" if procs.master else None)
    rundir.die_with_parent()                        # a trainer that ablate.py started ends with it
    if procs.master:                                # rank 0 owns the run dir and speaks for the run
        rundir.own(out_dir)
    if cfg['init_from'] != 'resume' and os.path.exists(run.ckpt_path):
        raise SystemExit(f"{out_dir} already holds a run ({run.ckpt_path}): continue it with "
                         f"--init_from=resume, or start over in another --out_dir (or delete it)")
    wait = dist.barrier if procs.ddp else None     # the others wait while rank 0 makes the corpus
    run.meta, run.tok, run.data = open_corpus(cfg, procs.master, wait)
    start_model(run, checked.model)
    if cfg['state_passing']:        # (evaluation, the val loss and the quick eval start from zero states)
        run.carried = resume_carried(run, run.last.get('carried_states')) if run.resumed else [None] * procs.micro_steps
    if procs.master:
        run.provenance = rundir.provenance(procs.device) | {'processes': procs.world_size}
        with rundir.writing(run.log_path, 'the log', run.standing):
            run.logged = rundir.open_log(run.log_path, run.resumed, run.iter_num)
        mine = os.path.join(out_dir, rundir.TOKENIZER)     # eval_lengths.py reads it here
        with rundir.writing(mine, 'the tokenizer', run.standing):
            rundir.write_atomic(mine, pathlib.Path(cfg['data_dir'], rundir.TOKENIZER).read_bytes())
        print(f"tokens per iteration: {procs.step_rows * cfg['block_size']:,} ({procs.world_size} "
              f"process(es) x {procs.micro_steps} micro-steps x {procs.micro_rows} rows x "
              f"{cfg['block_size']} tokens); device {procs.device}, {procs.dtype}")
        reach = run.model.local_reach()
        if reach is not None:
            share = sample_data.beyond_reach(run.meta, reach)
            print(f"{share:.1%} of the training answers lie beyond the local layers' reach "
                  f"({reach} tokens): only a global layer can retrieve them")
    # the fit as the checkpoint saw it (before its step's eval), unless the log holds that step's
    # record: a log that a crash cut back further must not make the resume find the fit again, later
    resumed_at = run.logged.get(run.iter_num) if run.resumed else None
    run.schedule = Schedule(cfg, resumed_at['fit_iter'] if resumed_at else run.last.get('fit_iter'),
                            checked.snapshots, checked.fixed)
    run.start_iter, run.t_start = run.iter_num, time.time()
    run.train_loss = run.last.get('train_loss')
    run.tokens_per_sec, run.mfu = run.last.get('tokens_per_sec') or 0.0, run.last.get('mfu') or 0.0
    model = CompiledOrEager(run.model) if cfg['compile'] else run.model
    if procs.ddp:
        cuda = procs.device_type == 'cuda'
        model = DDP(model, device_ids=[int(os.environ['LOCAL_RANK'])] if cuda else None)
    return run, model


def main(argv):
    run, model = start(argv)
    cfg, procs, schedule, split = run.cfg, run.procs, run.schedule, run.data['train']
    # the training loop: evaluate at the top of an iteration, then one step
    t_last, iter_last = run.t_start, run.iter_num
    model.train()
    while True:
        rundir.stop_if_asked()                      # a Ctrl-C whose exit was swallowed where it landed
        it, final = run.iter_num, run.iter_num == schedule.stop()
        if it % cfg['eval_interval'] == 0 or final or schedule.snapshot_at(it) is not None:
            val_loss = save(run, final)
            if procs.master and it not in run.logged:      # (logged already: a resume's first step)
                accs = length_eval(run, final)
                if schedule.observe(it, accs, final):
                    stop = f"; stopping at iter {schedule.stop()}" if cfg['steps_after_fit'] else ""
                    print(f"fit at iter {it}: 1x accuracy >= {cfg['fit_accuracy']}{stop}")
                log_eval(run, val_loss, accs, final)
            agree_on_fit(schedule, procs)
            t_last, iter_last = time.time(), it     # the eval's time is not training time
        if it >= schedule.stop():                   # (the eval may have found the fit, so the stop)
            break
        lr = schedule.lr(it)
        step = run.notes.get('init_iter', 0) + it   # a continuation draws on past its source
        run.train_loss, n_step = train_step(model, run.optimizer, split, cfg, procs, step, lr, run.carried)
        if not math.isfinite(run.train_loss):
            diverged(f"loss is {run.train_loss} at iter {it}", run)
        run.iter_num += 1
        if run.iter_num % cfg['log_interval'] == 0 and procs.master:
            t_now = time.time()
            log_progress(run, lr, n_step, (t_now - t_last) / (run.iter_num - iter_last))
            t_last, iter_last = t_now, run.iter_num

    if procs.master:
        minutes = (time.time() - run.t_start) / 60
        print(f"done: {run.iter_num} iters in {minutes:.1f} min; checkpoint {run.ckpt_path}")
        val = [v for _, r in sorted(run.logged.items()) if (v := r.get('val_loss')) is not None]
        if len(val) > 1 and val[-1] >= val[0]:   # e.g. learning_rate=1e6 ends at chance, no error
            print(f"note: the val loss did not fall ({val[0]:.4f} to {val[-1]:.4f}): the run "
                  f"learned nothing; check learning_rate (now {cfg['learning_rate']})")
    if procs.ddp:  # leave together: a gloo rank that tears down while its peer works can abort
        dist.barrier()
        dist.destroy_process_group()


if __name__ == '__main__':
    main(sys.argv[1:])
