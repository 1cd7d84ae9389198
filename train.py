"""
Train a small model from scratch on the synthetic retrieval corpus, watching length
generalization as it trains. On one CPU or GPU:

    python train.py config/vpad.py
    python train.py config/vpad.py --dropout_site=pre_norm --out_dir=out/pre_norm

On several GPUs (or CPU processes) of one machine, with DDP:

    torchrun --standalone --nproc_per_node=4 train.py config/vpad.py

The tokens per optimizer step (batch_size * gradient_accumulation_steps * block_size) do not depend
on the number of processes: every step draws one global batch from a generator seeded by `seed`,
and each process takes its share of the micro-batches. Every eval_interval, val loss and a quick
length eval go to out_dir/log.jsonl, and the checkpoint (model, optimizer, config, RNG states,
iteration) is written atomically; init_from='resume' continues exactly.
"""

import json
import math
import os
import random
import sys
import time
from contextlib import nullcontext
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
# default config values; a config file and --key=value override them (see configurator.py)
# I/O
out_dir = 'out/vpad'
eval_interval = 250
log_interval = 10
eval_iters = 20            # val loss over a fixed set of eval_iters * batch_size val rows
always_save_checkpoint = True   # False: only when val loss improves
init_from = 'scratch'      # 'scratch' or 'resume' (from out_dir/ckpt.pt)
# data (generated into data_dir on first use with these settings)
data_dir = 'data/niah_single_128'
tasks = 'niah_single'      # task[:weight],... (sample_data.TASKS)
num_tokens = 10_000_000    # training tokens to generate when data_dir is empty
tokenizer = 'lengthgen'    # the offline tokenizer; or a tiktoken name whose files are cached
loss_on = 'answers'        # 'answers': loss only on answer tokens (as Zoology's MQAR); 'all': LM loss
block_size = 128           # the training length
batch_size = 32            # rows per micro-batch (per process)
gradient_accumulation_steps = 1  # micro-batches per optimizer step, over all processes together
# model
n_layer = 4
n_head = 4
n_embd = 128
window = 0
nope_every = 0
block_pattern = 'A'
rope_theta = 10000.0
d_state = 64
expand = 2
headdim = 32
d_conv = 4
chunk_size = 64
dropout = 0.1
dropout_site = 'vpad'      # 'none', 'pre_norm', 'pre_linear' or 'vpad'
# AdamW
learning_rate = 1e-3
max_iters = 2000
weight_decay = 0.0         # 0 = off; decay only ever touches linear weight matrices
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0            # 0 = off
decay_lr = True            # linear warmup, then cosine down to min_lr
warmup_iters = 100
lr_decay_iters = 2000
min_lr = 1e-4
# length eval during training
eval_task = 'niah_single'
eval_multiples = '1,4,16'  # the quick eval at each eval_interval
final_multiples = '1,2,4,8,16,32,64'   # the eval printed when training ends
eval_samples = 32
eval_batch_size = 8
# system
device = 'auto'            # 'auto', 'cpu', 'cuda', 'cuda:0', ...
dtype = 'auto'             # 'auto' (bfloat16 on CUDA when supported, else float32), 'float32', 'bfloat16'
compile = False            # torch.compile the model (worth it on GPU)
peak_flops = 0.0           # the device's peak FLOP/s for MFU (per process); 0 = a guess for known GPUs
seed = 1337
# -----------------------------------------------------------------------------
from configurator import configure, settings_of  # noqa: E402  (after the defaults, as in nanoGPT)
from model import GPT, GPTConfig  # noqa: E402
import sample_data  # noqa: E402
import eval_lengths  # noqa: E402

MODEL_KEYS = [f for f in GPTConfig.__dataclass_fields__ if f != 'vocab_size']


def save_checkpoint(state, path):
    """Write to a temp file, flush it to disk, then rename: a crash at any moment leaves either
    the old checkpoint or the new one, never a torn file."""
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path, device):
    if not os.path.isfile(path):
        raise SystemExit(f"init_from='resume' but there is no checkpoint at {path}; "
                         f"start the run with init_from='scratch'")
    try:  # on the CPU: RNG states must stay CPU tensors; load_state_dict moves weights to the device
        return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:
        raise SystemExit(f"{path} is not a readable checkpoint ({type(e).__name__}: {str(e)[:200]}). "
                         f"Start again with init_from='scratch' (or restore a copy)")


def rng_state():
    """Every generator a step may touch, in types torch.load(weights_only=True) accepts."""
    np_state = np.random.get_state()
    return {'python': random.getstate(), 'numpy': [np_state[0], np_state[1].tolist(), *np_state[2:]],
            'torch': torch.get_rng_state(), 'cuda': torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(s):
    random.setstate((s['python'][0], tuple(s['python'][1]), s['python'][2]))
    np.random.set_state((s['numpy'][0], np.array(s['numpy'][1], dtype=np.uint32), *s['numpy'][2:]))
    torch.set_rng_state(s['torch'])
    if s['cuda'] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s['cuda'])


def get_lr(it, cfg):
    if not cfg['decay_lr']:
        return cfg['learning_rate']
    if it < cfg['warmup_iters']:
        return cfg['learning_rate'] * (it + 1) / (cfg['warmup_iters'] + 1)
    if it > cfg['lr_decay_iters']:
        return cfg['min_lr']
    ratio = (it - cfg['warmup_iters']) / max(1, cfg['lr_decay_iters'] - cfg['warmup_iters'])
    return cfg['min_lr'] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg['learning_rate'] - cfg['min_lr'])


def open_data(cfg, master):
    """Generate the corpus on first use (rank 0; the others wait), then check it matches the run."""
    ddp = dist.is_initialized()
    meta_path = os.path.join(cfg['data_dir'], 'meta.json')
    try:
        if master and not os.path.exists(meta_path):
            print(f"no data in {cfg['data_dir']}: generating it with this run's settings")
            sample_data.prepare(cfg['data_dir'], cfg['block_size'], cfg['num_tokens'], tasks=cfg['tasks'],
                                seed=cfg['seed'], tokenizer=cfg['tokenizer'])
        if ddp:
            dist.barrier()
        meta = sample_data.load_meta(cfg['data_dir'])
        tok = sample_data.load_tokenizer(cfg['data_dir'])
        names, weights = sample_data.parse_tasks(cfg['tasks'])
    except ValueError as e:
        raise SystemExit(str(e))
    wanted = dict(block_size=cfg['block_size'], tokenizer=cfg['tokenizer'], tasks=dict(zip(names, weights)),
                  seed=cfg['seed'], num_tokens=cfg['num_tokens'])
    differ = {k: (meta[k], v) for k, v in wanted.items() if meta[k] != v}
    if differ:
        raise SystemExit(f"{cfg['data_dir']} was generated with other settings ("
                         + ", ".join(f"{k}={a!r}, this run: {b!r}" for k, (a, b) in differ.items())
                         + f"): point data_dir elsewhere or delete {cfg['data_dir']}")
    data = {}
    for split in ('train', 'val'):
        ids = np.memmap(os.path.join(cfg['data_dir'], meta[f'{split}_bin']), dtype=np.uint16, mode='r')
        mask = np.memmap(os.path.join(cfg['data_dir'], meta[f'{split}_mask']), dtype=np.uint8, mode='r')
        data[split] = (ids, mask, (len(ids) - 1) // cfg['block_size'])
    return meta, tok, data


def rows_to_batch(split_data, rows, T, loss_on, device):
    """Aligned rows -> x (B, T) and y (B, T) with -1 where no loss is taken."""
    ids, mask, _ = split_data
    x = np.stack([ids[r * T: r * T + T] for r in rows]).astype(np.int64)
    y = np.stack([ids[r * T + 1: r * T + T + 1] for r in rows]).astype(np.int64)
    if loss_on == 'answers':
        m = np.stack([mask[r * T + 1: r * T + T + 1] for r in rows])
        y[m == 0] = -1
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def fmt(acc):
    return 'n/a (would not fit)' if acc is None else f"{acc:.2f}"


def guess_peak_flops(device_type, dtype):
    """bf16 dense peaks of a few common GPUs; set peak_flops for anything else."""
    if device_type != 'cuda':
        return 0.0
    name = torch.cuda.get_device_name()
    for key, flops in (('H200', 989e12), ('H100', 989e12), ('A100', 312e12), ('L40', 181e12),
                       ('4090', 165e12), ('A10', 125e12), ('V100', 125e12), ('T4', 65e12)):
        if key in name:
            return flops if dtype == 'bfloat16' else flops / 2
    return 0.0


if __name__ == '__main__':
    cfg = configure(settings_of(globals()), sys.argv[1:])
    globals().update(cfg)
    if loss_on not in ('answers', 'all') or init_from not in ('scratch', 'resume'):
        raise SystemExit(f"config error: loss_on must be 'answers' or 'all' (got {loss_on!r}), "
                         f"init_from 'scratch' or 'resume' (got {init_from!r})")
    try:  # check the settings now, before any data is generated
        GPTConfig(**{k: cfg[k] for k in MODEL_KEYS})
        if dtype not in ('auto', 'float32', 'bfloat16'):
            raise ValueError(f"dtype={dtype!r}: use 'auto', 'float32' or 'bfloat16'")
        if eval_task not in sample_data.TASKS:
            raise ValueError(f"eval_task={eval_task!r}: tasks are {', '.join(sample_data.TASKS)}")
        quick = eval_lengths.parse_multiples('eval_multiples', eval_multiples)
        final = eval_lengths.parse_multiples('final_multiples', final_multiples)
        shortest = block_size * min(quick + final)
        needed = sample_data.min_length(eval_task, sample_data.build_tokenizer(tokenizer))
        if shortest < needed:
            raise ValueError(f"{eval_task} needs prompts of at least {needed} tokens; the length eval asks for {shortest}")
    except ValueError as e:
        raise SystemExit(f"config error: {e}")

    # DDP: one process per device, launched by torchrun
    ddp = int(os.environ.get('RANK', -1)) != -1
    if device == 'auto':
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if ddp:
        # rank 0 alone generates missing data and runs the length evals; the others wait that long
        dist.init_process_group(backend='nccl' if device.startswith('cuda') else 'gloo', timeout=timedelta(hours=2))
        rank, local_rank, world_size = dist.get_rank(), int(os.environ['LOCAL_RANK']), dist.get_world_size()
        if device.startswith('cuda'):
            device = f'cuda:{local_rank}'
            torch.cuda.set_device(device)
    else:
        rank, world_size = 0, 1
    master = rank == 0
    if gradient_accumulation_steps % world_size:
        raise SystemExit(f"config error: gradient_accumulation_steps={gradient_accumulation_steps} must be a "
                         f"multiple of the number of processes ({world_size})")
    micro_steps = gradient_accumulation_steps // world_size          # per process
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
    device_type = 'cuda' if device.startswith('cuda') else 'cpu'
    if dtype == 'auto':
        dtype = 'bfloat16' if device_type == 'cuda' and torch.cuda.is_bf16_supported() else 'float32'
    ctx = nullcontext() if dtype == 'float32' else torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    torch.manual_seed(seed + rank)                                    # dropout masks differ per process
    random.seed(seed + rank)
    np.random.seed(seed + rank)
    batch_gen = torch.Generator().manual_seed(seed)                   # the same global batches everywhere
    if device_type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if master:
        os.makedirs(out_dir, exist_ok=True)
        print(f"tokens per iteration: {tokens_per_iter:,} ({world_size} process(es) x {micro_steps} micro-steps "
              f"x {batch_size} rows x {block_size} tokens); device {device}, {dtype}")

    meta, tok, data = open_data(cfg, master)
    model_args = {k: cfg[k] for k in MODEL_KEYS}
    model_args['vocab_size'] = meta['vocab_size']
    iter_num, best_val_loss, resumed = 0, float('inf'), False
    ckpt_path = os.path.join(out_dir, 'ckpt.pt')
    if init_from == 'resume':
        ckpt = load_checkpoint(ckpt_path, device)
        changed = {k: (ckpt['model_args'][k], v) for k, v in model_args.items() if ckpt['model_args'].get(k) != v}
        if changed:
            raise SystemExit(f"the checkpoint in {out_dir} was trained with other model settings: "
                             + ", ".join(f"{k}={a!r} (now {b!r})" for k, (a, b) in changed.items()))
        if ckpt['tokenizer'] != tok.name or ckpt['model_args']['vocab_size'] != tok.vocab_size:
            raise SystemExit(f"tokenizer mismatch: {out_dir} was trained with {ckpt['tokenizer']!r} "
                             f"(vocab {ckpt['model_args']['vocab_size']}), {data_dir} has {tok.name!r} "
                             f"(vocab {tok.vocab_size}); resume with the run's own data_dir")
        iter_num, best_val_loss, resumed = ckpt['iter_num'], ckpt['best_val_loss'], True
    model = GPT(GPTConfig(**model_args))
    if resumed:
        model.load_state_dict(ckpt['model'])
    model.to(device)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    if resumed:
        optimizer.load_state_dict(ckpt['optimizer'])
        set_rng_state(ckpt['rng'][rank] if rank < len(ckpt['rng']) else ckpt['rng'][0])
        batch_gen.set_state(ckpt['batch_gen'])
        print(f"resumed from {ckpt_path} at iter {iter_num}")
        del ckpt
    if master:
        tok.save(os.path.join(out_dir, 'tokenizer.json'))            # eval_lengths.py reads it from the run dir
    raw_model = model
    if compile:
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[local_rank] if device_type == 'cuda' else None)
    if not peak_flops:
        peak_flops = guess_peak_flops(device_type, dtype)

    @torch.no_grad()
    def estimate_val_loss():
        """Mean loss over the same val rows every time (a fixed eval set)."""
        model.eval()
        n_rows = data['val'][2]
        losses = []
        for k in range(eval_iters):
            rows = [(k * batch_size + j) % n_rows for j in range(batch_size)]
            x, y = rows_to_batch(data['val'], rows, block_size, loss_on, device)
            with ctx:
                _, loss = raw_model(x, y)
            losses.append(loss.item())
        model.train()
        return sum(losses) / len(losses)

    def length_eval(multiples):
        """{multiple: accuracy}; None where the length would not fit in memory."""
        raw_model.eval()
        accs = {}
        for m in multiples:
            try:
                accs[m] = eval_lengths.evaluate(raw_model, tok, eval_task, m * block_size, eval_samples,
                                                eval_batch_size, device)
            except MemoryError as e:
                print(f"length eval skipped: {e}")
                accs[m] = None
        raw_model.train()
        return accs

    def checkpoint():
        rngs = [None] * world_size
        if ddp:
            dist.all_gather_object(rngs, rng_state())
        else:
            rngs = [rng_state()]
        if master:
            save_checkpoint({'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(),
                             'model_args': model_args, 'config': cfg, 'iter_num': iter_num,
                             'best_val_loss': best_val_loss, 'tokenizer': tok.name, 'rng': rngs,
                             'batch_gen': batch_gen.get_state(), 'data_meta': meta}, ckpt_path)

    def diverged(what):
        """Stop without writing anything: the last checkpoint holds the last good weights."""
        last = f"the last good checkpoint, {ckpt_path}, is untouched" if os.path.exists(ckpt_path) else "no checkpoint was written"
        raise SystemExit(f"{what}: training diverged; {last}. Lower learning_rate (now {learning_rate}) or set grad_clip")

    n_train_rows = data['train'][2]
    start_iter = iter_num
    log_path = os.path.join(out_dir, 'log.jsonl')
    if master and resumed and os.path.exists(log_path):  # drop what was logged after the checkpoint
        with open(log_path) as f:
            kept = [line for line in f if json.loads(line)['iter'] <= iter_num]
        with open(log_path, 'w') as f:
            f.writelines(kept)
    model.train()
    t_start, tokens_per_sec, mfu, loss_f = time.time(), 0.0, 0.0, None
    t_last, iter_last = t_start, iter_num
    while True:
        # Evaluate, log and checkpoint at the top of an iteration, before its batch is drawn, so the
        # saved RNG states are exactly the ones the next step uses. A resumed run starts here with
        # what it just loaded, so it does not evaluate again.
        if (iter_num % eval_interval == 0 or iter_num == max_iters) and not (resumed and iter_num == start_iter):
            val_loss = estimate_val_loss()
            if not math.isfinite(val_loss):
                diverged(f"val loss is {val_loss} at iter {iter_num}")
            if master:
                accs = length_eval(final if iter_num == max_iters else quick)
                record = {'iter': iter_num, 'train_loss': loss_f, 'val_loss': val_loss, 'lr': get_lr(iter_num, cfg),
                          'tokens_per_sec': tokens_per_sec, 'mfu': mfu, 'elapsed_s': round(time.time() - t_start, 1),
                          'length_eval': {'task': eval_task, **{f'{m}x': a for m, a in accs.items()}}}
                with open(log_path, 'a') as f:
                    f.write(json.dumps(record) + '\n')
                print(f"eval {iter_num}: val loss {val_loss:.4f}, {eval_task} accuracy "
                      + ", ".join(f"{m * block_size} ({m}x): {fmt(a)}" for m, a in accs.items()))
            t_last, iter_last = time.time(), iter_num   # the eval's time is not training time
            best_val_loss = min(best_val_loss, val_loss)
            if always_save_checkpoint or val_loss <= best_val_loss:
                checkpoint()
        if iter_num >= max_iters:
            break

        lr = get_lr(iter_num, cfg)
        for group in optimizer.param_groups:
            group['lr'] = lr
        # one global batch per step, drawn from the same generator on every process
        rows = torch.randint(n_train_rows, (gradient_accumulation_steps * batch_size,), generator=batch_gen).tolist()
        loss_sum = 0.0
        for micro in range(micro_steps):
            k = rank * micro_steps + micro                               # this process's share
            x, y = rows_to_batch(data['train'], rows[k * batch_size:(k + 1) * batch_size], block_size, loss_on, device)
            if ddp:  # sync gradients on the last micro-step only
                model.require_backward_grad_sync = micro == micro_steps - 1
            with ctx:
                _, loss = model(x, y)
            head_fraction = (y != -1).float().mean().item()   # the share of positions the LM head sees
            (loss / micro_steps).backward()
            loss_sum += loss.item()
        loss_f = loss_sum / micro_steps
        if ddp:  # log the global mean loss, not rank 0's share
            t = torch.tensor([loss_f], device=device)
            dist.all_reduce(t)
            loss_f = t.item() / world_size
        if not math.isfinite(loss_f):      # before the step: the weights stay as they were
            diverged(f"loss is {loss_f} at iter {iter_num}")
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        iter_num += 1

        if iter_num % log_interval == 0 and master:
            t_now = time.time()
            dt = (t_now - t_last) / (iter_num - iter_last)
            t_last, iter_last = t_now, iter_num
            tokens_per_sec = tokens_per_iter / dt
            mfu = raw_model.estimate_mfu(tokens_per_iter // world_size, dt, peak_flops, head_fraction) if peak_flops else 0.0
            eta = (max_iters - iter_num) * dt
            print(f"iter {iter_num}/{max_iters}: loss {loss_f:.4f}, lr {lr:.2e}, {dt * 1000:.0f} ms/iter, "
                  f"{tokens_per_sec:,.0f} tok/s" + (f", mfu {mfu * 100:.1f}%" if peak_flops else "")
                  + f", eta {eta / 60:.1f} min")

    if master:
        print(f"done: {iter_num} iters in {(time.time() - t_start) / 60:.1f} min; checkpoint {ckpt_path}")
        if iter_num == max_iters and not (resumed and iter_num == start_iter):
            print(f"{eval_task} accuracy by length ({eval_samples} held-out examples each; trained at {block_size}):")
            for m, a in accs.items():
                print(f"  {m * block_size:>7} tokens ({m:>2}x): {fmt(a)}")
    if ddp:  # leave together: a gloo rank that tears down while its peer still works can abort
        dist.barrier()
        dist.destroy_process_group()
