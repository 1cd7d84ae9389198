"""
A training run's processes: one, or one per device under DDP (torchrun: nccl on GPUs, gloo on CPUs). Each
knows its device, its precision and its share of a step's rows, and the few things the processes agree
on: a sum over them, rank 0's value, every process's value.
"""

import os
from contextlib import nullcontext
from datetime import timedelta
from typing import NamedTuple

import torch
import torch.distributed as dist

from base import rundir


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
    micro_rows: int     # rows per micro-batch; the last takes what is left of rank_rows
    micro_steps: int

    def autocast(self):
        bf16 = self.dtype == 'bfloat16'
        return torch.autocast(self.device.split(':')[0], dtype=torch.bfloat16) if bf16 else nullcontext()

    def describe(self, T):
        """A step's tokens and how its rows split, as they do: a process's last micro-batch takes what
        is left of its rows."""
        last = self.rank_rows - (self.micro_steps - 1) * self.micro_rows
        return (f"tokens per iteration: {self.step_rows * T:,} ({self.world_size} process(es) x "
                f"{self.micro_steps} micro-steps x {self.micro_rows} rows"
                f"{'' if last == self.micro_rows else f' ({last} in the last)'} x {T} tokens); "
                f"device {self.device}, {self.dtype}")

    def total(self, x):
        """x summed over the processes, in float64: as one process sums it."""
        if not self.ddp:
            return x
        t = torch.tensor([x], device=self.device, dtype=torch.float64)
        dist.all_reduce(t)
        return t.item()

    def rank0s(self, n):
        """Rank 0's n (an int >= 0, or None) on every process."""
        if not self.ddp:
            return n
        t = torch.tensor([-1 if n is None else n], device=self.device)
        dist.broadcast(t, 0)
        return None if t.item() < 0 else int(t.item())

    def everyones(self, x):
        """[x of rank 0, x of rank 1, ...] on every process (x: picklable)."""
        if not self.ddp:
            return [x]
        everyone = [None] * self.world_size
        dist.all_gather_object(everyone, x)
        return everyone


def setup_processes(cfg):
    """DDP: one process per device, launched by torchrun (else one process), each taking its share of
    a step's batch_size x gradient_accumulation_steps rows in micro-batches of batch_size. -> Procs"""
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
                 -(-rank_rows // micro_rows))


def leave_together():
    """The end of a DDP process's run: every rank finishes before any tears down (a gloo rank that tears down
    while its peer works can abort), then the process leaves without the interpreter's C++ teardown, where
    gloo's threads still abort about one exit in twenty on a 2-core CPU (SIGABRT, no Python frame, after a run
    that finished and wrote everything), failing the launch (rundir.leave does what matters of it first)."""
    dist.barrier()
    dist.destroy_process_group()
    rundir.leave(0)
