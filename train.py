"""
Train a small model from scratch on the synthetic retrieval corpus, watching length
generalization as it trains. On one CPU or GPU, or on several with DDP:

    python train.py config/vpad.py --dropout_site=pre_norm --out_dir=out/pre_norm
    torchrun --standalone --nproc_per_node=4 train.py config/vpad.py

Top to bottom: the settings, checked (checks.py); the corpus (sample_data.py); the model, fresh,
resumed or from another run's weights; the loop. Each step draws batch_size *
gradient_accumulation_steps rows, split over the processes; what it draws (rows, dropout masks)
comes from (seed, step), so a resumed run continues exactly. Every eval_interval: the checkpoint
(atomic), then val loss and a quick length eval to out_dir/log.jsonl. The run fits at the first
quick eval with 1x >= fit_accuracy; schedule.py turns that into the learning rate, the stop and a
trunk's snapshots (steps_after_fit, cooldown_iters, snapshots_after_fit).
"""

import json
import math
import os
import pathlib
import shlex
import signal
import sys
import time
from contextlib import nullcontext
from datetime import timedelta
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

if __name__ == '__main__':   # Ctrl-C while torch loads (a second or more): one line, not a traceback from
    # inside the import; rundir.exit_on_signals takes over once the run starts
    signal.signal(signal.SIGINT, lambda *_: sys.exit("stopped while loading torch: nothing was written"))
import numpy  # noqa: E402,F401  (before torch: torch's C extension imports numpy and drops a Ctrl-C raised there)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

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
block_size = 64            # the training length: the longest training document
batch_size = 32            # rows per micro-batch
gradient_accumulation_steps = 1  # micro-batches per optimizer step, over all processes together
# model
n_layer = 2                # layers
n_head = 1                 # attention heads
n_embd = 64                # width
window = 0                 # sliding-window size of RoPE attention layers (0 = full causal)
nope_every = 1             # every k-th attention layer is global without RoPE (0 = never)
nope_first = False         # True: the NoPE layer comes first in each group (N W, not W N)
short_conv = 3             # attention layers mix in the previous short_conv positions (0 = off)
block_pattern = 'A'        # cycled over layers: 'A' attention + MLP, 'M' Mamba2 ('AM' = hybrid)
rope_theta = 10000.0       # RoPE base
d_state = 64               # Mamba2 state size
expand = 2                 # Mamba2 inner width = expand * n_embd
headdim = 32               # Mamba2 channels per head
d_conv = 4                 # Mamba2 causal conv width
chunk_size = 64            # Mamba2 SSD chunk length
dropout = 0.1              # the drop probability p
dropout_site = 'vpad'      # 'none', 'pre_norm', 'pre_linear' or 'vpad'
# AdamW and the schedule (schedule.py)
learning_rate = 3e-3       # peak learning rate
max_iters = 4000           # optimizer steps; with steps_after_fit, the cap on steps to the fit
fit_accuracy = 0.95        # the run fits at the first quick eval with 1x accuracy >= this
steps_after_fit = 1000     # stop this many steps after the fit (0 = always run max_iters)
cooldown_iters = 0         # with steps_after_fit: steps of decay before the stop (0 = from the fit)
snapshots_after_fit = ''   # e.g. '1000,4000': a trunk's snapshots, branches in out_dir/cooldown<k>
weight_decay = 0.0         # AdamW weight decay (0 = off)
beta1 = 0.9                # AdamW beta1
beta2 = 0.95               # AdamW beta2
grad_clip = 1.0            # clip the gradient norm at this value (0 = off)
decay_lr = True            # cosine down to min_lr (schedule.py says when); False: constant
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
from configurator import configure, settings_of  # noqa: E402  (after the defaults, as in nanoGPT)
from checks import MODEL_KEYS, check_config  # noqa: E402
from model import GPT, CompiledOrEager  # noqa: E402
import sample_data  # noqa: E402
from schedule import Schedule, branch_argv, branch_overrides  # noqa: E402
import eval_lengths  # noqa: E402
import rundir  # noqa: E402


# -----------------------------------------------------------------------------
# the run's state: what the loop reads and updates, in one place

@dataclass
class Run:
    argv: list                     # the command line, for the commands that continue the run
    checked: object                # checks.Checked: the eval tasks, the quick and final multiples, the model's config
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
    last: dict = field(default_factory=dict)     # what the resumed checkpoint logged of its step
    logged: dict = field(default_factory=dict)   # {iter: log record} written so far
    provenance: Optional[dict] = None            # rundir.provenance(): in the first record this process logs
    t_start: float = 0.0


# -----------------------------------------------------------------------------
# data and model: the batches drawn from the corpus (sample_data.open_corpus), and the model fresh,
# resumed, or from another run's weights

def rows_to_batch(split, rows, T, loss_on, device):
    """Aligned rows -> x (B, T) and y (B, T) with -1 where no loss is taken."""
    x, y = (torch.from_numpy(a) for a in sample_data.batch_rows(split, rows, T, loss_on))
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def start_model(run, cfg, config, device):
    """run.model and run.optimizer from scratch, from out_dir's checkpoint (resume: also its step,
    best val loss and the values it logged), or from another run's weights (init_from=<path>).
    config: the model's GPTConfig, as check_config built it."""
    init_from, tok = cfg['init_from'], run.tok
    torch.manual_seed(cfg['seed'])                      # initial weights
    run.model = model = GPT(config)
    ckpt = None
    if init_from != 'scratch':
        path = run.ckpt_path if init_from == 'resume' else rundir.ckpt_path(init_from)
        ckpt = rundir.load_start(path, own=init_from == 'resume')
        if ckpt['tokenizer'] != tok.name or ckpt['model_args']['vocab_size'] != tok.vocab_size:
            raise SystemExit(f"tokenizer mismatch: {path} was trained with {ckpt['tokenizer']!r} (vocab "
                             f"{ckpt['model_args']['vocab_size']}), {cfg['data_dir']} has {tok.name!r} "
                             f"(vocab {tok.vocab_size}); use the data_dir that run was trained on")
        # resume: every model setting must match; init_from=<path>: the shapes must (site, p, window, rope may change)
        keys = MODEL_KEYS if init_from == 'resume' else ['n_layer', 'n_head', 'n_embd', 'block_pattern', 'short_conv',
                                                          'd_state', 'expand', 'headdim', 'd_conv']
        changed = {k: (ckpt['model_args'][k], getattr(config, k)) for k in keys
                   if ckpt['model_args'][k] != getattr(config, k)}
        if changed:
            raise SystemExit(f"{path} was trained with other model settings: "
                             + ", ".join(f"{k}={a!r} (this run: {b!r})" for k, (a, b) in changed.items()))
        model.load_state_dict(ckpt['model'])
        if init_from == 'resume':
            run.iter_num, run.best_val_loss, run.resumed = ckpt['iter_num'], ckpt['best_val_loss'], True
            changed = [k for k in cfg if k not in ('init_from', 'max_iters', 'out_dir')   # moved: the same run
                       and ckpt['config'].get(k, rundir.ADDED.get(k)) != cfg[k]]
            print(f"resumed from {path} at iter {run.iter_num}" + (
                "; note: settings changed since, so this is not the run an uninterrupted one would be: "
                + ", ".join(f"{k}={ckpt['config'].get(k)!r} -> {cfg[k]!r}" for k in changed) if changed else ""))
        else:
            run.notes = {'init_from': os.path.abspath(path), 'init_iter': ckpt['iter_num']}
            print(f"initialized from {path} (iter {ckpt['iter_num']}): weights only, fresh optimizer")
    model.to(device)
    run.optimizer = model.configure_optimizers(cfg['weight_decay'], cfg['learning_rate'],
                                               (cfg['beta1'], cfg['beta2']), device.split(':')[0])
    if run.resumed:
        run.optimizer.load_state_dict(ckpt['optimizer'])
        run.notes = {k: ckpt[k] for k in ('init_from', 'init_iter') if k in ckpt}
        # a run killed in that step's eval logs it in full from these
        run.last = {k: ckpt.get(k) for k in ('train_loss', 'val_loss', 'tokens_per_sec', 'mfu', 'fit_iter')}
    run.saved_iter = run.iter_num if run.resumed else None


# -----------------------------------------------------------------------------
# the processes: DDP ranks, devices and their share of a step

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
    device_type: str    # 'cpu' or 'cuda'

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
                 -(-rank_rows // micro_rows), device.split(':')[0])


def draw_seed(*parts):
    """A seed from (seed, step, micro-batch, ...): the same on every process and after a resume."""
    s = 0
    for p in parts:
        s = (s * 1_000_003 + int(p)) % 2**61
    return s


# -----------------------------------------------------------------------------
# the evals, the checkpoint and the log

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


def diverged(what, run, cfg):
    """Stop without writing anything: the last checkpoint holds the last good weights."""
    last = (f"the last good checkpoint, {run.ckpt_path}, is untouched" if os.path.exists(run.ckpt_path)
            else "no checkpoint was written")
    raise SystemExit(f"{what}: training diverged; {last}. Lower learning_rate (now {cfg['learning_rate']}) "
                     f"or set grad_clip")


def save(run, cfg, procs, final, standing):
    """The checkpoint of this step, first: nothing is lost if the length eval fails. A resumed run does
    not checkpoint its first step again. At a trunk's snapshot the state is also written as the first
    checkpoint of its cooldown branch (once: a replayed step leaves alone a branch that may be
    training). -> the step's val loss"""
    first = run.resumed and run.iter_num == run.start_iter
    if first:
        val_loss = run.last.get('val_loss')         # the checkpoint's, for a log record its kill cut off
    else:
        val_loss = estimate_val_loss(run.model, run.data['val'], cfg, procs)
        if not math.isfinite(val_loss):
            diverged(f"val loss is {val_loss} at iter {run.iter_num}", run, cfg)
        run.best_val_loss = min(run.best_val_loss, val_loss)
    snapshot = run.schedule.snapshot_at(run.iter_num)
    if not procs.master or first and snapshot is None:
        return val_loss
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
                  + shlex.join(['python', 'train.py', *branch_argv(run.argv, cfg, snapshot), '--init_from=resume']))
    if not first:
        with rundir.writing(run.ckpt_path, f'the checkpoint of iter {run.iter_num}', standing):
            rundir.save_checkpoint(state, run.ckpt_path)
        run.saved_iter = run.iter_num
    return val_loss


def length_eval(run, cfg, procs, final):
    """The quick length eval (the final one at the last step): {task: {'<m>x': accuracy}}, None where
    a length is skipped; in the precision the run trains in."""
    run.model.eval()
    with procs.autocast():
        accs = eval_lengths.length_eval(run.model, run.tok, run.checked.eval_tasks,
                                        run.checked.final if final else run.checked.quick, cfg['eval_samples'],
                                        cfg['eval_batch_size'], procs.device, progress=f"eval {run.iter_num}",
                                        leave=False)
    run.model.train()
    return accs


def log_eval(run, cfg, val_loss, accs, final, standing):
    """The step's record in log.jsonl (appended, never torn) and its lines on stdout."""
    record = {'iter': run.iter_num, 'train_loss': run.train_loss, 'val_loss': val_loss,
              'lr': run.schedule.lr(run.iter_num), 'tokens_per_sec': run.tokens_per_sec, 'mfu': run.mfu,
              'elapsed_s': round(time.time() - run.t_start, 1), 'length_eval': accs, 'fit_iter': run.schedule.fit_iter,
              **({'final': True} if final else {}), **(run.notes if run.iter_num == run.start_iter else {}),
              **({'provenance': run.provenance} if run.provenance else {})}
    with rundir.writing(run.log_path, f'the log record of iter {run.iter_num}', standing):
        rundir.append_line(run.log_path, json.dumps(record))
    run.logged[run.iter_num] = record
    run.provenance = None
    for task, by_m in accs.items():
        print(f"eval {run.iter_num}: val loss {val_loss if val_loss is None else round(val_loss, 4)}, {task} accuracy "
              + ", ".join(f"{int(m[:-1]) * cfg['block_size']} ({m}): {'n/a (skipped)' if a is None else f'{a:.2f}'}"
                         for m, a in by_m.items()))


def agree_on_fit(schedule, procs):
    """DDP: every process takes the fit (so the decay and the stop) rank 0 decided."""
    if procs.ddp:
        t = torch.tensor([-1 if schedule.fit_iter is None else schedule.fit_iter], device=procs.device)
        dist.broadcast(t, 0)
        schedule.fit_iter = None if t.item() < 0 else int(t.item())


def train_step(model, optimizer, split, cfg, procs, step, lr):
    """One optimizer step on the step's global batch, the same on every process; each takes its
    share of the rows. -> (the step's loss, the mean over its n_step answer tokens; n_step). A loss
    that is not finite takes no step: the weights stay as they were."""
    for group in optimizer.param_groups:
        group['lr'] = lr
    gen = torch.Generator().manual_seed(draw_seed(cfg['seed'], step))
    rows = torch.randint(split.n_rows, (procs.step_rows,), generator=gen).tolist()
    n_step = max(sample_data.count_targets(split, rows, cfg['block_size'], cfg['loss_on']), 1)
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
    checked = check_config(cfg, settings_of(globals()))
    out_dir = cfg['out_dir']
    run = Run(argv, checked, os.path.join(out_dir, rundir.CKPT), os.path.join(out_dir, rundir.LOG))
    # DDP: one process per device, launched by torchrun; rank 0 owns the run dir and speaks for the run
    master, world_size = int(os.environ.get('RANK', 0)) == 0, int(os.environ.get('WORLD_SIZE', 1))

    def standing():
        return rundir.where_it_stands(argv, out_dir, run.saved_iter, world_size)
    rundir.exit_on_signals(lambda: f"stopped at iter {run.iter_num}; {standing()}" if master else None)
    rundir.die_with_parent()                        # a trainer that ablate.py started ends with it
    if master:
        rundir.own(out_dir)
    procs = setup_processes(cfg)

    # the data, the model and the run dir
    if cfg['init_from'] != 'resume' and os.path.exists(run.ckpt_path):
        raise SystemExit(f"{out_dir} already holds a run ({run.ckpt_path}): continue it with --init_from=resume, "
                         f"or start over in another --out_dir (or delete {out_dir})")
    wait = dist.barrier if dist.is_initialized() else None         # the other ranks wait while rank 0 makes it
    run.meta, run.tok, run.data = sample_data.open_corpus(cfg, procs.master, wait)
    start_model(run, cfg, checked.model, procs.device)
    tokens_per_iter = procs.step_rows * cfg['block_size']
    if procs.master:
        run.provenance = rundir.provenance(procs.device) | {'processes': procs.world_size}
        with rundir.writing(run.log_path, 'the log', standing):
            run.logged = rundir.open_log(run.log_path, run.resumed, run.iter_num)
        tok_path = os.path.join(out_dir, rundir.TOKENIZER)            # eval_lengths.py reads it from the run dir
        with rundir.writing(tok_path, 'the tokenizer', standing):
            rundir.write_atomic(tok_path, pathlib.Path(cfg['data_dir'], rundir.TOKENIZER).read_bytes())
        print(f"tokens per iteration: {tokens_per_iter:,} ({procs.world_size} process(es) x {procs.micro_steps} "
              f"micro-steps "
              f"x {procs.micro_rows} rows x {cfg['block_size']} tokens); device {procs.device}, {procs.dtype}")
        reach = run.model.local_reach()
        if reach is not None and sample_data.beyond_reach(run.meta, reach) is not None:
            print(f"{sample_data.beyond_reach(run.meta, reach):.1%} of the training answers lie beyond the local "
                  f"layers' "
                  f"reach ({reach} tokens): only a global layer can retrieve them")
    # the fit as the checkpoint saw it (before its own step's eval), unless the log holds that step's record:
    # a log that a crash cut back further must not make the resume find the fit again, later
    resumed_at = run.logged.get(run.iter_num) if run.resumed else None
    run.schedule = Schedule(cfg, resumed_at['fit_iter'] if resumed_at else run.last.get('fit_iter'))
    model = CompiledOrEager(run.model) if cfg['compile'] else run.model
    if procs.ddp:
        model = DDP(model, device_ids=[int(os.environ['LOCAL_RANK'])] if procs.device_type == 'cuda' else None)

    # the training loop: evaluate at the top of an iteration, then one step
    run.start_iter, run.t_start = run.iter_num, time.time()
    run.train_loss = run.last.get('train_loss')
    run.tokens_per_sec, run.mfu = run.last.get('tokens_per_sec') or 0.0, run.last.get('mfu') or 0.0
    t_last, iter_last = run.t_start, run.iter_num
    model.train()
    while True:
        final = run.iter_num == run.schedule.stop()
        if run.iter_num % cfg['eval_interval'] == 0 or final or run.schedule.snapshot_at(run.iter_num) is not None:
            val_loss = save(run, cfg, procs, final, standing)
            if procs.master and run.iter_num not in run.logged:      # (logged already: a resume's first step)
                accs = length_eval(run, cfg, procs, final)
                if run.schedule.observe(run.iter_num, accs, final):
                    print(f"fit at iter {run.iter_num}: 1x accuracy >= {cfg['fit_accuracy']}"
                          + (f"; stopping at iter {run.schedule.stop()}" if cfg['steps_after_fit'] else ""))
                log_eval(run, cfg, val_loss, accs, final, standing)
            agree_on_fit(run.schedule, procs)
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
            run.mfu = (run.model.estimate_mfu(tokens_per_iter // procs.world_size, dt, peak, n_step / tokens_per_iter)
                       if peak else 0.0)
            eta = (run.schedule.stop() - run.iter_num) * dt
            print(f"iter {run.iter_num}/{run.schedule.stop()}: loss {run.train_loss:.4f}, lr {lr:.2e}, "
                  f"{dt * 1000:.0f} ms/iter, {run.tokens_per_sec:,.0f} tok/s"
                  + (f", mfu {run.mfu * 100:.1f}%" if peak else "")
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
