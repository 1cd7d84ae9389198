"""
A grid's summary: where it is written, the pre-registered rule it is written under and a declared change of
it, the summary of the runs as they stand, and its files (results.json, results.md, the plots).
"""

import contextlib
import json
import os
import shlex
import signal

from base import rundir
from study import files
from study.derive import labels
from study.outcomes import summarize
from study.runs import SCHEDULING
from study.tables import format_markdown

try:                   # the plots: a feature of their own, study/plots.py (they need matplotlib)
    from study.plots import plot, step_curves
except ImportError:
    plot = None


def grid_of(argv):
    """The arguments that say what a grid is: argv without how it is scheduled or where its summary goes."""
    return [a for a in argv if a[2:].split('=', 1)[0] not in SCHEDULING | {'results_dir'}]


def summary_dir(cfg, argv):
    """Where results.* go: results_dir for a study config's own grid, grid_dir for one with any override of what
    it is. A summary another grid wrote is never replaced: refused before any run starts."""
    grid, out = grid_of(argv), cfg['results_dir'] or cfg['grid_dir']
    if cfg['results_dir'] and len(grid) > 1 and not any(a.startswith('--results_dir=') for a in argv):
        print(f"this grid is not {grid[0]}'s own ({shlex.join(grid[1:])}): its summary goes to {cfg['grid_dir']}, "
              f"not {cfg['results_dir']}")
        out = cfg['grid_dir']
    path = os.path.join(out, files.RESULTS)
    if os.path.normpath(out) != os.path.normpath(cfg['grid_dir']) and os.path.isfile(path):
        try:
            command = files.read_json(path, '').get('command')
            if not (isinstance(command, str) and command.startswith('python ablate.py ')):
                raise SystemExit(f"{path} names no grid (its command is {command!r})")
            try:
                argv = shlex.split(command)[2:]
            except ValueError as e:
                raise SystemExit(f"{path} names no grid (its command {command!r}: {e})") from None
        except SystemExit as e:           # unreadable: no grid can be told from it; kept beside, not lost
            with rundir.writing(path, 'the damaged summary aside', 'rerun this command'):
                print(f"{str(e.code).rstrip('; ')}: set aside as {files.set_aside(path)}, a new one is written")
            return out
        if grid_of(argv) != grid:
            raise SystemExit(f"{path} summarizes another grid (`{command}`), not this one: give this grid's summary "
                             f"its own place, e.g. --results_dir={cfg['grid_dir']}")
    return out


# the study keys that decide a test or a label: the pre-registered rule, recorded in results.json with the commit
# of the config that fixed it
RULE_KEYS = ('control', 'families', 'comparisons', 'delta', 'fit_accuracy', 'extrap_multiple', 'extrap_threshold',
             'extrap_task', 'range_threshold', 'deteriorate_multiple', 'deteriorate_drop', 'deteriorate_evals',
             'early_snapshot', 'late_snapshot', 'multiples', 'eval_samples', 'eval_variants', 'fit_plus_reading',
             'fit_plus_window')
# rule keys added after studies were summarized, with the value that means what those studies did
RULE_ADDED = {'fit_plus_reading': 0, 'fit_plus_window': 0}
RECORDED = ('fixed', 'config_commit')     # how a summary recorded its rule: a rerun writes these anew
# rule keys recorded only where set away from their default (so the summaries before them keep every byte)
RULE_IF_SET = {'every_run_counts': False, 'eval_samples_long': 0}


def rule_of(cfg):
    rule = {k: cfg[k] for k in RULE_KEYS} | {k: cfg[k] for k, plain in RULE_IF_SET.items() if cfg[k] != plain}
    return json.loads(json.dumps(rule))     # as results.json holds it (lists, not tuples)


def rule_change(cfg, argv, out):
    """This config's rule against the one its summary in `out` was written under: None (the same, or none), the
    change recorded there (still declared), or this one, declared with rule_changed: {'why', 'keys': {key:
    [before, now]}, 'before'}. An undeclared change is refused in one line naming the keys."""
    path = os.path.join(out, files.RESULTS)
    try:
        with open(path) as f:
            old = json.load(f)
        same_grid = grid_of(shlex.split(old['command'])[2:]) == grid_of(argv)
        fixed = old['rule'].get('fixed') if same_grid else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None                          # no summary of this grid's to hold it to (summary_dir set a bad one aside)
    now = RULE_IF_SET | rule_of(cfg)
    if isinstance(fixed, dict):          # a key added since the summary: as it then was
        fixed = {**RULE_IF_SET, **{k: v for k, v in RULE_ADDED.items() if k not in fixed}, **fixed}
    changed = [k for k in now if isinstance(fixed, dict) and fixed.get(k) != now[k]]
    if not changed:
        return old.get('rule_change') if cfg['rule_changed'] else None
    if not cfg['rule_changed']:
        raise SystemExit(f"{path} was summarized under another rule: " + ', '.join(
            f"{k}={fixed.get(k)!r} there, {now[k]!r} now" for k in changed) + ". A pre-registered rule does not "
            "change after its results: restore it in the config, or declare why with rule_changed = '...' (the "
            "summary then states the change beside the old rule's labels)")
    return {'why': cfg['rule_changed'], 'keys': {k: [fixed.get(k), now[k]] for k in changed}, 'before': fixed}


def summarize_grid(runs, cfg, lists, argv, change):
    """The summary of these runs (evaluated and found fit or not), its pre-registered rule recorded with the commit
    of the config that fixed it, and a declared change of the rule (change) with the labels the old rule gave."""
    results = summarize(runs, cfg, lists, argv)
    config = argv[0] if argv and not argv[0].startswith('--') else None
    results['rule']['fixed'] = rule_of(cfg)
    commit = config and rundir.git('log', '-1', '--format=%H', '--', config)
    results['rule']['config_commit'] = (commit + (' (the config has changed since)' if rundir.git(
        'status', '--porcelain', '--', config) else '')) if commit else 'unknown'
    if change:       # the labels the old rule gave, beside the new rule's
        before = summarize(runs, cfg | change['before'], lists, argv)
        now = labels(results)
        results['rule_change'] = dict(change, labels={k: [v, now.get(k)] for k, v in labels(before).items()})
    return results


def write(out, results, runs, then):
    """results.json, results.md (its tables, printed too) and the plots into `out`; a disk error is one line
    ending in `then`. A Ctrl-C meanwhile ends ablate.py once they are written (held_signals). A summary there
    whose every number is these (a rerun with nothing new: only where it was summarized differs) is kept as it is.
    -> whether it wrote them"""
    def numbers(r):     # what a summary says, less where, at which commit and how its rule was kept, to 10 digits
        # (a float's last bits are its library's, not the study's)
        r = json.loads(json.dumps(r), parse_float=lambda x: float(f"{float(x):.10g}"))
        return {**r, 'provenance': None, 'rule': {k: v for k, v in r['rule'].items() if k not in RECORDED}}
    try:
        with open(os.path.join(out, files.RESULTS)) as f:
            if numbers(json.load(f)) == numbers(results):
                return False
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    table = format_markdown(results)
    with rundir.writing(out, 'the summary', then), held_signals():
        os.makedirs(out, exist_ok=True)
        rundir.write_atomic(os.path.join(out, files.RESULTS), json.dumps(results, indent=1).encode())
        rundir.write_atomic(os.path.join(out, files.RESULTS_MD), table.encode())
        print('\n' + table)
        if plot:
            plot(results, step_curves(runs), out)
    return True


@contextlib.contextmanager
def held_signals():
    """SIGINT and SIGTERM taken as the installed handler takes them (rundir.exit_on_signals: its line, once), the
    exit it raises held until the block ends: matplotlib swallows an exit raised inside its callbacks ('Exception
    ignored in ...'), and the summary went on to exit 0. A second signal still ends the process at once."""
    held, saved = [], {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def hold(signum, frame):
        try:
            saved[signum](signum, frame)
        except (SystemExit, KeyboardInterrupt) as e:
            held.append(e)
    for s, handler in saved.items():
        if callable(handler):
            signal.signal(s, hold)
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    if held:
        raise held[0]
