"""
The committed record of a study's finished runs: results_dir/runs/<arm>/seed<k>.json (a cooldown branch's
.../seed<k>/cooldown<j>.json), each run's settings, log, evals, mismatch and provenance, written as it is
evaluated. Committed with the summary, it lets a fresh clone or another machine count those runs as done and
train only the rest (recall), and it is what a summary's per-seed numbers are checked against (disagreements).
"""

import json
import os

from base import rundir
from study import files
from study.evals import entry_wrong, eval_key, evaluated, mismatch_key, variants_of
from study.derive import area_and_range
from study.outcomes import curve, point_name
from study.runs import differing, fit_by_then, log_wrong, provenance_of, tag


def record_path(records, grid_dir, run):
    """results_dir/runs/<arm>/seed<k>.json; a cooldown branch's: .../seed<k>/cooldown<j>.json."""
    return os.path.join(records, os.path.relpath(run.dir, grid_dir) + '.json')


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


def disagreements(results, path, shown):
    """Where a summary's per-seed numbers are not what its runs' records beside it give (path: its results.json,
    named `shown` in the lines): one line each. Each record's plain eval (every accuracy), fit, mismatch and area
    under each variant against those of its seed in its arm at its point; a record whose seed it does not hold."""
    lines, rule, records = [], results['rule'], os.path.join(os.path.dirname(path), files.RECORDS)
    for folder, _, names in sorted(os.walk(records)):
        for name in sorted(n for n in names if n.endswith('.json')):
            rel = os.path.relpath(os.path.join(folder, name), records)[:-len('.json')]
            record = os.path.join(os.path.dirname(shown), files.RECORDS, rel + '.json')
            rec = files.read_json(os.path.join(records, rel + '.json'), f"restore it (git checkout -- {record})")
            arm, seed, *point = rel.split(os.sep)          # <arm>/seed<k>, or a branch's <arm>/seed<k>/cooldown<j>
            seed, settings = int(seed.removeprefix('seed')), rec['settings']
            fixed = bool(point and point[0].startswith('at') or settings.get('snapshots_at_iter'))
            if point:
                point = int(point[0].removeprefix('at').removeprefix('cooldown'))
            elif settings.get('snapshots_after_fit') or settings.get('snapshots_at_iter'):
                point = 'trunk'
            where = point_name(arm, point or None, settings, fixed)
            summary = results['arms'].get(where, {})
            if seed not in summary.get('seeds', []):
                lines.append(f"{shown}: arms/{where} has no seed {seed}, which {record} records")
                continue
            fit = rec['log'][-1]['fit_iter'] if rec.get('fit_by_then', True) else None
            task = summary.get('accuracy_at_extrap', {}).get('task')
            expected = {f"steps_to_fit/per_seed/{seed}": fit,
                        **{f"tasks/{t}/{m[:-1]}/per_seed/{seed}": a for t, by_m in
                           rec['eval']['record']['length_eval'].items() for m, a in by_m.items() if a is not None},
                        **({f"mismatch_per_seed/{seed}": rec['mismatch']['record']} if 'mismatch_per_seed' in summary
                           else {}),
                        **{f"variants/{v}/area/per_seed/{seed}": area_and_range(curve(e['record'], task),
                                                                                 rule['range_threshold'])[0]
                           for v, e in rec.get('variants', {}).items()
                           if str(seed) in summary.get('variants', {}).get(v, {}).get('area', {}).get('per_seed', {})}}
            for key, value in expected.items():
                got = summary
                for k in key.split('/'):
                    got = got.get(k) if isinstance(got, dict) else None
                if got != value:
                    lines.append(f"{shown}: arms/{where}/{key} is {json.dumps(got)[:60]}, its record {record} gives "
                                 f"{json.dumps(value)[:60]}")
    return lines
