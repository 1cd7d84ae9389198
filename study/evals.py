"""
The final eval and the train-vs-eval mismatch of every finished run, each computed once and cached
in the run dir (ablate_eval.json, ablate_mismatch.json) for the settings and the checkpoint that
made it; eval jobs on a cluster write the same caches, which the summary then reads.
"""

import contextlib
import io
import json
import os

import torch

import eval_lengths
import rundir
import sample_data
from model import dropout_mismatch
from study.runs import tag


def cached(run, name, key, compute):
    """compute() once per run and key: kept in the run dir as `name`; other settings recompute it,
    and so does a checkpoint newer than the cache (the run dir trained again: the key names settings,
    not weights). compute=None only reads what an eval job cached, whatever device its node had:
    -> None if absent."""
    path = os.path.join(run.dir, name)
    if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(os.path.join(run.dir, rundir.CKPT)):
        try:
            with open(path) as f:
                saved = json.load(f)
            if not (isinstance(saved, dict) and isinstance(saved.get('key'), dict)
                    and isinstance(saved.get('record'), dict) and saved['record']):
                raise ValueError(f"a {type(saved).__name__} without its key and a record")
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


def evaluate(runs, mults, n, compute=True):
    """The final eval of every finished run, cached in its dir (ablate_eval.json) for these settings;
    compute=False only reads what eval jobs cached (a run without it gets no 'eval')."""
    for run in runs:
        if run.state != 'done':
            continue
        tasks = run.tasks                            # the run's eval_tasks, or the tasks it trained on
        device = rundir.pick_device(run.cfg['device'])
        # (the key's 'num_samples' is eval_samples under its first name: renaming it would recompute every cache)
        key = {'multiples': mults, 'num_samples': n, 'tasks': tasks, 'iter': run.cfg['max_iters'], 'seed': 0,
               'device': device.split(':')[0], 'record': 'length_eval'}

        def final_eval():
            print(f"{tag(run)} final eval: {n} examples per task and length")
            with contextlib.redirect_stdout(io.StringIO()):          # the model summary line, for every run
                return eval_lengths.evaluate_run(run.dir, tasks, mults, n, run.cfg['eval_batch_size'], device)
        record = cached(run, rundir.EVAL_CACHE, key, final_eval if compute else None)
        if record is not None:
            run.eval = record


MISMATCH = ('token_shift', 'mean_shift', 'var_ratio', 'pre_act_token_shift', 'pre_act_mean_shift', 'pre_act_var_ratio',
            'token_floor')
MISMATCH_ROWS = 16   # validation rows per run for the mismatch; in its cache key (it fixes the rows for a corpus)
MISMATCH_MASKS = 32  # training-mode passes per run; their noise floor is measured and subtracted
                     # (model.dropout_mismatch)


def measure_mismatch(runs, compute=True):
    """Train-vs-eval mismatch of every finished run at its own dropout site: model.dropout_mismatch
    on (up to) MISMATCH_ROWS rows of its validation data, averaged over the linear layers the site's
    noise reaches (None where it reaches none: no dropout), with their count; cached in the run dir
    (ablate_mismatch.json; compute=False only reads it). `python mismatch.py RUN_DIR` prints the
    per-layer values for every site."""
    for run in runs:
        if run.state != 'done':
            continue

        def mean_over_reached_layers():       # the data is read only here: a cached run needs none
            T = run.cfg['block_size']
            ids, _ = sample_data.load_split(run.cfg['data_dir'], 'val')
            # idx: (<= MISMATCH_ROWS, T)
            idx = torch.from_numpy(ids[:min(MISMATCH_ROWS, len(ids) // T) * T].astype('int64')).view(-1, T)
            with contextlib.redirect_stdout(io.StringIO()):
                model, _, _ = eval_lengths.load_run(run.dir, 'cpu')
            rows = [r for r in dropout_mismatch(model, idx, n_masks=MISMATCH_MASKS) if r['reached']]
            return {'layers': len(rows), **{k: sum(r[k] for r in rows) / len(rows) if rows else None for k in MISMATCH}}
        record = cached(run, rundir.MISMATCH_CACHE, {'iter': run.cfg['max_iters'], 'max_rows': MISMATCH_ROWS,
                                                      'masks': MISMATCH_MASKS,
                                                      'measure': 'per token and batch, floor subtracted'},
                        mean_over_reached_layers if compute else None)
        if record is not None:
            run.mismatch = record
