"""
Synthetic retrieval accuracy at growing lengths: does a model trained at length T still find the
needle at 2T, 4T, ... 64T?

    python eval_lengths.py --out_dirs=out/vpad                        # one run, the tasks it trained on
    python eval_lengths.py --out_dirs=out/none,out/pre_norm,out/vpad  # an ablation, side by side

Lengths count like training documents: an example of length L has exactly L tokens including its
answer and the end marker, so 1x (L = block_size) is the longest document seen in training and a
drop beyond 1x is length generalization, not fitting.

Scoring is one forward pass per example: feed prompt + gold answer (teacher forcing); a value
counts when every token of its span is the argmax. The spans tile the whole answer (the leading
space and the ", " separators included), so for one value this is exactly greedy decoding's exact
match. For several values (niah_multivalue, multiquery, vt) each value is scored on its own and the
score is the fraction found (recall-based, like RULER's string_match_all); unlike RULER's metric on
free generation, the values are fed in the gold order and each is judged given the gold values
before it. Only answer positions go through the LM head. The examples come from a fixed seed that
is never a training seed and use held-out keys, so every run and every call sees the same ones.
Writes eval_lengths.json into each run dir and eval_lengths.png (if matplotlib is installed) into
the first; the key probe (--absent_key=True) writes eval_absent_key.json and .png instead.
"""

from configurator import configure, items, settings_of  # first: a script's start-up (configurator.startup)

import dataclasses
import json
import math
import os
import random
import re
import shlex
import sys
import time

import torch
from tqdm import tqdm

from model import GPT, GPTConfig, LengthScaling, ROPE_SCALINGS, SSM_SCALINGS
import sample_data
from base import rundir

# -----------------------------------------------------------------------------
out_dirs = 'out/vpad'       # run dirs (train.py's out_dir), separated by commas
tasks = 'trained'           # comma-separated tasks, or 'trained': the tasks each run was trained on
multiples = '1,2,4,8,16,32,64'   # lengths, as multiples of each run's training length
eval_samples = 100          # held-out examples per task and length: the final eval (train.py's quick eval has 32)
eval_samples_long = 0       # examples per point past 64x (0: eval_samples): there a recurrent model's example costs
                            # up to 16x one at 64x
eval_batch_size = 8         # examples per forward pass
device = 'auto'             # 'cpu', 'cuda', 'cuda:1', ... or 'auto'
seed = 0                    # the evaluation seed stream (sample_data keeps it apart from training)
absent_key = False          # the key probe: ask for keys the prompt never mentions (niah_single, mqar);
                            # a model that reads the key falls to chance, one that ignores it does not
plot = True                 # write eval_lengths.png (the probe: eval_absent_key.png) when matplotlib is installed
# what a practitioner does first past the training length T, no training: at eval length L, s = L / T (1 at 1x,
# where every variant is the plain eval); RoPE layers only. A variant's record goes to eval_lengths_<variant>.json
rope_scaling = 'none'       # 'none'; 'pi' (positions / s); 'ntk' (base theta s^(D/(D-2))); 'yarn' (NTK-by-parts
                            # with beta 32 / 1, and cos, sin x 0.1 ln s + 1)
logit_scale = ''            # attention logits x: '' (1); 'log' (log L / log T); a number c (c where L > T)
# Mamba2's training-free fix past T, no positions to rescale: slow the state's decay by a factor s per layer
ssm_scaling = 'none'        # 'none'; 'dt' (dt x s, MambaExtend); 'decay' (A = -exp(s A_log), Mamba Modulation)
ssm_scale = 'auto'          # 'auto': at each length the s (one for every layer) that scores best on calibration
                            # examples the evaluation never sees; 'auto_layers': then each layer's own, one layer at
                            # a time; or a number: that s everywhere
pair_distance = -1          # mqar: -1, the pairs open the document (as in training: far from the question at 64x);
                            # d >= 0, they end d haystack tokens before the question (recent). Records:
                            # eval_lengths_pairs<d>.json
# -----------------------------------------------------------------------------
# a recurrent model's evaluation is linear in the length: an all-Mamba2 model reads an example longer than this in
# segments of it, each from the states the last one left (equal to one pass, tested), so memory is bounded by a
# segment at any length. 2048 tokens x 8 examples ran fastest per token of the segments tried on a 2-core CPU.
STREAM_SEGMENT = 2048
# 'auto''s candidates for s, log-spaced, per scaling (results/study_mamba2_practice_pilot): a control's best dt
# scale was 1/8 at 16x-32x (1/32 at 64x, near chance there) and every s above 1 lowered it; its best decay scale
# lay at the top of 1/256..4 and then of 1/64..16 (faster decay), where this grid stops
SSM_GRIDS = {'dt': tuple(2.0 ** k for k in range(-6, 2)),          # 1/64 .. 2
             'decay': tuple(2.0 ** k for k in range(-6, 5))}       # 1/64 .. 16
# 'auto''s examples per task and length, from the stream 'calibration': 16 keep a Mamba2 run's final eval to 1024x
# (plain and calibrated) near 5 minutes on one core; with 32 a control's took about 8 (study_mamba2_practice_pilot)
CALIBRATION_EXAMPLES = 16
LONG = 64                   # eval_samples_long counts the examples past this multiple


def parse_multiples(key, text):
    """'1,2,4' -> [1, 2, 4]; anything else is a ValueError naming the key."""
    parts = items(key, text)
    try:
        mults = [int(m) for m in parts]
    except ValueError:
        mults = []
    if not mults or min(mults) < 1:
        raise ValueError(f"{key}={text!r}: give positive integers separated by commas, e.g. 1,2,4")
    return mults


def logit_scale_of(sc):
    """A LengthScaling's logit scale as the key logit_scale gives it: '', 'log' or the factor, written
    without a '+' ('1e06', not %g's '1e+06'), which joins the parts of a variant's name."""
    return {'none': '', 'log': 'log', 'factor': number_name(sc.factor)}[sc.logit]


def number_name(x):
    return f'{x:g}'.replace('e+', 'e')


def variant_name(sc, calibrated='auto'):
    """A LengthScaling's variant name: rope 'ntk' and logit 'log' -> 'ntk+log'; logit 'factor' 1.5 ->
    'logit1.5'; ssm 'decay' with a fixed s 0.5 -> 'decay0.5', calibrated (no s) -> 'decay', per layer
    (calibrated='auto_layers') 'decay_layers'; the plain model's -> '' (the plain eval)."""
    logit = 'logit' + logit_scale_of(sc) if sc.logit == 'factor' else logit_scale_of(sc)
    ssm = '' if sc.ssm == 'none' else sc.ssm + (number_name(sc.ssm_scales[0]) if sc.ssm_scales else
                                                 '_layers' if calibrated == 'auto_layers' else '')
    return '+'.join(p for p in (sc.rope if sc.rope != 'none' else '', logit, ssm) if p)


def parse_variant(name):
    """A variant's name -> its LengthScaling at s = 1 (evaluate sets s and T): 'yarn' -> rope 'yarn',
    'ntk+log' -> rope 'ntk' with logit 'log', 'logit1.5' -> logit 'factor' with factor 1.5, 'decay0.5' -> ssm
    'decay' with s 0.5 in every Mamba2 layer, 'decay' or 'decay_layers' -> ssm 'decay' with no s (calibrated at
    each length: calibration(name)), '' -> the plain model's. Anything else is a ValueError that lists the parts."""
    rope, logit, factor, ssm, scales = 'none', 'none', 1.0, 'none', ()
    for part in name.split('+') if name else []:
        kind = next((k for k in SSM_SCALINGS[1:] if part.startswith(k)), None)
        if part in ROPE_SCALINGS[1:] and rope == 'none':
            rope = part
        elif part == 'log' and logit == 'none':
            logit = 'log'
        elif part.startswith('logit') and logit == 'none' and is_factor(part[5:]):
            logit, factor = 'factor', float(part[5:])
        elif kind and ssm == 'none' and (part[len(kind):] in ('', '_layers') or is_factor(part[len(kind):])):
            ssm, rest = kind, part[len(kind):]
            scales = (float(rest),) if is_factor(rest) else ()
        else:
            raise ValueError(f"eval variant {name!r}: join with '+' at most one of {', '.join(ROPE_SCALINGS[1:])}, "
                             f"one logit scale, 'log' or 'logit<factor>' with a positive finite factor, and one Mamba2 "
                             f"scaling, 'dt' or 'decay', with '_layers' or a factor (e.g. 'yarn', 'ntk+log', "
                             f"'logit1.2', 'decay', 'dt0.5')")
    return LengthScaling(rope, logit, factor, ssm=ssm, ssm_scales=scales)


def calibration(name):
    """How a variant's Mamba2 scale is found: '' (none, or a fixed factor), 'auto' (one s for every layer,
    the best on calibration examples at each length) or 'auto_layers' (then each layer's own)."""
    sc = parse_variant(name)
    if sc.ssm == 'none' or sc.ssm_scales:
        return ''
    return 'auto_layers' if any(p.endswith('_layers') for p in name.split('+')) else 'auto'


def is_factor(text):
    """A logit factor: a positive finite number ('inf' would make every logit NaN, and every answer wrong)."""
    try:
        return 0 < float(text) < math.inf
    except ValueError:
        return False


def check_variant(rope, logit, ssm='none', ssm_scale='auto'):
    """-> the variant's name ('' plain); a one-line ValueError for a bad rope_scaling, logit_scale, ssm_scaling
    or ssm_scale."""
    if rope not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling={rope!r}: use one of {', '.join(ROPE_SCALINGS)}")
    if logit not in ('', 'log') and not is_factor(logit):
        raise ValueError(f"logit_scale={logit!r}: use '' (none), 'log' (log L / log T) or a positive finite number")
    if ssm not in SSM_SCALINGS:
        raise ValueError(f"ssm_scaling={ssm!r}: use one of {', '.join(SSM_SCALINGS)}")
    if ssm_scale not in ('auto', 'auto_layers') and not is_factor(ssm_scale):
        raise ValueError(f"ssm_scale={ssm_scale!r}: use 'auto', 'auto_layers' or a positive finite number")
    if ssm == 'none' and ssm_scale != 'auto':      # else the s given would be dropped without a word
        raise ValueError(f"ssm_scale={ssm_scale!r} needs ssm_scaling=dt or decay (it scales Mamba2's SSM): add one, "
                         f"or drop ssm_scale")
    scaled_logits = ('none', 1.0) if logit == '' else ('log', 1.0) if logit == 'log' else ('factor', float(logit))
    fixed = (float(ssm_scale),) if is_factor(ssm_scale) else ()
    return variant_name(LengthScaling(rope, *scaled_logits, ssm=ssm, ssm_scales=fixed), ssm_scale)


def variant_misfit(config, variant):
    """The layers a variant rescales that a model of this GPTConfig lacks: 'RoPE' (its rope and logit parts) or
    'Mamba2' (its ssm part); None where it fits."""
    sc = parse_variant(variant)
    if (sc.rope != 'none' or sc.logit != 'none') and not config.has_rope():
        return 'RoPE'
    if sc.ssm != 'none' and 'M' not in config.block_pattern:
        return 'Mamba2'
    return None


def record_name(variant, absent_key=False, pair_distance=-1):
    """The file a run dir's eval is written to: eval_lengths.json, eval_lengths_<variant>.json, the probe's,
    and with the pairs moved, _pairs<d> before .json."""
    name = rundir.ABSENT_KEY_EVAL if absent_key else rundir.LENGTH_EVAL
    name = name.replace('.json', f'_{variant}.json') if variant else name
    return name.replace('.json', f'_pairs{pair_distance}.json') if pair_distance >= 0 else name


def load_run(run_dir, device):
    """-> (model in eval mode, tokenizer, checkpoint's config dict) from run_dir/ckpt.pt."""
    path = os.path.join(run_dir, rundir.CKPT)
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise SystemExit(f"{run_dir!r} is a file, not a run dir: give the folder train.py wrote")
    if not os.path.isfile(path):
        raise SystemExit(f"no checkpoint at {path}; train one first: python train.py config/vpad.py "
                         f"--out_dir={run_dir}")
    # a checkpoint that does not load cannot be retrained in place (train.py keeps a run dir's checkpoint)
    fix = (f"restore a copy, or set it aside (mv {path} {path}.bad) and retrain {run_dir} with the train.py command "
           f"that made it")
    ckpt = rundir.load_checkpoint(path, fix, keys=('model', 'model_args', 'config'))
    try:
        model = GPT(GPTConfig.from_checkpoint(ckpt['model_args'], path))
        model.load_state_dict(ckpt['model'])
    except Exception as e:
        raise SystemExit(f"{path} is not a lengthgen checkpoint ({type(e).__name__}: {rundir.first_line(e)}); "
                         f"{fix}") from None
    tok_path = os.path.join(run_dir, rundir.TOKENIZER)
    data_dir = ckpt.get('config', {}).get('data_dir', 'data/...')
    copy = f"copy the one from the run's data_dir: cp {data_dir}/{rundir.TOKENIZER} {tok_path}"
    if not os.path.isfile(tok_path):
        raise SystemExit(f"{tok_path} is missing (train.py writes it into every run dir): {copy}")
    try:
        tok = sample_data.Tokenizer.load(tok_path)
    except Exception as e:
        raise SystemExit(f"{tok_path} is corrupt ({type(e).__name__}: {rundir.first_line(e)}): {copy}") from None
    if tok.vocab_size != model.config.vocab_size or tok.name != ckpt.get('tokenizer', tok.name):
        raise SystemExit(f"{run_dir}/{rundir.TOKENIZER} ({tok.name!r}, {tok.vocab_size} tokens) does not belong to "
                         f"this checkpoint ({ckpt.get('tokenizer')!r}, {model.config.vocab_size} tokens)")
    # the config a run was trained with, and the step its checkpoint holds
    return model.to(device).eval(), tok, {**ckpt['config'], 'iter_num': ckpt.get('iter_num')}


def estimate_bytes(config, batch, T, device='cpu'):
    """Rough peak memory of a no-grad forward at length T (one layer's activations live at a time):
    a handful of (B, T, width) activations, the sliding-window score blocks where SDPA materializes
    them (on the CPU; GPU kernels do not), and Mamba2's per-chunk (l x l) decay matrices.
    Full-causal layers use SDPA's memory-efficient kernels, linear in T."""
    c = config
    width = max(3 * c.n_embd, 2 * c.mlp_hidden, 2 * c.expand * c.n_embd + 2 * c.d_state)
    per_token = 6 * width
    if c.window and not str(device).startswith('cuda'):
        per_token += 3 * c.n_head * 2 * c.window          # scores, probabilities, mask: (W x 2W) per block
    if 'M' in c.block_pattern:
        per_token += 2 * (c.expand * c.n_embd // c.headdim) * c.chunk_size * 2
    return 4 * batch * T * per_token + 4 * c.vocab_size * c.n_embd


def examples_bytes(n, length):
    """Memory of n held-out examples of `length` tokens, all built before the first is scored:
    Python lists of ints, measured at 10-35 bytes a token (tracemalloc; the most at 128 tokens)."""
    return 40 * n * length


def too_many_examples(n, length):
    """Why n examples of `length` tokens cannot be built here (all at once, before the first is
    scored), or None when they fit."""
    need, have = examples_bytes(n, length), available_bytes('cpu')
    if need > 0.8 * have:
        return (f"{n:,} examples of {length:,} tokens need about {rundir.size_text(need)} and {rundir.size_text(have)} "
                f"are free")
    return None


def check_examples(key, n, length):
    """n examples of `length` tokens fit in memory here, or a ValueError naming the key (eval_samples)."""
    why = too_many_examples(n, length)
    if why:
        raise ValueError(f"{key}={n}: {why}: lower {key}")


def check_lengths(tasks, shortest, tok, what=''):
    """Every task's examples fit the shortest length asked for, or a ValueError naming the task."""
    for t in tasks:
        need = sample_data.min_length(t, tok)
        if shortest < need:
            raise ValueError(f"{t} needs examples of at least {need} tokens; the length eval asks for "
                             f"{shortest}{' ' + what if what else ''}")


def available_bytes(device):
    if str(device).startswith('cuda'):  # free on the card, plus what torch holds cached but unused
        dev = torch.device(device)
        return torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    with open('/proc/meminfo') as f:
        info = dict(line.split(':') for line in f)
    return int(info['MemAvailable'].split()[0]) * 1024


def streams(model):
    """Whether the model reads long examples in segments (STREAM_SEGMENT): every layer Mamba2, whose state
    carries everything the past leaves it. Attention needs every earlier key at once."""
    return set(model.config.block_pattern) == {'M'}


@torch.no_grad()
def score(model, examples, device, scaling=None, segment=STREAM_SEGMENT):
    """Teacher-forced exact match (scaling: the model's LengthScaling, None plain). -> list over
    examples of lists of booleans (one per value). A streaming model (streams()) reads examples longer than
    `segment` tokens a segment at a time, from the states the last segment left."""
    seqs = [ex.prompt + ex.answer for ex in examples]
    T = max(len(s) for s in seqs) - 1
    idx = torch.zeros(len(seqs), T, dtype=torch.long)
    targets = torch.full((len(seqs), T), -1, dtype=torch.long)
    for b, (ex, s) in enumerate(zip(examples, seqs)):
        idx[b, :len(s) - 1] = torch.tensor(s[:-1])
        start = len(ex.prompt) - 1                        # position t predicts token t + 1
        for s0, e0 in ex.value_spans:                     # the scored tokens (mqar's asked keys are given)
            targets[b, start + s0:start + e0] = torch.tensor(ex.answer[s0:e0])
    step = segment if T > segment and streams(model) else T
    hits, states = torch.zeros(len(seqs), T, dtype=torch.bool), None          # (B, T): where the argmax is right
    for a in range(0, T, step):
        x, y = idx[:, a:a + step], targets[:, a:a + step]
        # (N, V), N = the segment's answer tokens, row-major; the caller's autocast
        logits, _, states = model(x.to(device), y.to(device), scaling=scaling, states=states)
        hits[:, a:a + step][y != -1] = (logits.argmax(-1) == y[y != -1].to(device)).cpu()
    hit = hits[targets != -1].tolist()                 # every answer token, row-major
    out, i = [], 0
    for ex in examples:
        spans = []
        for s, e in ex.value_spans:
            spans.append(all(hit[i:i + e - s]))
            i += e - s
        out.append(spans)
    return out


def accuracy(values_correct):
    """Recall-based accuracy: mean over examples of the fraction of values found (RULER string_match_all)."""
    return sum(sum(v) / len(v) for v in values_correct) / len(values_correct)


PROBED_TASKS = ('niah_single', 'mqar', 'mqar_haystack')   # the tasks whose asked keys the probe swaps


def with_absent_keys(ex, tok, rng):
    """The key probe: ex with every asked key, wherever it is asked (after its first occurrence,
    which defines it), replaced by a held-out key of as many tokens that the prompt never mentions.
    The gold answer stays: a model that reads the key can no longer find it (accuracy falls to
    chance, 1 / MQAR_PAIRS for mqar; lower with distractors, whose values are candidates too), one
    that ignores the key keeps its accuracy."""
    if ex.task not in PROBED_TASKS:
        raise ValueError(f"the absent-key probe is defined for {', '.join(PROBED_TASKS)}, not {ex.task}")
    taken = set(re.findall(r"[a-z]+", tok.decode(ex.prompt)))        # every word the prompt has
    pool = sample_data.MQAR_KEYS if ex.task.startswith('mqar') else sample_data.EVAL_WORD_KEYS
    seq = ex.prompt + ex.answer
    for key in ex.keys:
        old = tok.encode(" " + key)
        while True:            # distinct replacements: a repeated one could point at an earlier query
            new_key = rng.choice(pool)
            new = tok.encode(" " + new_key)
            if len(new) == len(old) and not set(new_key.split('-')) & taken:
                taken.update(new_key.split('-'))
                break
        starts = [i for i in range(len(seq) - len(old) + 1) if seq[i:i + len(old)] == old]
        for i in starts[1:]:
            seq[i:i + len(old)] = new
    return dataclasses.replace(ex, prompt=seq[:len(ex.prompt)], answer=seq[len(ex.prompt):])


def evaluate(model, tok, task, length, n, batch_size, device, seed=0, absent_key=False, variant='', distractors=0.0,
             pair_distance=None, scales=()):
    """Accuracy of `model` on n fixed held-out examples of `task`, each `length` tokens long
    (prompt + answer + end marker); absent_key: the key probe (with_absent_keys);
    variant: a length-scaling variant's name (parse_variant), applied with s = length / block_size and, for a
    calibrated Mamba2 scaling, `scales` (calibrate's s per layer); distractors: mqar_haystack's, as the run's
    corpus has it; pair_distance: mqar's pairs that many haystack tokens before the question (None: at the
    document's start). Raises MemoryError (with the estimate) for a length that will not fit, before any work."""
    check_fits(model, task, length, n, batch_size, device)
    examples = sample_data.eval_examples(task, tok, length, n, seed, distractors, pair_distance)
    if absent_key:
        probe = random.Random(f"absent:{seed}:{task}:{length}")
        examples = [with_absent_keys(ex, tok, probe) for ex in examples]
    return accuracy_on(model, examples, batch_size, device, scaling_at(model, variant, length, scales))


def check_fits(model, task, length, n, batch_size, device):
    """A MemoryError with the estimate where n examples of `length` tokens will not fit (a streaming model
    holds one segment of activations at a time)."""
    held = min(length, STREAM_SEGMENT) if streams(model) else length
    need, have = estimate_bytes(model.config, min(batch_size, n), held, device), available_bytes(device)
    if need > 0.8 * have:
        raise MemoryError(f"{task} at {length} tokens needs about {rundir.size_text(need)} with batch_size="
                          f"{batch_size}, and {rundir.size_text(have)} are free; lower eval_batch_size or the multiples")
    why = too_many_examples(n, length)
    if why:
        raise MemoryError(f"{task}: {why}; lower the number of examples")


def scaling_at(model, variant, length, scales=()):
    """The LengthScaling of a variant at an eval length (None: the plain model)."""
    if not variant:
        return None
    T, sc = model.config.block_size, parse_variant(variant)
    return dataclasses.replace(sc, s=length / T, T=T, ssm_scales=tuple(scales) or sc.ssm_scales)


def accuracy_on(model, examples, batch_size, device, scaling=None):
    correct = []
    for i in range(0, len(examples), batch_size):
        correct += score(model, examples[i:i + batch_size], device, scaling)
    return accuracy(correct)


def calibrate(model, tok, task, length, variant, n, batch_size, device, seed=0, distractors=0.0, pair_distance=None):
    """A calibrated Mamba2 scaling's s at one length (variant 'dt' or 'decay', '_layers' for one s per layer):
    the value of SSM_GRIDS[its kind] whose accuracy on CALIBRATION_EXAMPLES examples of the stream 'calibration' (none of
    them one of the n examples evaluated) is highest, ties to the one nearest 1 (the smaller first); with
    '_layers', then each Mamba2 layer in turn its own s, the others held. Candidates go from 1 outward and
    stop at a perfect score. -> (s per Mamba2 layer, their accuracy on the calibration examples, [(scales,
    accuracy)] of every candidate tried, in order)"""
    check_fits(model, task, length, CALIBRATION_EXAMPLES, batch_size, device)
    evaluated = {tuple(ex.prompt + ex.answer) for ex in sample_data.eval_examples(task, tok, length, n, seed,
                                                                                  distractors, pair_distance)}
    drawn = sample_data.eval_examples(task, tok, length, 2 * CALIBRATION_EXAMPLES, seed, distractors, pair_distance,
                                      stream='calibration')
    examples = [ex for ex in drawn if tuple(ex.prompt + ex.answer) not in evaluated][:CALIBRATION_EXAMPLES]
    if not examples:
        raise ValueError(f"{task} at {length} tokens: no calibration example apart from the {n} evaluated")
    layers = sum(b.kind == 'M' for b in model.blocks)
    grid = SSM_GRIDS[parse_variant(variant).ssm]
    order = sorted(grid, key=lambda s: (abs(math.log(s)), s))              # 1, 1/2, 2, 1/4, 4, ...

    tried = []

    def best(candidates):                          # -> (scales, accuracy): the first best in `order`
        top = None
        for scales in candidates:
            acc = accuracy_on(model, examples, batch_size, device, scaling_at(model, variant, length, scales))
            tried.append((scales, acc))
            if top is None or acc > top[1]:
                top = scales, acc
            if acc == 1.0:
                break
        return top
    scales, acc = best([(s,) * layers for s in order])
    if calibration(variant) == 'auto_layers':
        for layer in range(layers):
            scales, acc = best([scales[:layer] + (s,) + scales[layer + 1:] for s in order])
    return scales, acc, tried


def trained_tasks(train_cfg):
    return sample_data.parse_tasks(train_cfg['tasks'])[0] if train_cfg.get('tasks') else []


def examples_at(m, n, n_long=0):
    """The held-out examples at multiple m: n, or past LONG x n_long where given."""
    return n_long if n_long and m > LONG else n


def length_eval(model, tok, tasks, multiples, n, batch_size, device, seed=0, absent_key=False, progress=None,
                leave=True, variant='', distractors=0.0, pair_distance=None, calibrated=None, n_long=0):
    """The length-eval record, one shape for train.py's log and eval_lengths.json:
    {task: {'<m>x': accuracy}} at m * block_size tokens, None where the length is shorter than the
    task's shortest document or would not fit in memory (each skip printed with its reason). n examples a
    point; past LONG x, n_long where given.
    progress: the label of a progress bar on a terminal (None: no bar); leave=False clears it after.
    A calibrated variant (calibration()) is calibrated at each point first; calibrated, a dict, then gets
    {task: {'<m>x': {'scales': [s per Mamba2 layer], 'accuracy': on the calibration examples, 'tried': [[scales,
    accuracy], ...] of each candidate}}}."""
    T, accs = model.config.block_size, {task: {} for task in tasks}
    for task, m in tqdm([(t, m) for t in tasks for m in multiples], desc=progress, disable=not progress or None,
                        leave=leave):
        acc, shortest = None, sample_data.min_length(task, tok) + (pair_distance or 0)
        n_m = examples_at(m, n, n_long)
        if m * T < shortest:
            tqdm.write(f"{task} at {m}x skipped: {m}x{T} = {m * T} tokens, its documents need at least {shortest}")
        else:
            try:
                scales = ()
                if variant and calibration(variant):
                    scales, cal, tried = calibrate(model, tok, task, m * T, variant, n_m, batch_size, device, seed,
                                                   distractors, pair_distance)
                    if calibrated is not None:
                        calibrated.setdefault(task, {})[f'{m}x'] = {'scales': list(scales), 'accuracy': cal,
                                                                    'tried': [[list(s), a] for s, a in tried]}
                acc = evaluate(model, tok, task, m * T, n_m, batch_size, device, seed, absent_key, variant, distractors,
                               pair_distance, scales)
            except (MemoryError, torch.OutOfMemoryError) as e:
                tqdm.write(f"{task} at {m}x skipped: {rundir.first_line(e)}")
                if str(device).startswith('cuda'):
                    torch.cuda.empty_cache()
        accs[task][f'{m}x'] = acc
    return accs


def bf16_on_gpu(device, dtype):
    """A run's eval on a GPU uses the precision it trained in: bf16 autocast for dtype 'bfloat16', and
    for 'auto' where the GPU supports it (train.py's choice); float32 runs, and any eval on a CPU,
    in full precision."""
    return str(device).startswith('cuda') and rundir.pick_dtype(dtype, device) == 'bfloat16'


def evaluate_run(run, task_names, mults, n, batch_size, device, seed=0, progress=True, absent_key=False, variant='',
                 pair_distance=None, loaded=None, n_long=0):
    """Evaluate one run dir: task_names=None means the tasks it was trained on; variant: a length-
    scaling variant's name ('' plain); loaded: load_run(run, device)'s result where the caller has it; n
    examples a point, past LONG x n_long where given.
    -> the record written to run/eval_lengths.json (a variant's to eval_lengths_<variant>.json): {'run',
    'block_size', 'trained', 'n', ..., 'length_eval': {task: {'<m>x': accuracy}}} (the training log's
    length_eval, see length_eval); a calibrated variant's also has 'calibrated' (length_eval's)."""
    model, tok, train_cfg = loaded or load_run(run, device)
    misfit = variant and variant_misfit(model.config, variant)
    if misfit:
        raise SystemExit(f"{run}: eval variant {variant!r} rescales {misfit} layers, and this model has none (layers "
                         f"{''.join(model.describe_layers())}): evaluate it plain")
    trained = trained_tasks(train_cfg)
    task_names = task_names or trained
    if not task_names:
        raise SystemExit(f"{run}: the checkpoint does not say what it was trained on; pass --tasks=...")
    distractors = train_cfg.get('distractors', 0.0)      # mqar_haystack's, as the run trained on it
    t0, calibrated = time.time(), {}
    with torch.autocast('cuda', dtype=torch.bfloat16, enabled=bf16_on_gpu(device, train_cfg.get('dtype', 'auto'))):
        accs = length_eval(model, tok, task_names, mults, n, batch_size, device, seed, absent_key, progress and run,
                           variant=variant, distractors=distractors, pair_distance=pair_distance, calibrated=calibrated,
                           n_long=n_long)
    named = {}
    if variant:
        sc = parse_variant(variant)
        named = {'variant': variant, 'rope_scaling': sc.rope, 'logit_scale': logit_scale_of(sc)}
        if sc.rope != 'none':
            named['scale'] = 's = L / block_size at each length'      # RoPE's; the SSM's s is ssm_scale's
        if sc.ssm != 'none':
            named |= {'ssm_scaling': sc.ssm, 'ssm_scale': calibration(variant) or sc.ssm_scales[0]}
        if calibration(variant):
            named |= {'calibration': {'examples': CALIBRATION_EXAMPLES, 'stream': 'calibration',
                                      'grid': list(SSM_GRIDS[sc.ssm]),
                                      'rule': 'the best accuracy, ties to the s nearest 1'}, 'calibrated': calibrated}
    return {'run': run, 'block_size': model.config.block_size, 'trained': trained, 'n': n,
            **({f'n_past_{LONG}x': n_long} if n_long else {}), 'tokenizer': tok.name,
            'seed': seed, 'iter': train_cfg.get('iter_num'), **({'absent_key': True} if absent_key else {}), **named,
            **({'distractors': distractors} if distractors else {}),
            **({'pair_distance': pair_distance} if pair_distance is not None else {}),
            'elapsed_s': round(time.time() - t0, 1), 'provenance': rundir.provenance(device), 'length_eval': accs}


def scales_text(scales):
    """A calibrated s per layer as printed: '0.25' where every layer has it, else '(0.25, 1)'."""
    return f"{scales[0]:g}" if len(set(scales)) == 1 else f"({', '.join(f'{s:g}' for s in scales)})"


def format_table(records, mults):
    """One row per run and task, one column per multiple; tasks a run never trained on are marked."""
    w = max([28] + [len(rec['run']) + 2 for rec in records])       # a long run dir keeps its column apart
    head = f"{'run':<{w}}{'task':<28}" + "".join(f"{str(m) + 'x':>7}" for m in mults)
    lines = [head, '-' * len(head)]
    for rec in records:
        for task, accs in rec['length_eval'].items():
            label = task if task in rec['trained'] else f"{task} (untrained)"
            lines.append(f"{rec['run']:<{w}}{label:<28}" + "".join(
                f"{accs[f'{m}x']:7.2f}" if accs.get(f'{m}x') is not None else f"{'-':>7}" for m in mults))
    return "\n".join(lines)


def plot_panels(panels, draw, path, xlabel, ylabel, log2=True, width=4.0, title=''):
    """One subplot per panel (a title), side by side, `width` inches each, under the figure's title; draw(ax,
    panel) draws its lines. Without matplotlib: a one-line note and no file."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no {os.path.basename(path)} (pip install matplotlib)")
        return
    # sized for a README (8 x 5 in at 150 dpi), the legend outside the axes so it never covers a curve
    fig, axes = plt.subplots(1, len(panels), figsize=(max(8.0, width * len(panels)), 5.0), sharey=True,
                             squeeze=False, layout='constrained')
    for ax, panel in zip(axes[0], panels):
        if log2:
            ax.set_xscale('log', base=2)
        draw(ax, panel)
        ax.set_title(panel, fontsize=10)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    fig.supxlabel(xlabel, fontsize='medium')   # once, not per panel: side by side they run into each other
    if title:
        fig.suptitle(title, fontsize=10)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    if handles:         # (under a figure title: beside the panels' middle, clear of the title)
        fig.legend(handles, labels, loc='outside right center' if title else 'outside right upper', fontsize=8)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    print(f"wrote {path}")


def plot_results(records, path):
    def draw(ax, task):
        for rec in records:
            pts = [(int(m[:-1]) * rec['block_size'], a) for m, a in rec['length_eval'].get(task, {}).items()
                   if a is not None]
            if pts:
                ax.plot(*zip(*pts), marker='o', label=rec['run'])
    panels = list(dict.fromkeys(task for rec in records for task, accs in rec['length_eval'].items()
                                if any(a is not None for a in accs.values())))
    if panels:
        plot_panels(panels, draw, path, 'length (tokens)', 'accuracy')


def check_args(cfg):
    """-> (runs, task names or None for 'trained', multiples); one-line errors for bad input."""
    try:
        runs = items('out_dirs', cfg['out_dirs'])
    except ValueError as e:
        raise SystemExit(f"config error: {e}") from None
    if not runs:
        raise SystemExit("config error: out_dirs is empty: give a run dir, e.g. --out_dirs=out/vpad")
    for key in ('eval_samples', 'eval_batch_size'):
        if cfg[key] <= 0:
            raise SystemExit(f"config error: {key}={cfg[key]} must be positive")
    if cfg['eval_samples_long'] < 0:
        raise SystemExit(f"config error: eval_samples_long={cfg['eval_samples_long']} must be >= 0 (0: eval_samples)")
    try:
        task_names = None if cfg['tasks'].strip() == 'trained' else \
            sample_data.parse_tasks(cfg['tasks'], weighted=False)[0]
    except ValueError as e:
        raise SystemExit(f"config error: {e}; or tasks=trained: the tasks each run trained on")
    try:
        mults = parse_multiples('multiples', cfg['multiples'])
        variant = check_variant(cfg['rope_scaling'], cfg['logit_scale'], cfg['ssm_scaling'], cfg['ssm_scale'])
    except ValueError as e:
        raise SystemExit(f"config error: {e}")
    if cfg['pair_distance'] < -1 or cfg['pair_distance'] >= 0 and task_names not in (None, ['mqar']):
        raise SystemExit(f"config error: pair_distance={cfg['pair_distance']}: -1 (the pairs open the document), or "
                         f"d >= 0 on mqar (the one task whose pairs it moves; --tasks=mqar or a run trained on it)")
    return runs, task_names, mults, variant


def main(argv):
    cfg = configure(settings_of(globals()), argv)
    runs, task_names, mults, variant = check_args(cfg)
    done = []                 # Ctrl-C or SIGTERM: one line, saying which runs' evals were written
    rundir.exit_on_signals(lambda: f"stopped: {len(done)} of {len(runs)} run(s) evaluated and written"
                                   + (f" ({', '.join(done)})" if done else '') + "; rerun: "
                                   + shlex.join(['python', 'eval_lengths.py', *argv]))
    dev = rundir.pick_device(cfg['device'])
    name = record_name(variant, cfg['absent_key'], cfg['pair_distance'])
    pairs = cfg['pair_distance'] if cfg['pair_distance'] >= 0 else None
    loaded = {}
    for run in runs:    # every run readable and writable before the first is evaluated: none is lost to a later one
        model, tok, train_cfg = loaded[run] = load_run(run, dev)
        misfit = variant and variant_misfit(model.config, variant)
        if misfit:              # named as given: rope_scaling, logit_scale or both; ssm_scaling
            keys = (('rope_scaling', 'none'), ('logit_scale', '')) if misfit == 'RoPE' else (('ssm_scaling', 'none'),)
            given = ' and '.join(f"{k}={cfg[k]!r}" for k, plain in keys if cfg[k] != plain)
            raise SystemExit(f"config error: {run} has no {misfit} layer (layers {''.join(model.describe_layers())}): "
                             f"{given} rescales {misfit} layers only; evaluate it plain")
        if pairs is not None:
            trained = trained_tasks(train_cfg)
            if task_names is None and trained != ['mqar']:
                raise SystemExit(f"config error: pair_distance={pairs} moves mqar's pairs, and {run} was trained on "
                                 f"{', '.join(trained) or 'no task it names'}: add --tasks=mqar")
            longest, need = max(mults) * model.config.block_size, sample_data.min_length('mqar', tok) + pairs
            if longest < need:
                raise SystemExit(f"config error: pair_distance={pairs}: an mqar example with its pairs {pairs} tokens "
                                 f"before the question needs {need} tokens, and the longest asked for is {longest} "
                                 f"({max(mults)}x of {run}): lower pair_distance or add a longer multiple")
        why = too_many_examples(cfg['eval_samples'], min(mults) * model.config.block_size)
        if why:                 # else every point would be skipped, and the run's eval overwritten with nothing
            raise SystemExit(f"config error: eval_samples={cfg['eval_samples']:,}: {why} (at {run}'s shortest length): "
                             f"lower eval_samples; nothing was written")
        rundir.check_writable(run, name, "rerun (nothing was evaluated); or copy the run dir somewhere writable "
                                         "and evaluate the copy")
        owner = rundir.busy(run)
        if owner:           # its checkpoint is a moment of a run still training, and the run dir is its owner's
            raise SystemExit(f"{run} is being trained by {owner}: evaluate it once it has finished (or stopped), or "
                             f"evaluate a copy: cp -r {run} {run}_copy; nothing was written")
    records = []
    for run in runs:
        rec = evaluate_run(run, task_names, mults, cfg['eval_samples'], cfg['eval_batch_size'], dev, cfg['seed'],
                           absent_key=cfg['absent_key'], variant=variant, pair_distance=pairs, loaded=loaded.pop(run),
                           n_long=cfg['eval_samples_long'])
        path = os.path.join(run, name)
        if os.path.exists(path):    # one file per run and variant: say so when an earlier eval is replaced
            print(f"{path}: replacing the earlier eval there")
        with rundir.writing(path, name, "rerun"):
            rundir.write_atomic(path, json.dumps(rec, indent=1).encode())
        records.append(rec)
        done.append(run)
        rundir.stop_if_asked()
    probe = (', the key probe: keys the prompt never mentions' if cfg['absent_key'] else '') + (
        f", eval variant {variant}" if variant else '') + (
        f", mqar's pairs {pairs} haystack tokens before the question" if pairs is not None else '')
    long = f", {cfg['eval_samples_long']} past {LONG}x" if cfg['eval_samples_long'] else ''
    print(f"\naccuracy by length (multiples of each run's training length; {cfg['eval_samples']} examples per "
          f"point{long}{probe})")
    print(format_table(records, mults))
    for rec in records:     # a calibrated variant's s at each length, as its record keeps it
        for task, by_length in rec.get('calibrated', {}).items():
            print(f"{rec['run']} {task}: s chosen on calibration examples: "
                  + ', '.join(f"{m} {scales_text(c['scales'])}" for m, c in by_length.items()))
    if cfg['plot']:           # into the first run's dir, beside its JSON; the probe's plot keeps the eval's
        plot_results(records, os.path.join(runs[0], name.replace('.json', '.png')))


if __name__ == '__main__':
    main(sys.argv[1:])
