"""
Does a committed study reproduce on this machine? Retrain k of its committed seeds of one arm with the
study's own settings, evaluate them as the study did, and compare each with what it committed:

    python ablate.py config/<study>.py --reproduce=2                 # its control, its first 2 seeds
    python ablate.py config/<study>.py --reproduce=3 --arms=vpad

Per seed: the retrained area against the committed one, within the arm's min-max or not, and equal bit for
bit or not: equal on the same code, CPU kernels, torch and thread count (the committed record's provenance says
where it trained; a record whose CPU ran other kernels than this one's, or names none, is said so), drifting on
another CPU. Studies of trunks (hours a seed) are refused. The retrained runs go to
out/reproduce/<study>/<arm>/seed<k> and are kept: a rerun continues or reuses them.
"""

import os
import shlex
import shutil

from base import rundir
from study import files
from study.derive import area_and_range
from study.evals import final_evals, samples_of
from study.outcomes import machine_of
from study.runs import command, prepare_data, run_process, state, trainer_env

OUT = os.path.join('out', 'reproduce')
THREADS = 1                       # torch threads per run: the studies' (--workers=2 on 2 cores)


def reproduce(grid):
    """Retrain the first `reproduce` committed seeds of one arm (the one --arms names, else the control) and print
    how each compares; the line a Ctrl-C ends it with names the command that continues it."""
    import torch
    cfg, runs = grid.cfg, grid.runs
    arms = sorted({r.arm for r in runs if r.selected})
    arm = arms[0] if len(arms) == 1 else cfg['control'] if len(arms) == len(cfg['arms']) else None
    if not arm:
        raise SystemExit("config error: --reproduce retrains one arm: name it with --arms=<arm>")
    if any(r.point is not None for r in runs):
        raise SystemExit("config error: --reproduce: this study trains trunks with cooldown branches (hours a seed): "
                         "reproduce a study of plain runs (no snapshots_after_fit or snapshots_at_iter)")
    path = os.path.join(cfg['results_dir'] or cfg['grid_dir'], files.RESULTS)
    if not os.path.isfile(path):
        raise SystemExit(f"{path} is missing: --reproduce compares with a study's committed results "
                         f"(git checkout -- {path})")
    entry = files.read_json(path, f"restore it: git checkout -- {path}")['arms'].get(arm, {})
    task = cfg['extrap_task'] or next(iter(entry.get('tasks', {})), None)
    committed = {}                          # seed -> its committed {multiple: accuracy}, fit or not
    for m, p in entry.get('tasks', {}).get(task, {}).items():
        for s, a in p['per_seed'].items():
            committed.setdefault(int(s), {})[int(m)] = a
    areas = {s: area_and_range(c, cfg['range_threshold'])[0] for s, c in committed.items()}
    if not areas:
        raise SystemExit(f"{path} has no committed eval of arm {arm!r}")
    picked = sorted(areas)[:cfg['reproduce']]
    lo, hi = min(areas.values()), max(areas.values())
    study = os.path.basename(os.path.dirname(path))
    print(f"{study} arm {arm}: committed area ({task}) over {len(areas)} seeds {lo:.3f}..{hi:.3f}; retraining seed(s) "
          f"{', '.join(map(str, picked))} here ({THREADS} thread(s) each)")
    here = rundir.provenance()
    rows, notes, now = [], [], []
    rerun = shlex.join(['python', 'ablate.py', *grid.argv])
    rundir.exit_on_signals(lambda: f"retraining {arm} seed {now[-1]} stopped at its last checkpoint; rerun {rerun} "
                                   f"to continue it" if now else None)
    mine = [r for r in runs if r.arm == arm and r.seed in picked]
    prepare_data([r for r in runs if r.arm == arm])
    for run in mine:
        now.append(run.seed)
        run.dir = os.path.join(OUT, study, run.arm, f'seed{run.seed}')
        run.argv = [a for a in run.argv if not a.startswith(('--out_dir=', '--init_from='))] + [f'--out_dir={run.dir}']
        run.cfg = dict(run.cfg, out_dir=run.dir)
        run.state = state(run)
        if run.state != 'done':
            if run.state == 'new' and os.path.isdir(run.dir):
                shutil.rmtree(run.dir)            # a start that died before its first checkpoint
            os.makedirs(run.dir, exist_ok=True)
            print(f"[seed {run.seed}] training -> {run.dir}/{files.TRAIN_LOG}")
            code = run_process(command(run, run.state == 'partial'), run.dir, trainer_env(THREADS))
            if code or state(run) != 'done':
                raise SystemExit(f"[seed {run.seed}] training failed: see {run.dir}/{files.TRAIN_LOG}; rerun this "
                                 f"command to continue it")
            run.state = 'done'
        torch.set_num_threads(THREADS)
        final_evals([run], grid.lists.multiples, samples_of(cfg), mismatch=False)
        rundir.stop_if_asked()              # (an exit torch swallowed inside the eval)
        curve = {int(m[:-1]): a for m, a in run.eval['length_eval'][task].items()}
        area, _ = area_and_range(curve, cfg['range_threshold'])
        theirs = committed[run.seed]
        record = os.path.join(cfg['results_dir'], files.RECORDS, run.arm, f'seed{run.seed}.json')
        provenance = None                   # the record's, {} where it has none; None: the study kept no record
        if os.path.isfile(record):
            provenance = files.read_json(record, 'restore it').get('provenance') or {}
        there = machine_of(provenance) if provenance is not None else 'unknown (the study kept no run record)'
        notes += [f"seed {run.seed}: {note}" for note in [kernels(provenance, here)] if note]
        equal = all(curve.get(m) == a for m, a in theirs.items() if a is not None)
        gap = max(abs(curve[m] - a) for m, a in theirs.items() if a is not None and m in curve)
        rows.append((run.seed, area, areas[run.seed], lo <= area <= hi, equal, gap, there))
    print(f"\nthis machine: {machine_of({'train': [here]})}, CPU capability {here['cpu_capability']}")
    print(f"{'seed':>4} {'area here':>10} {'committed':>10} {'in arm range':>13} {'bit for bit':>12} "
          f"{'largest gap':>12}  committed on")
    for seed, area, theirs, inside, equal, gap, there in rows:
        print(f"{seed:>4} {area:>10.3f} {theirs:>10.3f} {'yes' if inside else 'NO':>13} "
              f"{'equal' if equal else 'differs':>12} {gap:>12.3f}  {there}")
    for note in notes:
        print(f"note: {note}")


def kernels(provenance, here):
    """Where a committed record's CPU capability (the instruction set torch picks its CPU kernels by: AVX2,
    AVX512, ...) is not this machine's, or where it does not name one, the sentence that says so; else None.
    provenance: the record's ({'train': [each process's rundir.provenance()]}), None where it has none."""
    ran = sorted({p.get('cpu_capability') or 'not named' for p in (provenance or {}).get('train') or [{}]})
    if provenance is None or ran == [here['cpu_capability']]:       # (no record: the table says so)
        return None
    if 'not named' in ran:
        return (f"its record does not name the CPU capability it trained with (recorded before records kept it), so "
                f"whether torch ran this machine's kernels ({here['cpu_capability']}) is not known")
    return (f"it trained with CPU capability {', '.join(ran)}, this machine has {here['cpu_capability']}: torch runs "
            f"other CPU kernels here, so its numbers may differ in their last bits and grow apart from there")
