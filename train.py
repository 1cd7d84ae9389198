"""
Train a small model from scratch on the synthetic retrieval corpus, watching length
generalization as it trains. On one CPU or GPU, or on several with DDP:

    python train.py config/vpad.py --dropout_site=pre_norm --out_dir=out/pre_norm
    torchrun --standalone --nproc_per_node=4 train.py config/vpad.py

A step's rows and dropout masks come from (seed, step), so a resumed run continues exactly. Every
eval_interval: the val loss, the checkpoint, then a quick length eval, logged to out_dir/log.jsonl.
The run fits at the first quick eval with 1x >= fit_accuracy; base/schedule.py makes that the
learning rate, the stop and a trunk's snapshots. train_checks.py checks the settings; start() does
everything else that can fail before the first step.
"""

from configurator import configure, settings_of  # first: a script's start-up (configurator.startup)

import json
import math
import os
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from base import rundir
from base.processes import leave_together, setup_processes
from base.schedule import Schedule, write_branch
from model import GPT, CompiledOrEager
import sample_data
import eval_lengths
from train_checks import check_config, check_start, load_start

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
state_passing = ''         # Mamba2, in training only: each row's initial state in every Mamba2
                           # layer. '': zero, as in evaluation; 'carry': the detached final state of
                           # a row of the previous step (training from carried states); 'noise':
                           # noise with those states' per-coordinate mean and sd
fast_kernels = True        # base/kernels.py's fast paths; False: model.py's readable code alone
                           # (the same numbers to float rounding, slower)
dropout = 0.1              # the drop probability p
dropout_site = 'vpad'      # 'none', 'pre_norm', 'pre_linear' or 'vpad'
# AdamW and the schedule (base/schedule.py)
learning_rate = 3e-3       # peak learning rate
max_iters = 4000           # optimizer steps; with steps_after_fit, the cap on steps to the fit
fit_accuracy = 0.95        # the run fits at the first quick eval with 1x accuracy >= this
steps_after_fit = 1000     # stop this many steps after the fit (0 = always run max_iters)
cooldown_iters = 0         # decay steps before the stop (0 = from the fit, or lr_decay_iters'
                           # cosine)
snapshots_after_fit = ''   # e.g. '1000,4000': a trunk's snapshots, branches in out_dir/cooldown<k>
snapshots_at_iter = ''     # e.g. '6000,16000': a trunk's snapshots at fixed steps, branches in
                           # out_dir/at<k>
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
# data: the corpus (sample_data's, opened and checked here) and the batches drawn from it

class Split(NamedTuple):
    ids: np.ndarray    # token ids, flat (sample_data.load_split's memmap)
    mask: np.ndarray   # 1 where the token is part of an answer
    n_rows: int        # aligned rows of block_size (+1) tokens


class Corpus(NamedTuple):
    meta: dict         # meta.json: the settings it was generated with, its checksums
    tok: object
    train: Split
    val: Split


def open_corpus(cfg, master, wait=None):
    """The run's corpus: generated on first use (by rank 0; `wait` lets the others wait), then checked
    against the run's settings and its checksums. -> Corpus; anything wrong is one line that says
    what to do."""
    try:
        if master:          # one process generates a missing corpus; another run needing it waits
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
    splits = []
    for split in ('train', 'val'):
        ids, mask = sample_data.load_split(cfg['data_dir'], split)
        splits.append(Split(ids, mask, (len(ids) - 1) // cfg['block_size']))
        if not splits[-1].n_rows:
            raise SystemExit(f"{cfg['data_dir']}/{split}.bin holds {len(ids):,} tokens, less than "
                             f"one row of block_size={cfg['block_size']} + 1: delete {cfg['data_dir']} "
                             f"and rerun (train.py generates it again), or raise num_tokens")
    return Corpus(meta, tok, *splits)


def count_targets(split, rows, T, loss_on):
    """Positions with a loss in these rows: the step's loss is a mean over all of them."""
    if loss_on == 'all':
        return len(rows) * T
    return int(sum(int(split.mask[r * T + 1: r * T + T + 1].sum()) for r in rows))


def rows_to_batch(split, rows, T, loss_on, device):
    """Aligned rows -> x (B, T), y (B, T): int64, on the device; y -1 where no loss is taken."""
    x = np.stack([split.ids[r * T: r * T + T] for r in rows]).astype(np.int64)
    y = np.stack([split.ids[r * T + 1: r * T + T + 1] for r in rows]).astype(np.int64)
    if loss_on == 'answers':
        y[np.stack([split.mask[r * T + 1: r * T + T + 1] for r in rows]) == 0] = -1
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    if device.startswith('cuda'):
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in (x, y))
    return x, y


# -----------------------------------------------------------------------------
# the model, fresh, resumed or from another run's weights, in the run its checkpoints hold

@dataclass
class Run:
    """The run as its checkpoints and log records hold it, and the command that resumes it."""
    cfg: dict
    argv: list                           # the command line: the commands that resume it, branch it
    world_size: int                      # its processes: a resume starts as many
    model: GPT = None                    # uncompiled, unwrapped
    optimizer: torch.optim.Optimizer = None
    schedule: Schedule = None            # the fit, the learning rate, the stop, the snapshots
    iter_num: int = 0                    # the step reached
    saved_iter: Optional[int] = None     # the step of the last checkpoint written
    best_val_loss: float = float('inf')
    val_loss: Optional[float] = None     # at the last eval
    train_loss: Optional[float] = None   # of the last step
    tokens_per_sec: float = 0.0
    mfu: float = 0.0
    notes: dict = field(default_factory=dict)   # init_from and init_iter of continued training
    carried: Optional['Carried'] = None         # state_passing: where the next step's rows start
    start_iter: int = 0                  # where this process started: that record has the notes
    t_start: float = 0.0                 # when, for elapsed_s
    provenance: Optional[dict] = None    # rundir.provenance(), for the first record logged here

    def standing(self):
        """Where the run stands after an interruption or a disk error, and how to go on."""
        return rundir.where_it_stands(self.argv, self.cfg['out_dir'], self.saved_iter,
                                      self.world_size)


def start_model(run, config, tok, device):
    """run.model and run.optimizer from scratch, from out_dir's checkpoint (resume: also its step
    and what it logged), or from another run's weights (init_from=<path>). config: check_config's
    GPTConfig. -> the checkpoint resumed, less its tensors ({}: none)"""
    cfg, init_from = run.cfg, run.cfg['init_from']
    torch.manual_seed(cfg['seed'])                      # initial weights
    run.model = model = GPT(config)
    if init_from != 'scratch':
        resume = init_from == 'resume'
        path = os.path.join(cfg['out_dir'], rundir.CKPT) if resume else rundir.ckpt_path(init_from)
        ckpt = load_start(path, resume)
        changed = check_start(ckpt, path, cfg, config, tok)    # (one line if it does not fit)
        model.load_state_dict(ckpt['model'])
        if resume:
            run.iter_num = run.saved_iter = ckpt['iter_num']
            print(f"resumed from {path} at iter {run.iter_num}" + (
                "; note: settings changed since, so this is not the run an uninterrupted one would "
                f"be: {', '.join(changed)}" if changed else ""))
        else:
            run.notes = {'init_from': os.path.abspath(path), 'init_iter': ckpt['iter_num']}
            print(f"initialized from {path} (iter {ckpt['iter_num']}): weights only")
    model.to(device)
    run.optimizer = model.configure_optimizers(cfg['weight_decay'], cfg['learning_rate'],
                                               (cfg['beta1'], cfg['beta2']), device.split(':')[0])
    if init_from != 'resume':
        return {}
    run.optimizer.load_state_dict(ckpt['optimizer'])
    run.notes = {k: ckpt[k] for k in ('init_from', 'init_iter') if k in ckpt}
    run.best_val_loss, run.val_loss, run.train_loss = (ckpt['best_val_loss'], ckpt.get('val_loss'),
                                                       ckpt.get('train_loss'))
    run.tokens_per_sec, run.mfu = ckpt.get('tokens_per_sec') or 0.0, ckpt.get('mfu') or 0.0
    return {k: v for k, v in ckpt.items() if k not in ('model', 'optimizer')}


# -----------------------------------------------------------------------------
# the step: the rows and dropout masks it draws, the states its rows start from, one optimizer step

def draw_seed(*parts):
    """A seed from (seed, step, micro-batch, ...): the same on every process and after a resume."""
    s = 0
    for p in parts:
        s = (s * 1_000_003 + int(p)) % 2**61
    return s


class Carried(NamedTuple):
    """state_passing: the final SSM states the rows of each micro-step reached at the step before,
    where the next step's rows start. Each micro-step, and each process, carries its own rows'
    states; train_step returns the next Carried."""
    how: str            # 'carry' or 'noise' (initial_states)
    states: list        # per micro-step, a detached (rows, h, p, n) tensor per layer (None for an
                        # attention layer); or None: zero states (at the first step)

    def gathered(self, procs):
        """Every process's states, over ranks: rank 0 checkpoints them, each resumes its own."""
        if not procs.ddp:
            return [self.states]
        return procs.everyones([[None if s is None else s.cpu() for s in m] if m else m
                                for m in self.states])

    @staticmethod
    def resumed(saved, how, procs):
        """This process's states from a checkpoint's, on its device; zero states for a checkpoint
        without them, or saved by another number of processes (said once)."""
        if saved is None or len(saved) != procs.world_size:
            if procs.master:
                print(f"note: state_passing={how!r}: the checkpoint holds no carried states for "
                      f"{procs.world_size} process(es); the first step after the resume starts "
                      f"from zero states")
            return Carried(how, [None] * procs.micro_steps)
        return Carried(how, [[None if s is None else s.to(procs.device) for s in m] if m else m
                             for m in saved[procs.rank]])


def initial_states(carried, how, gen):
    """The initial states of a micro-batch's Mamba2 layers, from the final states its rows reached
    the step before (carried: one entry per layer, (rows, h, p, n) or None; None: a first step, zero
    states): those states ('carry'), or ('noise') Gaussian draws from gen with their mean and sd per
    coordinate, fitted over the rows (states no row reached, on a new trajectory at every step)."""
    if how == 'carry' or carried is None:
        return carried
    # one row has no spread (its sd over rows is NaN): its draw is its own state
    return [None if s is None else s.mean(0) + (s.std(0) if len(s) > 1 else torch.zeros_like(s[0]))
            * torch.randn(s.shape, generator=gen).to(s.device) for s in carried]


def train_step(model, optimizer, split, cfg, procs, step, lr, carried=None):
    """One optimizer step on the step's global batch, the same on every process; each takes its
    share of the rows. A loss that is not finite takes no step: the weights stay as they were.
    carried (state_passing): where each micro-step's rows start, or None. -> (the step's loss, the
    mean over its n_step answer tokens; n_step; the Carried its rows reached, or None)"""
    for group in optimizer.param_groups:
        group['lr'] = lr
    gen = torch.Generator().manual_seed(draw_seed(cfg['seed'], step))
    rows = torch.randint(split.n_rows, (procs.step_rows,), generator=gen).tolist()
    n_step = max(count_targets(split, rows, cfg['block_size'], cfg['loss_on']), 1)
    mine = rows[procs.rank * procs.rank_rows:(procs.rank + 1) * procs.rank_rows]
    loss_sum, reached = 0.0, []
    for micro in range(procs.micro_steps):
        x, y = rows_to_batch(split, mine[micro * procs.micro_rows:(micro + 1) * procs.micro_rows],
                             cfg['block_size'], cfg['loss_on'], procs.device)
        k = procs.rank * procs.micro_steps + micro      # this micro-batch among all processes'
        torch.manual_seed(draw_seed(cfg['seed'], step, k, 1))       # its dropout masks
        if procs.ddp:  # sync gradients on the last micro-step only
            model.require_backward_grad_sync = micro == procs.micro_steps - 1
        with procs.autocast():
            if carried is None:
                _, loss, _ = model(x, y)
            else:       # the noise from a stream of its own, apart from the masks'
                gen = torch.Generator().manual_seed(draw_seed(cfg['seed'], step, k, 2))
                states = initial_states(carried.states[micro], carried.how, gen)
                # the SSM state alone: a row is a new document, so its conv starts afresh
                ssm = [None if s is None else (s, None) for s in states or [None] * cfg['n_layer']]
                _, loss, finals = model(x, y, states=ssm)
                reached.append([None if f is None else f[0].detach() for f in finals])
        n = int((y != -1).sum())
        # loss is the mean over this micro-batch's n targets; weight it so the step's gradient is
        # the mean over all n_step targets (DDP averages over processes, hence * world_size)
        (loss * (n * procs.world_size / n_step)).backward()
        loss_sum += loss.item() * n
    loss_f = procs.total(loss_sum) / n_step         # the step's loss, not this process's share
    if math.isfinite(loss_f):
        if cfg['grad_clip']:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg['grad_clip'])
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_f, n_step, carried and Carried(carried.how, reached)


# -----------------------------------------------------------------------------
# the evals, the checkpoint and the log

@torch.no_grad()
def validate(run, split, procs):
    """run.val_loss: the mean loss per target over the same val rows every time (a fixed eval set).
    A val loss that is not finite stops the run."""
    cfg, model = run.cfg, run.model
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
    run.val_loss = total / max(count, 1)
    if not math.isfinite(run.val_loss):
        diverged(f"val loss is {run.val_loss} at iter {run.iter_num}", run)
    run.best_val_loss = min(run.best_val_loss, run.val_loss)


def diverged(what, run):
    """Stop without writing anything: the last checkpoint holds the last good weights."""
    path = os.path.join(run.cfg['out_dir'], rundir.CKPT)
    kept = (f"{path} holds the last good weights" if os.path.exists(path) else
            "no checkpoint was written")
    raise SystemExit(f"{what}: training diverged; {kept}. Lower learning_rate (now "
                     f"{run.cfg['learning_rate']}) or set grad_clip")


def length_eval(run, tok, checked, procs, final):
    """The quick length eval (the final one at the last step): {task: {'<m>x': accuracy}}, None
    where a length is skipped; in the precision the run trains in."""
    cfg, multiples = run.cfg, checked.final if final else checked.quick
    run.model.eval()
    with procs.autocast():
        accs = eval_lengths.length_eval(run.model, tok, checked.eval_tasks, multiples,
                                        cfg['eval_samples'], cfg['eval_batch_size'], procs.device,
                                        progress=f"eval {run.iter_num}", leave=False,
                                        distractors=cfg['distractors'])
    run.model.train()
    return accs


def checkpoint(run, corpus, final, carried):
    """The run at this step as its checkpoint holds it (carried: every process's carried states)."""
    return {'model': run.model.state_dict(), 'optimizer': run.optimizer.state_dict(),
            'model_args': run.model.config.__dict__, 'config': run.cfg, 'iter_num': run.iter_num,
            'best_val_loss': run.best_val_loss, 'val_loss': run.val_loss,
            'train_loss': run.train_loss, 'tokenizer': corpus.tok.name,
            'tokens_per_sec': run.tokens_per_sec, 'mfu': run.mfu, 'data_meta': corpus.meta,
            'fit_iter': run.schedule.fit_iter, 'finished': final,
            **({'carried_states': carried} if carried is not None else {}), **run.notes}


def save(run, state):
    """out_dir/ckpt.pt, replaced atomically: a kill or a full disk leaves the last one whole."""
    path = os.path.join(run.cfg['out_dir'], rundir.CKPT)
    with rundir.writing(path, f'the checkpoint of iter {run.iter_num}', run.standing):
        rundir.save_checkpoint(state, path)
    run.saved_iter = run.iter_num


def log_eval(run, logged, accs, final):
    """The step's record, appended to log.jsonl (never torn) and to logged; its lines on stdout."""
    it, path = run.iter_num, os.path.join(run.cfg['out_dir'], rundir.LOG)
    record = {'iter': it, 'train_loss': run.train_loss, 'val_loss': run.val_loss,
              'lr': run.schedule.lr(it), 'tokens_per_sec': run.tokens_per_sec, 'mfu': run.mfu,
              'elapsed_s': round(time.time() - run.t_start, 1), 'length_eval': accs,
              'fit_iter': run.schedule.fit_iter, **({'final': True} if final else {}),
              **(run.notes if it == run.start_iter else {}),
              **({'provenance': run.provenance} if run.provenance else {})}
    with rundir.writing(path, f'the log record of iter {it}', run.standing):
        rundir.append_line(path, json.dumps(record))
    logged[it], run.provenance = record, None
    loss, T = None if run.val_loss is None else round(run.val_loss, 4), run.cfg['block_size']
    for task, by_m in accs.items():
        shown = ", ".join(f"{int(m[:-1]) * T} ({m}): {'n/a (skipped)' if a is None else f'{a:.2f}'}"
                          for m, a in by_m.items())
        print(f"eval {it}: val loss {loss}, {task} accuracy {shown}")


# -----------------------------------------------------------------------------
# the start (everything that can fail on bad input or a bad run dir), the loop, the end

def start(argv):
    """The settings, the processes, the run dir, the corpus, the model, the log and the schedule.
    -> (run, procs, corpus, check_config's Checked, the log so far {iter: record}, the model to
    train: compiled and wrapped in DDP where asked)"""
    cfg = configure(settings_of(globals()), argv)
    checked = check_config(cfg)
    procs = setup_processes(cfg)
    out_dir, resumed = cfg['out_dir'], cfg['init_from'] == 'resume'
    ckpt_path, log_path = os.path.join(out_dir, rundir.CKPT), os.path.join(out_dir, rundir.LOG)
    run = Run(cfg, argv, procs.world_size)
    rundir.exit_on_signals(lambda: f"stopped at iter {run.iter_num}; {run.standing()}"
                           if procs.master else None)
    rundir.die_with_parent()                        # a trainer that ablate.py started ends with it
    if procs.master:                                # rank 0 owns the run dir and speaks for the run
        rundir.own(out_dir)
    if not resumed and os.path.exists(ckpt_path):
        raise SystemExit(f"{out_dir} already holds a run ({ckpt_path}): continue it with "
                         f"--init_from=resume, or start over in another --out_dir (or delete it)")
    wait = dist.barrier if procs.ddp else None     # the others wait while rank 0 makes the corpus
    corpus = open_corpus(cfg, procs.master, wait)
    last = start_model(run, checked.model, corpus.tok, procs.device)
    how = cfg['state_passing']          # (the evals and the val loss start from zero states)
    if how:
        run.carried = (Carried.resumed(last.get('carried_states'), how, procs) if resumed
                       else Carried(how, [None] * procs.micro_steps))
    logged = {}
    if procs.master:
        run.provenance = rundir.provenance(procs.device) | {'processes': procs.world_size}
        with rundir.writing(log_path, 'the log', run.standing):
            logged = rundir.open_log(log_path, resumed, run.iter_num)
        mine = os.path.join(out_dir, rundir.TOKENIZER)     # eval_lengths.py reads it here
        with rundir.writing(mine, 'the tokenizer', run.standing):
            rundir.write_atomic(mine, pathlib.Path(cfg['data_dir'], rundir.TOKENIZER).read_bytes())
        print(procs.describe(cfg['block_size']))
        reach = run.model.local_reach()
        if reach is not None:
            print(f"{sample_data.beyond_reach(corpus.meta, reach):.1%} of the training answers lie "
                  f"beyond the local layers' reach ({reach} tokens): only a global layer can "
                  f"retrieve them")
    # the fit as the checkpoint saw it (before its step's eval), unless the log holds that step's
    # record: a log that a crash cut back further must not make the resume find the fit again, later
    resumed_at = logged.get(run.iter_num) if resumed else None
    run.schedule = Schedule(cfg, resumed_at['fit_iter'] if resumed_at else last.get('fit_iter'),
                            checked.snapshots, checked.fixed)
    run.start_iter, run.t_start = run.iter_num, time.time()
    model = CompiledOrEager(run.model) if cfg['compile'] else run.model
    if procs.ddp:
        cuda = procs.device.startswith('cuda')
        model = DDP(model, device_ids=[int(os.environ['LOCAL_RANK'])] if cuda else None)
    return run, procs, corpus, checked, logged, model


def main(argv):
    run, procs, corpus, checked, logged, model = start(argv)
    cfg, schedule = run.cfg, run.schedule
    # the training loop: evaluate at the top of an iteration, then one step
    t_last, iter_last = run.t_start, run.iter_num
    model.train()
    while True:
        rundir.stop_if_asked()      # a Ctrl-C whose exit was swallowed where it landed
        it = run.iter_num
        final, snapshot = it == schedule.stop(), schedule.snapshot_at(it)
        if it % cfg['eval_interval'] == 0 or final or snapshot is not None:
            saved = it == run.saved_iter        # a resume's first step: written, with its val loss
            if not saved:
                validate(run, corpus.val, procs)
            carried = run.carried and run.carried.gathered(procs)      # (every process takes part)
            if procs.master:        # the checkpoint first: nothing is lost if the length eval fails
                state = checkpoint(run, corpus, final, carried)
                if snapshot is not None:            # a trunk's: its branch starts from this state
                    write_branch(state, run.argv, snapshot, schedule.fixed, run.standing)
                if not saved:
                    save(run, state)
                if it not in logged:                # (logged already: a resume's first step)
                    accs = length_eval(run, corpus.tok, checked, procs, final)
                    if schedule.observe(it, accs, final):
                        stop = f"; stopping at iter {schedule.stop()}" if cfg['steps_after_fit'] else ""
                        print(f"fit at iter {it}: 1x accuracy >= {cfg['fit_accuracy']}{stop}")
                    log_eval(run, logged, accs, final)
            schedule.fit_iter = procs.rank0s(schedule.fit_iter)     # the fit rank 0 found: its stop
            t_last, iter_last = time.time(), it     # the eval's time is not training time
        if it >= schedule.stop():                   # (the eval may have found the fit, so the stop)
            break
        lr = schedule.lr(it)
        step = run.notes.get('init_iter', 0) + it   # a continuation draws on past its source
        run.train_loss, n_step, run.carried = train_step(model, run.optimizer, corpus.train, cfg,
                                                         procs, step, lr, run.carried)
        if not math.isfinite(run.train_loss):
            diverged(f"loss is {run.train_loss} at iter {it}", run)
        run.iter_num += 1
        if run.iter_num % cfg['log_interval'] == 0 and procs.master:   # loss, speed, MFU, time left
            t_now, tokens, peak = time.time(), procs.step_rows * cfg['block_size'], cfg['peak_flops']
            dt = (t_now - t_last) / (run.iter_num - iter_last)         # a step, since the last line
            run.tokens_per_sec, eta = tokens / dt, (schedule.stop() - run.iter_num) * dt
            run.mfu = (run.model.estimate_mfu(tokens // procs.world_size, dt, peak, n_step / tokens)
                       if peak else 0.0)
            print(f"iter {run.iter_num}/{schedule.stop()}: loss {run.train_loss:.4f}, lr {lr:.2e}, "
                  f"{dt * 1000:.0f} ms/iter, {run.tokens_per_sec:,.0f} tok/s"
                  + (f", mfu {run.mfu * 100:.1f}%" if peak else "") + f", eta {eta / 60:.1f} min")
            t_last, iter_last = t_now, run.iter_num

    if procs.master:
        print(f"done: {run.iter_num} iters in {(time.time() - run.t_start) / 60:.1f} min; checkpoint "
              f"{os.path.join(cfg['out_dir'], rundir.CKPT)}")
        if schedule.fit_iter is None:      # a study counts such a run apart; a run by hand says it here
            print(f"note: the run never fit (no quick eval reached 1x accuracy {cfg['fit_accuracy']}): train longer "
                  f"(max_iters) or check the recipe before reading its length eval")
        val = [v for _, r in sorted(logged.items()) if (v := r.get('val_loss')) is not None]
        if len(val) > 1 and val[-1] >= val[0]:   # e.g. learning_rate=1e6 ends at chance, no error
            print(f"note: the val loss did not fall ({val[0]:.4f} to {val[-1]:.4f}): the run "
                  f"learned nothing; check learning_rate (now {cfg['learning_rate']})")
    if procs.ddp:
        leave_together()


if __name__ == '__main__':
    main(sys.argv[1:])
