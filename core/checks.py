"""
Every setting of a train.py run that a user can get wrong, checked before anything is generated or
written, each ending in one line that names the key and the fix: train.py checks its run here, and a
study (study/settings.py) every run of its grid before any of them starts.
"""

import math
import os
from typing import NamedTuple

import torch

import eval_lengths
import sample_data
from model import GPTConfig
from core import rundir
from core.schedule import parse_snapshots, snapshots_of

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


class Checked(NamedTuple):
    """What check_config parsed: the eval tasks, the quick and the final multiples, the model's config."""
    eval_tasks: list
    quick: list
    final: list
    model: GPTConfig


def check_config(cfg, defaults, here=True):
    """Every setting of train.py (cfg; defaults: train.py's) that a user can get wrong, checked before
    anything is generated or written; the device and the memory only where the run will run here
    (not for a cluster's node). -> Checked"""
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
        trained, _ = sample_data.parse_tasks(cfg['tasks'])
        sample_data.check_distractors(cfg['distractors'], trained)
        for t in trained:
            if cfg['block_size'] < sample_data.min_length(t, tok):
                raise ValueError(f"block_size={cfg['block_size']} is shorter than {t}'s shortest document "
                                 f"({sample_data.min_length(t, tok)} tokens)")
        eval_tasks = (sample_data.parse_tasks(cfg['eval_tasks'], 'eval_tasks', weighted=False)[0]
                      if cfg['eval_tasks'].strip() else trained)
        quick = eval_lengths.parse_multiples('eval_multiples', cfg['eval_multiples'])
        final = eval_lengths.parse_multiples('final_multiples', cfg['final_multiples'])
        if cfg['steps_after_fit'] and 1 not in quick:
            raise ValueError(f"steps_after_fit needs the fit, judged at 1x: add 1 to "
                             f"eval_multiples={cfg['eval_multiples']!r}")
        check_schedule(cfg)
        if not 0 < cfg['fit_accuracy'] <= 1:
            raise ValueError(f"fit_accuracy={cfg['fit_accuracy']} must be in (0, 1]")
        for note in no_effect(cfg, model, defaults):
            print(f"note: {note}")
        if cfg['min_doc_len'] > cfg['block_size']:
            raise ValueError(f"min_doc_len={cfg['min_doc_len']} is longer than block_size={cfg['block_size']}")
        for t in eval_tasks:
            need = sample_data.min_length(t, tok)
            if cfg['block_size'] * min(quick + final) < need:
                raise ValueError(f"{t} needs examples of at least {need} tokens; the length eval asks for "
                                 f"{cfg['block_size'] * min(quick + final)} (block_size x the smallest multiple)")
        if here:
            check_memory(cfg, model, device, cfg['block_size'] * min(quick + final))
    except ValueError as e:
        raise SystemExit(f"config error: {e}")
    return Checked(eval_tasks, quick, final, model)


def check_schedule(cfg):
    """The decay and the snapshots: a cooldown inside the steps after the fit (or before max_iters), snapshots
    inside a trunk that has a fit to count from and branches that decay; a trunk at fixed steps
    (snapshots_at_iter) stops at its last one, fit or not, and has no snapshots past its fit beside them."""
    saf, cool = cfg['steps_after_fit'], cfg['cooldown_iters']
    if saf and cool > saf:
        raise ValueError(f"cooldown_iters={cool} is longer than steps_after_fit={saf}: the decay starts at the fit "
                         f"at the earliest; lower it (0 = all of steps_after_fit)")
    if not saf and cool > cfg['max_iters'] and not cfg['snapshots_at_iter']:     # (a trunk's branches decay)
        raise ValueError(f"cooldown_iters={cool} is longer than max_iters={cfg['max_iters']}: the decay before the "
                         f"stop starts at step 0 at the earliest; lower it")
    parse_snapshots(cfg['snapshots_after_fit'])
    if cfg['snapshots_at_iter'] and cfg['snapshots_after_fit']:
        raise ValueError(f"snapshots_at_iter={cfg['snapshots_at_iter']!r} and snapshots_after_fit="
                         f"{cfg['snapshots_after_fit']!r} in one run: a trunk counts its snapshots from step 0 or "
                         f"from its fit, not both; drop one")
    snapshots, fixed = snapshots_of(cfg)
    if not snapshots:
        return
    key = 'snapshots_at_iter' if fixed else 'snapshots_after_fit'
    if fixed and (saf or cfg['max_iters'] != snapshots[-1]):
        raise ValueError(f"snapshots_at_iter={cfg['snapshots_at_iter']!r}: the trunk stops at its last snapshot, fit "
                         f"or not: set max_iters={snapshots[-1]} (now {cfg['max_iters']}) and steps_after_fit=0 "
                         f"(now {saf})")
    if not fixed and (not saf or snapshots[-1] > saf):
        raise ValueError(f"snapshots_after_fit={cfg['snapshots_after_fit']!r} lie past the trunk's stop: set "
                         f"steps_after_fit to the trunk's length past the fit, at least {snapshots[-1]} (now {saf})")
    if not cool or not cfg['decay_lr']:
        raise ValueError(f"{key} needs branches that decay: set cooldown_iters > 0 (now {cool}) "
                         f"and decay_lr=True (now {cfg['decay_lr']})")


def no_effect(cfg, c, defaults):
    """Settings away from their defaults that cannot change this run (a config may set them for a
    recipe that used them): one note each, printed, so `--window=16` on an all-NoPE model is not
    taken for an ablation."""
    notes = []
    if cfg['lr_decay_iters'] and (cfg['steps_after_fit'] or cfg['cooldown_iters'] or not cfg['decay_lr']):
        why = ('decay_lr=False' if not cfg['decay_lr'] else
               f"steps_after_fit={cfg['steps_after_fit']} (the decay runs after the fit)" if cfg['steps_after_fit']
               else f"cooldown_iters={cfg['cooldown_iters']} (the decay runs over the last steps before max_iters)")
        notes.append(f"lr_decay_iters={cfg['lr_decay_iters']} has no effect with {why}")
    if not c.has_rope():
        notes += [f"{k}={cfg[k]:g} has no effect: no attention layer uses RoPE (nope_every={cfg['nope_every']}, "
                  f"block_pattern={cfg['block_pattern']!r})" for k in ROPE_ONLY if cfg[k] != defaults[k]]
    return notes


def check_memory(cfg, c, device, shortest):
    """Refuse a batch or an eval set that cannot fit before anything is written: a batch_size too
    large for the machine otherwise grows until the kernel kills the run without a word, and
    eval_samples too many holds every example of the first quick eval at once."""
    cuda = device.startswith('cuda')
    # a GPU's whole memory, not its free memory: asking for that would open a CUDA context in ablate.py too
    have = (torch.cuda.get_device_properties(torch.device(device)).total_memory if cuda
            else eval_lengths.available_bytes('cpu'))
    act_bytes = 2 if cfg['dtype'] == 'bfloat16' or cfg['dtype'] == 'auto' and cuda else 4
    weights = 16 * (12 * c.n_layer * c.n_embd ** 2 + c.vocab_size * c.n_embd)   # + gradients and AdamW's moments
    if weights > 0.8 * have:
        raise ValueError(f"n_layer={c.n_layer} layers of width n_embd={c.n_embd} need about {weights / 2**30:.1f} GiB "
                         f"for the weights, their gradients and AdamW's moments, and {device} has "
                         f"{have / 2**30:.1f} GiB: lower n_embd or n_layer")
    need = train_bytes(cfg, c, device, act_bytes)
    if need > 0.8 * have:
        raise ValueError(f"batch_size={cfg['batch_size']} rows of {cfg['block_size']} tokens need about "
                         f"{need / 2**30:.1f} GiB to train and {device} has {have / 2**30:.1f} GiB: lower batch_size "
                         f"(raise gradient_accumulation_steps to keep the tokens per step)")
    why = eval_lengths.too_many_examples(cfg['eval_samples'], shortest)
    if why:
        raise ValueError(f"eval_samples={cfg['eval_samples']}: {why}: lower eval_samples")


def train_bytes(cfg, c, device, act_bytes):
    """Rough peak memory of a training micro-step of batch_size rows: each layer keeps about
    36 x n_embd activations a token for the backward (measured: 34 at width 128 on the CPU; python -m
    core.bench --only=saved: 32 at width 768 in bf16), plus one forward's transients, and the weights, their
    gradients and AdamW's two moments (16 bytes a parameter)."""
    tokens, params = cfg['batch_size'] * cfg['block_size'], 12 * c.n_layer * c.n_embd ** 2 + c.vocab_size * c.n_embd
    return (act_bytes * tokens * 36 * c.n_layer * c.n_embd + 16 * params
            + eval_lengths.estimate_bytes(c, cfg['batch_size'], cfg['block_size'], device))
