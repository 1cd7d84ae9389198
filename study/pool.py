"""
The local launcher: a grid's runs trained here, `workers` at a time, by a thread pool whose each task runs one
run's processes in its run dir to their end: its trainer (train.py, its output in train.log), then its final
eval (python -m study.evals, eval.log) where the evals are computed here; a finished run not evaluated yet, its
eval alone, first. Each run dir is locked while its task runs (the trainer is handed the lock): a run another
process holds is skipped. The processes end with this one: stopped if it is interrupted (SIGTERM, which each
answers with its last checkpoint), and by their parent-death signal if it is killed.
"""

import concurrent.futures
import os
import threading
import time

from base import rundir
from study import files
from study.runs import (command, last_progress, lost, no_snapshots, ready, rebuild_command, run_process,
                        state, stop_processes, tag, tail, to_train, trainer_env)


def train_here(runs, workers, then, standing, eval_command=None, finished=lambda runs: None, unevaluated=()):
    """Train the selected runs not finished, and evaluate them (eval_command(run): the command of its final eval,
    given where the evals are computed here), the finished `unevaluated` ones first; finished([run]) as each run's
    task ends with it done (and evaluated). then: how to go on after a disk error; standing(n): the line a
    SIGINT or SIGTERM ends this process with, n processes stopping. -> the runs that failed"""
    pending, trunks = to_train(runs), {r.dir: r for r in runs if r.point == 'trunk'}
    to_eval = [r for r in unevaluated if eval_command and r.selected and r.state == 'done' and not r.recorded]
    # the cores split over the workers, unless OMP_NUM_THREADS says how many (on cores other jobs share)
    threads = int(os.environ.get('OMP_NUM_THREADS') or 0) or max(1, (os.cpu_count() or 1) // workers)
    env, running, failed = trainer_env(threads), {}, []
    procs, guard, stopping = {}, threading.Lock(), threading.Event()    # the processes now running, for the stop
    n_runs, n_done = sum(r.selected for r in runs), sum(r.selected and r.state == 'done' for r in runs)
    rundir.exit_on_signals(lambda: standing(sum(proc.poll() is None for proc in list(procs.values()))))
    print(f"grid: {n_runs} runs, {n_done} finished, {len(pending)} to train, {workers} at a time "
          f"({threads} thread(s) each)")

    def started(run, proc):       # a process started after the stop began is stopped at once
        with guard:
            procs[run.dir] = proc
            if stopping.is_set():
                proc.terminate()

    def task(run, lock, train):
        """In a worker's thread: the run's trainer (train), then its eval once it is done. -> [(log, exit code,
        minutes)] of each process it ran"""
        steps, out = ([(command(run, run.state == 'partial'), files.TRAIN_LOG)] if train else []), []
        steps += [(eval_command(run), files.EVAL_LOG)] if eval_command else []
        for cmd, log in steps:
            t0 = time.time()
            handed, fds = lock.child() if log == files.TRAIN_LOG else ({}, ())
            code = run_process(cmd, run.dir, env | handed, log, lambda proc: started(run, proc), pass_fds=fds)
            procs.pop(run.dir, None)
            out.append((log, code, (time.time() - t0) / 60))
            if log == files.TRAIN_LOG and (code or state(run) != 'done'):
                break
            run.state = 'done'
        return out

    def start(run, train):
        """The run's task submitted with its dir locked, unless another process holds it or (train) finished it
        since the grid was planned."""
        nonlocal n_done
        with rundir.writing(os.path.join(run.dir, rundir.LOCK), 'the lock file', then):
            try:
                lock = rundir.DirLock(run.dir)
            except rundir.Held as e:
                print(f"{tag(run)} {'skipped' if train else 'not evaluated'}: {run.dir} is in use by {e}; rerun "
                      f"this command once it has ended")
                return
        run.state = state(run) if train else run.state      # (another process may have trained it meanwhile)
        if train and run.state == 'done':
            lock.release()
            print(f"{tag(run)} finished meanwhile by another process")
            n_done += 1
            to_eval.extend([run] if eval_command else [])
            return
        for log in [files.TRAIN_LOG] * train + [files.EVAL_LOG] * bool(eval_command):   # a full disk: one line,
            with rundir.writing(os.path.join(run.dir, log), 'the log', then):              # before a process starts
                open(os.path.join(run.dir, log), 'a').close()
        if train:
            print(f"{tag(run)} {'resuming' if run.state == 'partial' else 'starting'} -> {run.dir}/{files.TRAIN_LOG}")
        running[pool.submit(task, run, lock, train)] = run, lock

    def ended(run, lock, steps):
        """A task's processes said, as each ended; a trunk that never fit strands its branches."""
        nonlocal n_done, pending
        lock.release()
        for log, code, minutes in steps:
            if log == files.EVAL_LOG and not code:
                print(f"{tag(run)} evaluated in {minutes:.1f} min")
            elif not code and run.state == 'done':
                n_done += 1
                print(f"{tag(run)} done in {minutes:.1f} min")
                if run.point == 'trunk' and no_snapshots(run):       # no snapshot: its branches never train
                    print(f"{tag(run)} never fit: its cooldown branches are never fit too, and never train")
                    pending = [r for r in pending if r.trunk != run.dir]
            else:
                failed.append(run)
                print(f"{tag(run)} {'eval ' * (log == files.EVAL_LOG)}FAILED after {minutes:.1f} min: "
                      f"{tail(run.dir, log)}")
        if run not in failed and run.state == 'done':
            finished([run])

    t0 = last_status = last = time.time()
    short = 0.0                                        # seconds with fewer than `workers` processes busy
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        try:
            while True:
                while len(running) < workers and (to_eval or any(ready(r) for r in pending)):
                    if to_eval:                     # evals first: a finished run's record is written sooner
                        start(to_eval.pop(0), train=False)
                    else:
                        run = next(r for r in pending if ready(r))
                        pending.remove(run)
                        start(run, train=True)
                if not running:
                    break
                done, _ = concurrent.futures.wait(running, timeout=60, return_when=concurrent.futures.FIRST_COMPLETED)
                now = time.time()
                short, last = short + (now - last) * (len(running) < workers), now
                for future in done:
                    ended(*running.pop(future), future.result())
                    print(f"grid: {n_done}/{n_runs} done, {len(running)} running, {len(to_eval)} to evaluate, "
                          f"{len(pending)} waiting, {len(failed)} failed; {(now - t0) / 60:.1f} min so far")
                if running and now - last_status > 60:
                    last_status = now
                    print("  " + "; ".join(f"{tag(r)[1:-1]}: {last_progress(r)}" for r, _ in running.values()))
        finally:
            with guard:
                stopping.set()
                live = list(procs.values())
            stop_processes(live)
    for run in pending:       # branches whose trunk did not finish here, or whose snapshot is gone
        print(f"{tag(run)} its snapshot is gone: rebuild it with `{rebuild_command(run)}`, then rerun this command"
              if lost(run, trunks) else f"{tag(run)} not trained: its trunk ({run.trunk}) has not finished (it "
              f"failed, or another process holds it); rerun this command")
    wall = time.time() - t0
    if wall > 1:
        print(f"grid: {wall / 60:.1f} min, fewer than {workers} process(es) busy {short / wall:.0%} of it")
    return failed
