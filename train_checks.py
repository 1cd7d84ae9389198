"""
What train.py refuses before it generates or writes anything, each in one line that names the key and
the fix: its settings (train.py's own here; the corpus', the evals' and the schedule's by the files that
own them), the memory a run of that size needs (a batch that cannot fit is refused here, not killed by
the kernel later), and the checkpoint a run starts from. check_config returns what it parsed, once, for
train.py and for a study's plan.
"""

import math
import os
from typing import NamedTuple

import torch

from base import rundir
from base.schedule import check_schedule
from model import GPTConfig
import sample_data
import eval_lengths

MODEL_KEYS = [f for f in GPTConfig.__dataclass_fields__ if f != 'vocab_size']     # each a train.py setting
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
# what RoPE layers read; set away from their defaults (GPTConfig's, train.py's too) while every attention
# layer is NoPE, a run would not change
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
            raise ValueError(f"state_passing={cfg['state_passing']!r}: use '' (zero initial states), 'carry' "
                             f"or 'noise'")
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
                  f"block_pattern={cfg['block_pattern']!r})" for k in ROPE_ONLY if cfg[k] != getattr(GPTConfig, k)]
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
        raise ValueError(f"n_layer={c.n_layer} layers of width n_embd={c.n_embd} need about "
                         f"{rundir.size_text(weights)} for the weights, their gradients and AdamW's moments, "
                         f"and {device} has {rundir.size_text(have)}: lower n_embd or n_layer")
    need = train_bytes(cfg, c, device, act_bytes)
    if need > 0.8 * have:
        raise ValueError(f"batch_size={cfg['batch_size']} rows of {cfg['block_size']} tokens need about "
                         f"{rundir.size_text(need)} to train and {device} has {rundir.size_text(have)}: lower "
                         f"batch_size (raise gradient_accumulation_steps to keep the tokens per step)")


def train_bytes(cfg, c, device, act_bytes):
    """Rough peak memory of a training micro-step of batch_size rows: each layer keeps about
    36 x n_embd activations a token for the backward (measured: 34 at width 128 on the CPU; python -m
    tools.bench --only=saved: 32 at width 768 in bf16), plus one forward's transients, and the weights, their
    gradients and AdamW's two moments (16 bytes a parameter)."""
    tokens, params = cfg['batch_size'] * cfg['block_size'], 12 * c.n_layer * c.n_embd ** 2 + c.vocab_size * c.n_embd
    return (act_bytes * tokens * 36 * c.n_layer * c.n_embd + 16 * params
            + eval_lengths.estimate_bytes(c, cfg['batch_size'], cfg['block_size'], device))


# -----------------------------------------------------------------------------
# the checkpoint a run starts from: one line if it is unusable or does not fit the run's settings

# what shapes the weights, so init_from=<path> needs them equal (site, p, window, RoPE may change)
SHAPE_KEYS = 'n_layer n_head n_embd block_pattern short_conv d_state expand headdim d_conv'.split()


def load_start(path, resume):
    """The checkpoint a run starts from, its own (resume) or another run's; one line if unusable."""
    if not os.path.isfile(path):
        raise SystemExit(f"no checkpoint at {path} to resume: start the run with init_from=scratch")
    fix = (f"set it aside (mv {path} {path}.bad) and start again with --init_from=scratch" if resume
           else "retrain that run")
    return rundir.load_checkpoint(path, f"restore a copy, or {fix}")


def check_start(ckpt, path, cfg, config, tok):
    """The checkpoint at path against this run (cfg; config: its GPTConfig; tok: its corpus' tokenizer),
    one line if its model cannot be loaded: resumed, every model setting but fast_kernels must be its
    own; for its weights alone (init_from=<path>), the settings that shape them. -> the other settings
    that a resume changes since, 'key=old -> new' ([] for weights alone)"""
    was = vars(GPTConfig.from_checkpoint(ckpt['model_args'], path))
    if ckpt['tokenizer'] != tok.name or was['vocab_size'] != tok.vocab_size:
        raise SystemExit(f"tokenizer mismatch: {path} was trained with {ckpt['tokenizer']!r} "
                         f"(vocab {was['vocab_size']}), {cfg['data_dir']} has {tok.name!r} "
                         f"(vocab {tok.vocab_size}); use the data_dir that run was trained on")
    resume = cfg['init_from'] == 'resume'
    keys = [k for k in MODEL_KEYS if k != 'fast_kernels'] if resume else SHAPE_KEYS
    changed = [f"{k}={was[k]!r} (this run: {getattr(config, k)!r})" for k in keys
               if was[k] != getattr(config, k)]
    if changed:
        fix = ("resume it with its own settings, or train these into another out_dir" if resume else
               "start from it with its settings for these, or train from scratch")
        raise SystemExit(f"{path} was trained with other model settings: {', '.join(changed)}: {fix}")
    if not resume:
        return []
    was = {k: ckpt['config'].get(k, rundir.ADDED.get(k)) for k in cfg}
    return [f"{k}={was[k]!r} -> {cfg[k]!r}" for k in cfg
            if k not in ('init_from', 'max_iters', 'out_dir') and was[k] != cfg[k]]
