"""
The final eval and the train-vs-eval mismatch of every finished run, each computed once and cached in the run
dir for the settings and checkpoint that made it: by ablate.py in a process of its own in a worker slot
(`python -m study.evals SPEC`), or by an eval job; the summary reads the caches. A study's own grid also keeps a
record of each finished run (results_dir/runs/<arm>/seed<k>.json), committed: a grid whose run dirs are gone
counts those runs as done and trains only the rest.
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
from study.runs import Run, accuracies_wrong, differing, fit_by_then, log_wrong, tag


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


def eval_key(run, mults, n, device, variant=''):
    """What makes a final eval: a cached one with another key is computed again. The plain eval's key
    has no 'variant' (as before variants existed: its committed caches and records stay valid)."""
    # (the key's 'num_samples' is eval_samples under its first name: renaming it would recompute every cache)
    calibrated = variant and eval_lengths.calibration(variant)
    return {'multiples': mults, 'num_samples': list(n) if isinstance(n, tuple) else n, 'tasks': run.tasks, 'iter': run.cfg['max_iters'], 'seed': 0,
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


def evaluate(runs, mults, n, compute=True, variants=(), mismatch=True):
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
    validation rows), the mean over the linear layers its noise reaches (None: none); evaluate caches it."""
    T = run.cfg['block_size']
    ids, _ = sample_data.load_split(run.cfg['data_dir'], 'val')      # read only here: a cached run needs no data
    # idx: (<= MISMATCH_ROWS, T)
    idx = torch.from_numpy(ids[:min(MISMATCH_ROWS, len(ids) // T) * T].astype('int64')).view(-1, T)
    with contextlib.redirect_stdout(io.StringIO()):
        model, _, _ = eval_lengths.load_run(run.dir, 'cpu')
    rows = [r for r in dropout_mismatch(model, idx, n_masks=MISMATCH_MASKS) if r['reached']]
    return {'layers': len(rows), **{k: sum(r[k] for r in rows) / len(rows) if rows else None for k in MISMATCH}}


# -----------------------------------------------------------------------------
# the final eval in a process of its own: ablate.py runs it in a worker slot, so that `workers` processes
# stay busy while finished runs are evaluated, with a trainer's thread count (the numbers of an eval
# depend on it: the same count gives the same numbers as the eval in ablate.py's process gave)

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
        run = Run(**spec['run'], selected=True, state='done')
        mults, n, variants = spec['multiples'], spec['eval_samples'], spec['variants']
    except (ValueError, TypeError, KeyError) as e:
        raise SystemExit(f"study.evals: not a spec ablate.py wrote ({type(e).__name__}: {rundir.first_line(e)})")
    evaluate([run], mults, n, variants=variants)


# -----------------------------------------------------------------------------
# the committed record of a study's finished runs



def record_path(records, grid_dir, run):
    """results_dir/runs/<arm>/seed<k>.json; a cooldown branch's: .../seed<k>/cooldown<j>.json."""
    return os.path.join(records, os.path.relpath(run.dir, grid_dir) + '.json')


def provenance_of(run):
    """What made a finished run's numbers: {'train': each process's rundir.provenance() its log records, 'eval':
    its plain eval's}; a committed record's own where it has one."""
    if run.provenance is not None:
        return run.provenance
    train = []
    for r in run.records or []:
        if isinstance(r.get('provenance'), dict) and r['provenance'] not in train:
            train.append(r['provenance'])
    return {'train': train, 'eval': (run.eval or {}).get('provenance')}


def save_records(runs, records, grid_dir, variants=()):
    """The record of every run of this study done and evaluated, as it finishes: its settings, log records,
    evals and mismatch with their keys, provenance, and at fixed steps whether it had fit by its point."""
    for run in runs:
        if run.reused or run.recorded or run.state != 'done' or not evaluated(run, variants):
            continue                                      # (a recalled run's record is where it came from)
        path = record_path(records, grid_dir, run)
        names = [files.EVAL_CACHE, files.MISMATCH_CACHE, *map(files.eval_cache, variants_of(run, variants))]
        keys = {name: files.read_json(os.path.join(run.dir, name), 'rerun this command')['key']   # the caches'
                for name in names}
        data = json.dumps({'settings': run.cfg, 'log': run.records,
                           'eval': {'key': keys[files.EVAL_CACHE], 'record': run.eval},
                           'mismatch': {'key': keys[files.MISMATCH_CACHE], 'record': run.mismatch},
                           **({'variants': {v: {'key': keys[files.eval_cache(v)], 'record': run.evals[v]}
                                            for v in variants_of(run, variants)}} if variants_of(run, variants)
                              else {}),
                           'provenance': provenance_of(run),
                           **({'fit_by_then': fit_by_then(run) is not None} if run.fixed_steps else {})}).encode()
        if os.path.exists(path):
            with open(path, 'rb') as f:
                if f.read() == data:
                    continue
        with rundir.writing(path, 'the record of a finished run', 'rerun this command'):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            rundir.write_atomic(path, data)


def recall(runs, records, grid_dir, mults, n, variants=()):
    """Runs without a checkpoint whose records exist are done, from them (run.recorded). A record of other
    settings stops the grid; one evaluated another way is left: the run trains again, its record replaced."""
    recalled, fix = 0, "restore it (git checkout it) or delete it: its runs train again"

    def read(path):
        rec = files.read_json(path, fix)
        if not (isinstance(rec.get('settings'), dict) and isinstance(rec.get('log'), list) and rec['log']
                and isinstance(rec.get('variants', {}), dict) and isinstance(rec.get('provenance', {}), dict)):
            raise SystemExit(f"{path} is not the record of a finished run; {fix}")
        entries = [(files.EVAL_CACHE, rec.get('eval')), (files.MISMATCH_CACHE, rec.get('mismatch')),
                   *((files.EVAL_CACHE, v) for v in rec.get('variants', {}).values())]
        why = log_wrong(rec['log']) or next(filter(None, (entry_wrong(name, e) for name, e in entries)), None)
        if why:
            raise SystemExit(f"{path} is not the record of a finished run ({why}); {fix}")
        return rec
    for run in runs:
        path = record_path(records, grid_dir, run)
        if run.reused or run.state != 'new' or not os.path.isfile(path):
            continue
        rec = read(path)
        differ = differing(rec['settings'], run.cfg)
        if differ:
            raise SystemExit(f"{path} records a run with other settings ("
                             + ", ".join(f"{k}={a!r}, study: {b!r}" for k, a, b in differ[:4]) + f"); {fix}")

        def anywhere(key):
            return key | {'device': None}
        evaluated_as = (anywhere(rec['eval']['key']), rec['mismatch']['key'],
                        {v: anywhere(e['key']) for v, e in rec.get('variants', {}).items()})
        if evaluated_as != (anywhere(eval_key(run, mults, n, 'cpu')), mismatch_key(run),
                            {v: anywhere(eval_key(run, mults, n, 'cpu', v)) for v in variants_of(run, variants)}):
            print(f"{tag(run)} its record in {records} was evaluated another way: it trains again")
            continue
        run.state, run.recorded, run.records = 'done', True, rec['log']
        run.eval, run.mismatch = rec['eval']['record'], rec['mismatch']['record']
        run.evals = {v: e['record'] for v, e in rec.get('variants', {}).items()}
        run.provenance = rec.get('provenance')
        recalled += 1
    if recalled:
        print(f"{recalled} finished run(s) recalled from their records in {records}")


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
