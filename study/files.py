"""
A study's files named in one place (beside train.py's own, base/rundir.py's), the lock two ablate.py on one
study take for its summary, and the one reading of a summary, cache or record (read_json; a summary's numbers:
read_summary).
"""

import contextlib
import fcntl
import json
import os

from base import rundir

# in a run dir
TRAIN_LOG = 'train.log'           # a trainer's output when ablate.py or a job started it
EVAL_LOG = 'eval.log'             # the output of its final eval's process (study/evals.py)
EVAL_CACHE = 'ablate_eval.json'   # a study's cached final eval and mismatch (study/evals.py)
MISMATCH_CACHE = 'ablate_mismatch.json'
RUN_JOB = 'job.json'              # the cluster job that trains the run and evaluates it (study/launch.py): its id
REBUILD = 'rebuild'               # in a cooldown branch's dir: its trunk trained again to rebuild a lost snapshot
# in a study's results_dir
RESULTS, RESULTS_MD = 'results.json', 'results.md'   # the summary and its tables
RECORDS = 'runs'                  # the committed record of each finished run of a study's own grid
# in a grid's folder
SUMMARY_LOCK = 'summary.lock'     # held while its summary is read and written
# in the repository
STUDY_CONFIGS = 'config'          # where reuse and init_from_study find a study config by its name


def eval_cache(variant=''):
    """A study's cached final eval of a run dir: ablate_eval.json plain, ablate_eval_<variant>.json under a
    length-scaling variant (eval_lengths.parse_variant)."""
    return EVAL_CACHE.replace('.json', f'_{variant}.json') if variant else EVAL_CACHE


def read_json(path, fix, kind=dict):
    """A JSON file that must hold a `kind` (a summary, a cache): one line naming the file and `fix`
    when it is missing, cut short or of another shape, never a traceback from inside json."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"{path} does not exist; {fix}") from None
    except (ValueError, OSError) as e:
        raise SystemExit(f"{path} is not readable JSON ({type(e).__name__}: {rundir.first_line(e)}); {fix}") from None
    if not isinstance(data, kind):
        raise SystemExit(f"{path} holds a {type(data).__name__}, not a {kind.__name__}; {fix}")
    return data


def read_summary(path, shown, fix):
    """A results.json (named `shown` in a refusal), refused in one line ending in `fix` where it is missing, empty
    or holds a value that no summary writes: no table, label or results.md is ever written from less."""
    if not os.path.isfile(path):
        raise SystemExit(f"{shown} is missing: {fix}")
    res = read_json(path, fix)
    why = not_numbers({k: res[k] for k in ('arms', 'long', 'comparisons') if k in res}) if res else 'it is empty'
    if why:
        raise SystemExit(f"{shown}: {why}; {fix}")
    return res


# the keys whose values a summary writes as numbers or lists of them (None where there is nothing to count), beside
# per_seed's {seed: number}: anything else there (an edit, a merge gone wrong) is refused before a table reads it
NUMBERS = {'mean', 'sd', 'std', 'median', 'min', 'max', 'p', 'p_holm', 'difference', 'share', 'r', 'count', 'of',
           'runs', 'fit', 'length', 'shift', 'smallest_possible_p', 'fisher_p', 'unpaired_p', 'threshold', 'offset',
           'window', 'early', 'late', 'ci95', 'ci90'}


def not_numbers(o, path=''):
    """Where a summary holds something other than a number in a place of numbers: 'arms/vpad/area/mean is 'abc',
    not a number', or None."""
    if isinstance(o, list):
        return next(filter(None, (not_numbers(v, f"{path}[{i}]") for i, v in enumerate(o))), None)
    if not isinstance(o, dict):
        return None
    for k, v in o.items():
        where = f"{path}/{k}".lstrip('/')
        numbers = v.values() if k == 'per_seed' and isinstance(v, dict) else v if isinstance(v, list) else [v]
        if (k in NUMBERS or k == 'per_seed') and not all(
                x is None or isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
            return f"{where} is {json.dumps(v)[:60]}, not a number"
        why = not_numbers(v, where)
        if why:
            return why
    return None


def set_aside(path):
    """Rename a damaged file to <path>.bad (or .bad2, ...: an earlier one is kept too). -> its new name"""
    n, new = 1, f"{path}.bad"
    while os.path.exists(new):
        n += 1
        new = f"{path}.bad{n}"
    os.replace(path, new)
    return new


@contextlib.contextmanager
def summary_lock(folder):
    """Held while a study's summary is read and written: a blocking flock on <folder>/summary.lock (the
    grid's folder), so two ablate.py on one study write one after the other, each from what it finds."""
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, SUMMARY_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):          # a file system without flock: unlocked, as DirLock goes on
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
