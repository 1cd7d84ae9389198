"""
Does a committed study reproduce on this machine? Retrain k of its committed seeds of one arm with
the study's own settings, evaluate them as the study did, and compare each with what it committed:

    python -m study.reproduce                                   # study_sites_sensitive, arm none, 2 seeds
    python -m study.reproduce --study=study_sites_sensitive --arm=vpad --seeds=3

Per seed: the retrained area against the committed one, whether it lies within the committed arm's
min-max over its seeds, and whether the eval is equal bit for bit. A run is deterministic for the same
code, CPU model, torch and thread count (one thread, as the studies train at --workers=2 on 2 cores):
there bit-for-bit equality is expected; on another CPU the floating-point order differs, a run drifts,
and per-seed values differ while the arm's statistics agree within their intervals. The committed
record's provenance (where the study kept one) says which case this is; else it is 'unknown'. Studies
of trunks with cooldown branches are refused (a seed is hours of training there).
"""

import contextlib
import io
import os
import shutil
import subprocess
import sys

import eval_lengths
import rundir
from configurator import configure, settings_of
from study.evals import evaluate
from study.outcomes import area_and_range, machine_of
from study.runs import command, state, trainer_env

# -----------------------------------------------------------------------------
study = 'study_sites_sensitive'   # a study config in config/ whose results/<study>/results.json is committed
arm = 'none'                      # the arm whose seeds are retrained
seeds = 2                         # how many of its committed seeds, the first ones
out_dir = 'out/reproduce'         # the retrained runs go to out_dir/<study>/<arm>/seed<k> (kept: a rerun reuses them)
threads = 1                       # torch threads per run: the studies' (--workers=2 on 2 cores)
# -----------------------------------------------------------------------------


def committed(study_cfg):
    """The study's committed results.json (in its results_dir)."""
    path = os.path.join(study_cfg['results_dir'] or study_cfg['grid_dir'], rundir.RESULTS)
    if not os.path.isfile(path):
        raise SystemExit(f"{path} is missing: results/ holds the committed studies (git checkout -- {path})")
    return rundir.read_json(path, f"restore it: git checkout -- {path}")


def main(argv):
    import ablate                          # its planner: the exact settings of each run of the study
    import train
    cfg = configure(settings_of(globals()), argv)
    if cfg['seeds'] < 1 or cfg['threads'] < 1:
        raise SystemExit("config error: seeds and threads must be positive")
    path = os.path.join(ablate.STUDY_CONFIGS, cfg['study'] + '.py')
    if not os.path.isfile(path):
        raise SystemExit(f"config error: no study config {path}; give --study=<name of a config/study_*.py>")
    with contextlib.redirect_stdout(io.StringIO()):
        study_cfg = configure(ablate.study_settings(), [path])
    if cfg['arm'] not in study_cfg['arms']:
        raise SystemExit(f"config error: {cfg['study']} has no arm {cfg['arm']!r} (its arms: "
                         f"{', '.join(study_cfg['arms'])})")
    with contextlib.redirect_stdout(io.StringIO()):
        runs = ablate.plan(study_cfg, [], [cfg['arm']], settings_of(vars(train)))
    if any(r.point is not None for r in runs):
        raise SystemExit(f"config error: {cfg['study']} trains trunks with cooldown branches (hours a seed): "
                         f"reproduce a study of plain runs, e.g. --study=study_sites_sensitive")
    res = committed(study_cfg)
    entry = res['arms'].get(cfg['arm'], {})
    areas = {int(s): a for s, a in entry.get('area', {}).get('per_seed', {}).items()}
    if not areas:
        raise SystemExit(f"{cfg['study']}'s results.json has no committed area of arm {cfg['arm']!r}")
    picked = sorted(areas)[:cfg['seeds']]
    mults = eval_lengths.parse_multiples('multiples', study_cfg['multiples'])
    lo, hi = min(areas.values()), max(areas.values())
    print(f"{cfg['study']} arm {cfg['arm']}: committed area over {len(areas)} seeds {lo:.3f}..{hi:.3f}; retraining "
          f"seed(s) {', '.join(map(str, picked))} here ({cfg['threads']} thread(s) each)")
    here = machine_of({'train': [rundir.provenance()]})
    rows = []
    for run in [r for r in runs if r.arm == cfg['arm'] and r.seed in picked]:
        run.dir = os.path.join(cfg['out_dir'], cfg['study'], run.arm, f'seed{run.seed}')
        run.argv = [a for a in run.argv if not a.startswith(('--out_dir=', '--init_from='))] + [f'--out_dir={run.dir}']
        run.cfg = dict(run.cfg, out_dir=run.dir)
        run.state = state(run)
        if run.state != 'done':
            if run.state == 'new' and os.path.isdir(run.dir):
                shutil.rmtree(run.dir)            # a start that died before its first checkpoint
            os.makedirs(run.dir, exist_ok=True)
            print(f"[seed {run.seed}] training -> {run.dir}/{rundir.TRAIN_LOG}")
            with open(os.path.join(run.dir, rundir.TRAIN_LOG), 'a') as log:
                done = subprocess.run(command(run, run.state == 'partial'), stdout=log, stderr=subprocess.STDOUT,
                                      env=trainer_env(cfg['threads']))
            if done.returncode or state(run) != 'done':
                raise SystemExit(f"[seed {run.seed}] training failed: see {run.dir}/{rundir.TRAIN_LOG}; rerun this "
                                 f"command to continue it")
            run.state = 'done'
        import torch
        torch.set_num_threads(cfg['threads'])
        evaluate([run], mults, study_cfg['eval_samples'])
        task = study_cfg['extrap_task'] or run.tasks[0]
        curve = {int(m[:-1]): a for m, a in run.eval['length_eval'][task].items()}
        area, _ = area_and_range(curve, study_cfg['range_threshold'])
        theirs = {int(m): p['per_seed'].get(str(run.seed)) for m, p in entry['tasks'].get(task, {}).items()}
        record = os.path.join(study_cfg['results_dir'], rundir.RECORDS, run.arm, f'seed{run.seed}.json')
        there = (machine_of(rundir.read_json(record, 'restore it').get('provenance') or {})
                 if os.path.isfile(record) else 'unknown (the study kept no run record)')
        same_machine = there.split(' (')[0] == here
        equal = all(curve.get(m) == a for m, a in theirs.items() if a is not None)
        diff = max(abs(curve[m] - a) for m, a in theirs.items() if a is not None and m in curve)
        rows.append((run.seed, area, areas[run.seed], lo <= area <= hi, equal, diff, there, same_machine))
    print(f"\nthis machine: {here}")
    print(f"{'seed':>4} {'area here':>10} {'committed':>10} {'in arm range':>13} {'bit for bit':>12} "
          f"{'largest gap':>12}  committed on")
    for seed, area, theirs, inside, equal, diff, there, same in rows:
        expect = '' if equal else (' (expected: the same machine)' if same else '')
        print(f"{seed:>4} {area:>10.3f} {theirs:>10.3f} {'yes' if inside else 'NO':>13} "
              f"{'equal' if equal else 'differs' + expect:>12} {diff:>12.3f}  {there}")


if __name__ == '__main__':
    main(sys.argv[1:])
