"""
The final eval and the train-vs-eval mismatch of every finished run, each computed once and cached in the run
dir for the settings and checkpoint that made it: in a process of its own (`python -m study.evals SPEC`), in
a worker slot of the local pool or at the end of a run's cluster job; the summary reads the caches.
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import contextlib
import io
import json
import os
import sys

import torch

import eval_lengths
import sample_data
from base import rundir
from tools.mismatch import dropout_mismatch
from study import files
from study.runs import GridRun, accuracies_wrong, tag


def entry_wrong(name, entry):
    """What is wrong with a cached or recorded eval or mismatch (`name`: its cache), {'key': {...}, 'record':
    {...}}, or None: an eval's accuracies are numbers in [0, 1], a mismatch's values numbers (or None where no
    layer is reached)."""
    if not (isinstance(entry, dict) and isinstance(entry.get('key'), dict) and isinstance(entry.get('record'), dict)
            and entry['record']):
        return f"a {type(entry).__name__} without its key and a record"
    record = entry['record']
    if name.startswith(files.EVAL_CACHE[:-len('.json')]):          # ablate_eval.json, ablate_eval_<variant>.json
        return accuracies_wrong(record.get('length_eval')) if isinstance(record.get('block_size'), int) else \
            "it has no block_size"
    if name == files.MISMATCH_CACHE:
        bad = [k for k, v in record.items() if not (v is None or isinstance(v, (int, float))
                                                     and not isinstance(v, bool))]
        return f"its {bad[0]!r} is not a number" if bad else None
    return None


def cached(run, name, key, compute):
    """compute() once per run and key, kept in the run dir as `name` (a checkpoint newer than it, other settings
    or a damaged cache compute it again); compute=None only reads what an eval job cached: None if absent."""
    path = os.path.join(run.dir, name)
    if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(os.path.join(run.dir, rundir.CKPT)):
        try:
            with open(path) as f:
                saved = json.load(f)
            why = entry_wrong(name, saved)
            if why:
                raise ValueError(why)
        except (ValueError, OSError) as e:        # cut short by a full disk, or edited: never trusted
            print(f"{tag(run)} {path} is damaged ({rundir.first_line(e)}): "
                  + ("computing it again" if compute else "waiting for its eval job to write it again"))
            saved = {}
        same = (lambda k: k) if compute else (  # noqa: E731
            lambda k: {a: v for a, v in (k or {}).items() if a != 'device'})
        if saved and same(saved['key']) == same(key):
            return saved['record']
    if compute is None:
        return None
    record = compute()
    with rundir.writing(path, f"the cached {name}", "rerun this command"):
        rundir.write_atomic(path, json.dumps({'key': key, 'record': record}, indent=1).encode())
    return record


def samples_of(cfg):
    """A study's examples a point in its final eval: eval_samples, or (eval_samples, eval_samples_long) where the
    points past eval_lengths.LONG x have their own count (in the eval key only then: the caches before it stay)."""
    return (cfg['eval_samples'], cfg['eval_samples_long']) if cfg['eval_samples_long'] else cfg['eval_samples']


def samples_per_point(ev):
    """A summary's held-out examples at each evaluated multiple (its 'eval', as eval_lengths drew them)."""
    return [eval_lengths.examples_at(m, ev['eval_samples'], ev.get('eval_samples_long')) for m in ev['multiples']]


def examples(results):
    """'100 held-out examples' a point, or '100 held-out examples to 64x and 32 past it'."""
    n = results['eval']['eval_samples']
    past = {k for k in samples_per_point(results['eval']) if k != n}
    return f"{n} held-out examples" + (f" to {eval_lengths.LONG}x and {past.pop()} past it" if past else '')


def eval_key(run, mults, n, device, variant=''):
    """What makes a final eval: a cached one with another key is computed again. The plain eval's key
    has no 'variant', as the committed caches and records have none."""
    # ('num_samples' is eval_samples, under the name every committed cache and record keys it by)
    calibrated = variant and eval_lengths.calibration(variant)
    return {'multiples': mults, 'num_samples': list(n) if isinstance(n, tuple) else n, 'tasks': run.tasks,
            'iter': run.cfg['max_iters'], 'seed': 0,
            'device': device.split(':')[0], 'record': 'length_eval', **({'variant': variant} if variant else {}),
            **({'calibration': {'examples': eval_lengths.CALIBRATION_EXAMPLES,
                                'grid': list(eval_lengths.SSM_GRIDS[eval_lengths.parse_variant(variant).ssm])}}
               if calibrated else {})}


def variants_of(run, variants):
    """The length-scaling variants a finished run is evaluated under besides the plain eval: all of them,
    but for a trunk of cooldown branches (its own eval is its uncooled model: plain only)."""
    return () if run.point == 'trunk' else tuple(variants)


def evaluated(run, variants):
    """Whether a finished run has every eval the summary reads: plain, each variant, the mismatch."""
    return (run.eval is not None and run.mismatch is not None
            and all(v in run.evals for v in variants_of(run, variants)))


def final_evals(runs, mults, n, compute=True, variants=(), mismatch=True):
    """The final eval of every finished run, plain and under each variant, and its train-vs-eval mismatch
    (mismatch=False: not, for --reproduce), each cached in its dir; compute=False only reads what eval processes
    and jobs cached. n: examples a point, or (eval_samples, eval_samples_long) (samples_of)."""
    for run in runs:
        if run.state != 'done' or run.recorded:
            continue
        tasks = run.tasks                            # the run's eval_tasks, or the tasks it trained on
        device = rundir.pick_device(run.cfg['device'])
        for variant in ('', *variants_of(run, variants)):
            def final_eval(variant=variant):
                print(f"{tag(run)} final eval{' under ' + variant if variant else ''}: {n} examples per task and "
                      f"length")
                n_short, n_long = n if isinstance(n, (list, tuple)) else (n, 0)   # (eval_samples, eval_samples_long)
                with contextlib.redirect_stdout(io.StringIO()):          # the model summary line, for every run
                    return eval_lengths.evaluate_run(run.dir, tasks, mults, n_short, run.cfg['eval_batch_size'],
                                                     device, variant=variant, n_long=n_long)
            record = cached(run, files.eval_cache(variant), eval_key(run, mults, n, device, variant),
                            final_eval if compute else None)
            if record is not None and variant:     # a new dict: a branch planned as a copy of its trunk shares its
                run.evals = {**run.evals, variant: record}                                      # planned one
            elif record is not None:
                run.eval = record
        if mismatch:
            record = cached(run, files.MISMATCH_CACHE, mismatch_key(run),
                            (lambda run=run: measure_mismatch(run)) if compute else None)
            if record is not None:
                run.mismatch = record


MISMATCH = ('token_shift', 'mean_shift', 'var_ratio', 'pre_act_token_shift', 'pre_act_mean_shift', 'pre_act_var_ratio',
            'token_floor')
MISMATCH_ROWS = 16   # validation rows per run for the mismatch; in its cache key (it fixes the rows for a corpus)
MISMATCH_MASKS = 32  # training-mode passes per run; their noise floor is measured and subtracted
                     # (mismatch.dropout_mismatch)


def mismatch_key(run):
    return {'iter': run.cfg['max_iters'], 'max_rows': MISMATCH_ROWS, 'masks': MISMATCH_MASKS,
            'measure': 'per token and batch, floor subtracted'}


def measure_mismatch(run):
    """Train-vs-eval mismatch of a finished run at its own dropout site (tools.mismatch on MISMATCH_ROWS
    validation rows), the mean over the linear layers its noise reaches (None: none); final_evals caches it."""
    T = run.cfg['block_size']
    ids, _ = sample_data.load_split(run.cfg['data_dir'], 'val')      # read only here: a cached run needs no data
    # idx: (<= MISMATCH_ROWS, T)
    idx = torch.from_numpy(ids[:min(MISMATCH_ROWS, len(ids) // T) * T].astype('int64')).view(-1, T)
    with contextlib.redirect_stdout(io.StringIO()):
        model, _, _ = eval_lengths.load_run(run.dir, 'cpu')
    rows = [r for r in dropout_mismatch(model, idx, n_masks=MISMATCH_MASKS) if r['reached']]
    return {'layers': len(rows), **{k: sum(r[k] for r in rows) / len(rows) if rows else None for k in MISMATCH}}


# -----------------------------------------------------------------------------
# the final eval in a process of its own: the local pool runs it in the run's worker slot after its trainer (so
# that `workers` processes stay busy), a cluster job at its end, with a trainer's thread count (an eval's numbers
# depend on it: the same count gives the same numbers as the same eval in this process)

def eval_command(run, mults, n, variants):
    """The command that computes a finished run's evals and mismatch into its dir's caches."""
    spec = {'run': {k: getattr(run, k) for k in ('arm', 'seed', 'dir', 'argv', 'cfg', 'tasks', 'point', 'trunk')},
            'multiples': mults, 'eval_samples': n, 'variants': list(variants)}
    return [sys.executable, '-m', 'study.evals', json.dumps(spec)]


def main(argv):
    if len(argv) != 1 or argv[0] in ('-h', '--help'):
        raise SystemExit("usage: python -m study.evals SPEC (ablate.py writes it: the run, its multiples, "
                         "eval_samples and variants, as JSON)")
    try:
        spec = json.loads(argv[0])
        run = GridRun(**spec['run'], selected=True, state='done')
        mults, n, variants = spec['multiples'], spec['eval_samples'], spec['variants']
    except (ValueError, TypeError, KeyError) as e:
        raise SystemExit(f"study.evals: not a spec ablate.py wrote ({type(e).__name__}: {rundir.first_line(e)})")
    final_evals([run], mults, n, variants=variants)


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
