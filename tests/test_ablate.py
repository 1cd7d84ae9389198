import contextlib
import dataclasses
import io
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

import ablate as abl           # the module; ablate() below runs the script
import eval_lengths as E
from base import rundir
import train
import train_checks
from ablate import main as ablate_main
from publish import headline
from publish import report as publish
from study import derive, evals, files, launch, outcomes, plots, records, reproduce, settings, stats, summary, tables
from study import grid as study_grid
from study.plan import plan_runs
from study.runs import GridRun, state
from configurator import configure, settings_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(n_layer=2, n_head=2, n_embd=32, window=32, nope_every=2, batch_size=4, block_size=96, eval_iters=2,
            eval_samples=2, eval_batch_size=2, eval_multiples='1', final_multiples='1,2', log_interval=1,
            warmup_iters=2, learning_rate=3e-3, num_tokens=20000, max_iters=4, eval_interval=2)


def study(tmp_path, name='study.py', **extra):
    """A tiny study config: two arms on tests/base_config.py with tiny overrides, data in tmp_path (no
    dropout arm: its kernel's compile would double the time of these runs; train.py's tests cover it)."""
    common = dict(TINY, data_dir=str(tmp_path / 'data'))
    text = (f"base_config = 'tests/base_config.py'\n"
            f"arms = {{'none': {{'dropout_site': 'none'}}, 'wd': {{'dropout_site': 'none', 'weight_decay': 0.1}}}}\n"
            f"common = {common!r}\n"
            f"seeds = '1,2'\n"
            f"grid_dir = {str(tmp_path / 'grid')!r}\n"
            f"multiples = '1,2'\n"
            f"extrap_multiple = 2\n"
            f"eval_samples = 3\n")
    for k, v in extra.items():
        text += f"{k} = {v!r}\n"
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture(autouse=True)
def in_process_runs_leave_no_trace():
    """ablate.py run in this process (refused(), ablate_here()) sets SIGINT / SIGTERM handlers and
    may hold run dirs, as in a process of its own: both are given back after each test."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    rundir.release_all()
    for s, h in handlers.items():
        signal.signal(s, h)


def ablate(*args, check=True):
    out = subprocess.run([sys.executable, 'ablate.py', *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if check:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def refused(*args):
    """ablate.py's refusal of bad input, in this process (a subprocess per case costs ~3 s of
    imports): a SystemExit with a one-line message."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with pytest.raises(SystemExit) as e:
            ablate_main(list(args))
    finally:
        os.chdir(cwd)
    msg = e.value.code
    assert isinstance(msg, str) and len(msg.strip().splitlines()) == 1, msg
    return msg


def planned(cfg):
    """The runs study.plan plans for a study config read with ablate.py's keys (no command-line overrides)."""
    return plan_runs(cfg, [], None, (abl.study_settings(), settings_of(vars(train))))[0]


def mtimes(grid):
    return {os.path.join(d, f): os.path.getmtime(os.path.join(d, f))
            for d, _, files in os.walk(grid) for f in files if f == 'ckpt.pt'}


@pytest.mark.slow   # ~40 s: a grid of 4 runs trained, evaluated in worker slots, rerun; .ci/run runs -m slow
def test_grid_trains_summarizes_and_skips_finished_runs(tmp_path, capsys, monkeypatch):
    cfg = study(tmp_path, results_dir=str(tmp_path / 'results'))
    grid, out = tmp_path / 'grid', tmp_path / 'results'
    threads = torch.get_num_threads()
    ablate_here(cfg, '--workers=2')                                     # the trainers are processes of their own
    first = capsys.readouterr().out
    assert torch.get_num_threads() == threads        # an eval in the grid ran on a worker's threads, then gave them back
    res = json.load(open(out / 'results.json'))
    assert res['command'] == f'python ablate.py {cfg}'              # scheduling flags do not change results
    assert set(res['arms']) == {'none', 'wd'}
    assert res['arms']['none']['overrides'] == {'dropout_site': 'none'}
    for arm in res['arms'].values():
        assert arm['seeds'] == [1, 2] and arm['pending_seeds'] == []
        assert set(arm['tasks']) == {'niah_single'} and set(arm['tasks']['niah_single']) == {'1', '2'}
        for m, point in arm['tasks']['niah_single'].items():
            xs = list(point['per_seed'].values())
            assert len(xs) == 2 and point['length'] == 96 * int(m)
            assert point['mean'] == pytest.approx(sum(xs) / 2)
            assert point['std'] == pytest.approx(math.sqrt(sum((x - point['mean']) ** 2 for x in xs)))
    # the per-seed numbers are those of each run's own eval record
    rec = json.load(open(grid / 'wd' / 'seed2' / 'ablate_eval.json'))['record']
    assert {m[:-1]: a for m, a in rec['length_eval']['niah_single'].items()} == \
        {m: p['per_seed']['2'] for m, p in res['arms']['wd']['tasks']['niah_single'].items()}
    # no dropout at the arms' site: train and eval mode are the same network, so no layer is reached
    for arm in res['arms'].values():
        assert [m['layers'] for m in arm['mismatch_per_seed'].values()] == [0, 0]
        assert arm['mismatch']['var_ratio'] is None and arm['mismatch']['token_shift'] is None
    # results.md is what results.json gives (its words are tables.py's tests'), and every number of results.json
    # what its per-seed numbers give
    assert (out / 'results.md').read_text() == tables.format_markdown(res)
    assert derive.rederive(json.loads(json.dumps(res))) == res
    # the outcomes: every finished run either fit or never did
    for arm in res['arms'].values():
        assert arm['runs'] == 2 and arm['fit'] + len(arm['never_fit']) == 2
    assert res['rule']['control'] == 'none' and res['rule']['extrap_multiple'] == 2
    assert not (grid / 'results.json').exists()
    # each run is evaluated as it finishes, in a worker slot: a process of its own on a trainer's threads, whose
    # numbers are those of the same eval in this process on as many threads
    assert first.index('] evaluated in') < first.rindex(' done in ') and 'process(es) busy' in first
    assert 'final eval: 3 examples' in (grid / 'wd' / 'seed2' / 'eval.log').read_text()
    torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            here = E.evaluate_run(str(grid / 'wd' / 'seed2'), ['niah_single'], [1, 2], 3, 2, 'cpu')
    finally:
        torch.set_num_threads(threads)
    assert here['length_eval'] == rec['length_eval']
    try:                                                                # plots are optional
        import matplotlib  # noqa: F401
        assert (out / 'accuracy_vs_length.png').exists() and (out / 'accuracy_vs_step.png').exists()
    except ImportError:
        assert 'matplotlib is not installed' in first and not (out / 'accuracy_vs_length.png').exists()
    # a rerun trains nothing and re-summarizes from the cached evals
    before = mtimes(grid)
    ablate_here(cfg)
    again = capsys.readouterr().out
    assert '4 finished, 0 to train' in again and 'evaluated in' not in again
    assert mtimes(grid) == before
    # a finished run whose checkpoint is set aside keeps its record: recalled from it, not trained again
    os.rename(grid / 'wd' / 'seed2' / 'ckpt.pt', grid / 'wd' / 'seed2' / 'ckpt.pt.bad')
    ablate_here(cfg)
    again = capsys.readouterr().out
    assert '1 finished run(s) recalled' in again and 'starting' not in again and 'Not finished' not in again
    # without its record it trains again and is evaluated again, not read from the cache of the run
    # that was there (its key names settings, not weights)
    os.remove(out / 'runs' / 'wd' / 'seed2.json')
    ablate_here(cfg)
    again = capsys.readouterr().out
    assert '[wd seed 2] starting' in again and again.count('evaluated in') == 1 and '[wd seed 2] evaluated in' in again
    # each finished run is recorded beside the summary: a clone without the run dirs trains none of them again
    records = out / 'runs'
    assert sorted(str(p.relative_to(records)) for p in records.rglob('*.json')) == \
        ['none/seed1.json', 'none/seed2.json', 'wd/seed1.json', 'wd/seed2.json']
    assert json.load(open(records / 'wd' / 'seed2.json'))['eval']['record']['length_eval'] == rec['length_eval']
    summary = json.load(open(out / 'results.json'))['arms']
    shutil.rmtree(grid / 'wd')
    ablate_here(cfg)
    again = capsys.readouterr().out
    assert '2 finished run(s) recalled' in again and 'starting' not in again and not (grid / 'wd').exists()
    assert json.load(open(out / 'results.json'))['arms'] == summary
    # the rule is part of the results: changed in the config after them, a rerun is refused naming the keys,
    # unless the config says why; then the summary states the change beside the old rule's labels
    rule = json.load(open(out / 'results.json'))['rule']
    assert rule['fixed']['delta'] == 0.05 and rule['fixed']['extrap_multiple'] == 2 and rule['config_commit']
    with open(cfg, 'a') as f:
        f.write("delta = 0.2\n")
    before = (out / 'results.json').read_bytes()
    assert 'delta=0.05 there, 0.2 now' in refused(cfg) and (out / 'results.json').read_bytes() == before
    with open(cfg, 'a') as f:
        f.write("rule_changed = 'a wider margin, to test'\n")
    ablate_here(cfg)
    capsys.readouterr()
    res = json.load(open(out / 'results.json'))
    assert res['rule_change']['keys'] == {'delta': [0.05, 0.2]} and res['rule']['fixed']['delta'] == 0.2
    assert set(res['rule_change']['labels']) <= {'wd vs none'}      # (4 steps: a tested pair only where both fit)
    assert all(len(v) == 2 for v in res['rule_change']['labels'].values())
    assert res['rule_change']['why'] == 'a wider margin, to test'
    assert (out / 'results.md').read_text() == tables.format_markdown(res)
    ablate_here(cfg)                          # rerun: the rule is the recorded one now; the change is still stated
    assert json.load(open(out / 'results.json'))['rule_change']['keys'] == {'delta': [0.05, 0.2]}
    capsys.readouterr()
    # --reproduce: a committed seed retrained here, on the same machine, code and threads, is equal bit for bit
    monkeypatch.setattr(reproduce, 'OUT', str(tmp_path / 'reproduce'))
    ablate_here(cfg, '--reproduce=1', '--arms=wd')
    row = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert row[0] == '1' and row[1] == row[2] and row[3:5] == ['yes', 'equal'] and row[5] == '0.000'
    saved = json.load(open(records / 'wd' / 'seed1.json'))
    saved['settings']['weight_decay'] = 0.3
    (records / 'wd' / 'seed1.json').write_text(json.dumps(saved))
    assert 'records a run with other settings (weight_decay=0.3, study: 0.1)' in refused(cfg)


def alive(pid):
    """A process that has not ended (a zombie, ended but not yet reaped, counts as ended)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


@pytest.mark.slow   # ~30 s of trainers started and stopped; .ci/run runs -m slow
def test_interrupted_or_killed_grid_stops_its_trainer_and_resumes(tmp_path, capsys):
    """SIGINT to ablate.py alone: it stops its trainer (which notes where it stopped in its train.log)
    and ends with one line and exit code 130. SIGKILL to ablate.py alone: its trainer ends too, by
    its parent-death signal. Either way no trainer outlives it, and a rerun keeps the finished run
    and resumes the other with each eval logged once."""
    cfg = study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1,2')
    grid, run2 = tmp_path / 'grid', tmp_path / 'grid' / 'none' / 'seed2'
    args = [cfg, '--max_iters=40', '--eval_interval=4', '--multiples=1', '--extrap_multiple=1']

    def start_and_wait(records):
        proc = subprocess.Popen([sys.executable, 'ablate.py', *args], cwd=ROOT, stdout=open(tmp_path / 'out', 'w'),
                                stderr=open(tmp_path / 'err', 'w'))
        log2, deadline = run2 / 'log.jsonl', time.time() + 300
        while not (log2.exists() and log2.read_text().count('\n') >= records):    # seed 1 finished, seed 2 under way
            assert proc.poll() is None and time.time() < deadline, (tmp_path / 'out').read_text()[-3000:]
            time.sleep(0.05)
        return proc, int((run2 / rundir.LOCK).read_text().split()[0])   # the trainer holds the run dir
    proc, trainer = start_and_wait(3)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    stderr = (tmp_path / 'err').read_text()
    assert proc.returncode == 130 and 'Traceback' not in stderr, stderr      # (before it: the corpus's progress bars)
    assert stderr.strip().splitlines()[-1] == (
        f"SIGINT: 1 of 2 runs finished, 1 stopping at their last checkpoint; resume with: "
        f"python ablate.py {' '.join(args)}")
    assert not alive(trainer) and 'SIGTERM: stopped at iter' in (run2 / 'train.log').read_text()
    proc, trainer = start_and_wait(len((run2 / 'log.jsonl').read_text().splitlines()) + 2)
    proc.kill()
    proc.wait()
    deadline = time.time() + 60
    while alive(trainer) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(trainer), "the trainer outlived its ablate.py"
    it = torch.load(run2 / 'ckpt.pt', weights_only=True)['iter_num']
    assert 0 < it < 40, "the run was not killed mid-way"
    seed1 = mtimes(grid / 'none' / 'seed1')
    ablate_here(*args)                                                   # the trainer is a process of its own
    out = capsys.readouterr().out
    assert '1 finished, 1 to train' in out and 'resuming' in out
    assert mtimes(grid / 'none' / 'seed1') == seed1                      # not retrained
    log = [json.loads(line) for line in open(grid / 'none' / 'seed2' / 'log.jsonl')]
    assert [r['iter'] for r in log] == list(range(0, 41, 4))             # each eval once, none lost
    assert 'resumed from' in open(grid / 'none' / 'seed2' / 'train.log').read()


@pytest.mark.parametrize('name', ['..', '', '.', '/abs', 'a/b', 5])
def test_an_arm_name_that_is_not_a_plain_folder_name_is_refused(tmp_path, name):
    """Arms train into grid_dir/<arm>/seed<k>: a name that would leave the grid ('..', an absolute
    path), land in it ('', '.') or make folders ('a/b'), or no name at all (an int), is one line."""
    msg = refused(study(tmp_path, arms={name: {'dropout_site': 'none'}}, control=''))
    assert f"arm name {name!r}" in msg and 'letters' in msg, msg
    assert not (tmp_path / 'grid').exists() and not os.path.exists(tmp_path / 'seed1')


def test_damaged_caches_are_computed_again_and_a_damaged_summary_set_aside(tmp_path, capsys):
    """A cached final eval or mismatch cut short, [] or {}, or with an empty record (a full disk, an
    edit): one line, then computed again. A results_dir/results.json that is not a summary: one line, kept beside as
    results.json.bad, its place left for the grid's new summary."""
    run = a_run(tmp_path / 'run', {})
    os.makedirs(run.dir)
    (tmp_path / 'run' / 'ckpt.pt').write_bytes(b'')
    for damage in ('{"key": {"a": 1}, "rec', '[]', '{}', '{"key": {"a": 1}, "record": null}',
                   '{"key": {"a": 1}, "record": {}}'):
        (tmp_path / 'run' / 'cache.json').write_text(damage)
        assert evals.cached(run, 'cache.json', {'a': 1}, lambda: {'r': 'fresh'}) == {'r': 'fresh'}
        assert f"[none seed 1] {run.dir}/cache.json is damaged" in capsys.readouterr().out
        assert evals.cached(run, 'cache.json', {'a': 1}, lambda: {'r': 'again'}) == {'r': 'fresh'}   # now sound
    # valid JSON of the wrong shape: an eval whose accuracy is not a number, a mismatch value that is text
    good = {'block_size': 64, 'length_eval': {'mqar': {'1x': 1.0}}}
    for name, damage in ((files.EVAL_CACHE, {**good, 'length_eval': {'mqar': {'1x': 'abc'}}}),
                         (files.eval_cache('yarn'), {**good, 'length_eval': {'mqar': [1.0]}}),
                         (files.EVAL_CACHE, {'length_eval': {'mqar': {'1x': 1.0}}}),
                         (files.MISMATCH_CACHE, {'layers': 2, 'token_shift': 'x'})):
        (tmp_path / 'run' / name).write_text(json.dumps({'key': {'a': 1}, 'record': damage}))
        assert evals.cached(run, name, {'a': 1}, lambda: {'r': 'fresh'}) == {'r': 'fresh'}
        assert f"{run.dir}/{name} is damaged (it" in capsys.readouterr().out
    results = tmp_path / 'results'
    cfg = study(tmp_path, results_dir=str(results))
    results.mkdir()
    for damage, why in (('[1, 2]', 'holds a list, not a dict'), ('{}', 'names no grid'),
                        ('{"command": 5}', 'names no grid (its command is 5)'),
                        ('{"command": "python ablate.py \'x"}', 'No closing quotation')):
        (results / 'results.json').write_text(damage)
        assert summary.summary_dir(configure(abl.study_settings(), [cfg]), [cfg]) == str(results)   # the study's own
        out = capsys.readouterr().out
        assert f"{results}/results.json" in out and why in out and 'set aside as' in out, out
        assert not (results / 'results.json').exists()
    assert (results / 'results.json.bad').read_text() == '[1, 2]' 


@pytest.mark.slow      # end to end: several tiny runs trained (7-11 s)
def test_only_the_study_configs_own_grid_writes_its_results_dir(tmp_path, capsys):
    """A committed summary (results_dir) changes only when its study config's own grid is rerun: a
    dry run writes nothing, a subset of arms or any other smaller grid sends its summary to grid_dir,
    and a results_dir named for it is refused; the refusal's advice works."""
    results = tmp_path / 'results'
    cfg = study(tmp_path, results_dir=str(results))
    results.mkdir()                                                     # as committed by the study's own grid
    (results / 'results.json').write_text(json.dumps({'command': f'python ablate.py {cfg}', 'arms': {'none': 1}}))
    (results / 'results.md').write_text('the committed table\n')
    committed = {f: (results / f).read_bytes() for f in os.listdir(results)}
    for dry in (['--dry_run'], ['--dry_run', '--arms=none'], ['--dry_run', '--seeds=1', '--max_iters=3']):
        ablate_here(cfg, *dry)
        assert 'not written' in capsys.readouterr().out
        assert {f: (results / f).read_bytes() for f in os.listdir(results)} == committed, dry
        assert not (tmp_path / 'grid').exists(), dry                    # no run dir, no summary: only the corpus
    ablate_here(cfg, '--arms=wd', '--seeds=1', '--max_iters=2')         # trains one run of one arm
    assert f"its summary goes to {tmp_path / 'grid'}, not {results}" in capsys.readouterr().out
    assert {f: (results / f).read_bytes() for f in os.listdir(results)} == committed
    assert '--arms=wd' in json.load(open(tmp_path / 'grid' / 'results.json'))['command']
    msg = refused(cfg, '--arms=none', f'--results_dir={results}')
    assert f"{results}/results.json summarizes another grid (`python ablate.py {cfg}`)" in msg, msg
    msg = refused(cfg, '--seeds=1', f'--results_dir={results}')
    assert {f: (results / f).read_bytes() for f in os.listdir(results)} == committed
    ablate_here(cfg, '--seeds=1', '--max_iters=2', msg.split('e.g. ')[1], '--arms=wd')  # the advice: a place of its own
    assert '--seeds=1' in json.load(open(tmp_path / 'grid' / 'results.json'))['command']
    assert 'is a file' in refused(cfg, f'--grid_dir={cfg}')
    assert '--grid_dir=elsewhere, not --out_dir' in refused(cfg, '--out_dir=elsewhere')   # a run's key, not the grid's


@pytest.mark.slow   # ~40 s: a second ablate.py trains a grid; .ci/run runs -m slow
def test_a_summary_counts_the_runs_another_ablate_finished_meanwhile(tmp_path, monkeypatch, capsys):
    """Two ablate.py on one study: this one finds every run new and trains none of them (the other holds
    them), while the other trains them all. The summary this one writes last is read under the study's
    lock from the run dirs and records as they stand then: every run finished and evaluated, none listed
    as not finished, and it exits 0."""
    cfg = study(tmp_path, results_dir=str(tmp_path / 'results'))

    def the_other_trains_meanwhile(runs, *args, **kwargs):
        ablate(cfg)                                       # a second ablate.py on the same study, to the end
        return []
    monkeypatch.setattr(study_grid, 'train_here', the_other_trains_meanwhile)
    ablate_here(cfg)
    assert 'Not finished yet' not in capsys.readouterr().out
    res = json.load(open(tmp_path / 'results' / 'results.json'))
    assert all(a['seeds'] == [1, 2] and a['pending_seeds'] == [] for a in res['arms'].values())


def test_a_run_another_process_holds_is_skipped(tmp_path, capsys):
    """As when a second ablate.py (or a train.py) works on the same out_dir: the run it holds is
    not trained here, and the line says who holds it."""
    cfg = study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1')
    run_dir = str(tmp_path / 'grid' / 'none' / 'seed1')
    held = rundir.DirLock(run_dir)
    with pytest.raises(SystemExit) as e:
        ablate_here(cfg)
    assert e.value.code == 1                                            # the run is not finished
    assert f"skipped: {run_dir} is in use by process {os.getpid()}" in capsys.readouterr().out
    assert os.listdir(run_dir) == [rundir.LOCK]
    held.release()


@pytest.mark.slow      # end to end: several tiny runs trained (7-11 s)
def test_a_trunks_branches_are_planned_after_it_and_wait_for_its_snapshot(tmp_path, capsys):
    """A study of trunks (snapshots_after_fit): each trunk's cooldown branches are runs of the grid, in
    <trunk>/cooldown<k>, that resume the snapshot the trunk writes at fit + k; a dry run lists them
    after their trunk. A trunk that never fits writes no snapshot: the grid trains it, then says its
    branches were not trained and why, and ends (it does not wait for them forever); rerun, the grid
    is finished, its branches not pending."""
    cfg = study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1', control='',
                common={**TINY, 'data_dir': str(tmp_path / 'data'), 'steps_after_fit': 4, 'snapshots_after_fit': '2,4',
                        'cooldown_iters': 2, 'max_iters': 2})
    ablate_here(cfg, '--dry_run')
    cmds = [line for line in capsys.readouterr().out.splitlines() if line.startswith('python train.py')]
    trunk = str(tmp_path / 'grid' / 'none' / 'seed1')
    assert [c.split('--out_dir=')[-1].split()[0] for c in cmds] == [trunk, f'{trunk}/cooldown2', f'{trunk}/cooldown4']
    assert all(c.endswith('--init_from=resume') and '--steps_after_fit=' + k in c for c, k in zip(cmds[1:], '46'))
    ablate_here(cfg)              # the trunk never fits: its branches are never fit too, and the grid is finished
    out = capsys.readouterr().out
    assert '[none seed 1] never fit: its cooldown branches are never fit too' in out and 'not trained' not in out
    assert os.path.exists(os.path.join(trunk, 'ckpt.pt')) and not os.path.exists(os.path.join(trunk, 'cooldown2'))
    ablate_here(cfg)          # rerun: the trunk is done and never fit, so its branches are not pending
    assert '1 runs, 1 finished, 0 to train' in capsys.readouterr().out
    res = json.load(open(tmp_path / 'grid' / 'results.json'))
    # and they are never fit at their points, as the trunk is: counted as area 0 there, not dropped
    assert [(a['point'], a['never_fit'], a['pending_seeds']) for a in res['arms'].values()] == [
        ('trunk', [1], []), (2, [1], []), (4, [1], [])]
    assert all(a['area']['never_fit_as_0']['per_seed'] == {'1': 0.0} for a in res['arms'].values())


def test_a_summary_from_before_a_rule_key_was_added_is_held_to_that_keys_old_meaning(tmp_path):
    """A results.json whose fixed rule lacks a key added since (its value then: RULE_ADDED's) is the same rule
    when the config keeps that value, and a changed rule when it does not."""
    cfg = configure(abl.study_settings(), [])
    fixed = {k: v for k, v in summary.rule_of(cfg).items() if k not in summary.RULE_ADDED}
    (tmp_path / 'results.json').write_text(json.dumps({'command': 'python ablate.py s.py', 'rule': {'fixed': fixed}}))
    assert summary.rule_change(cfg, ['s.py'], str(tmp_path)) is None
    with pytest.raises(SystemExit, match='fit_plus_reading=0 there, 4000 now'):
        summary.rule_change(cfg | {'fit_plus_reading': 4000}, ['s.py'], str(tmp_path))


def fixed_study(tmp_path, **extra):
    """A study of trunks at fixed steps (snapshots_at_iter='2,4', max_iters=4, cooldowns of 2): one arm, one seed."""
    return study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1', control='',
                 common={**TINY, 'data_dir': str(tmp_path / 'data'), 'snapshots_at_iter': '2,4', 'cooldown_iters': 2,
                         'max_iters': 4}, **extra)


def test_a_trunk_at_fixed_steps_plans_its_branches_in_at_dirs_and_they_train_fit_or_not(tmp_path, capsys):
    """A study of trunks at fixed steps: each trunk's branches are runs of the grid in <trunk>/at<k> (never
    a fit-relative cooldown<k>), that resume the snapshot the trunk writes at step k and stop at k + 2; a dry
    run lists them after their trunk. A trunk that finished without fitting still wrote its snapshots: its
    branches are not stranded as never fit, a lost one's is rebuilt without a fit (the line that does it, its
    trunk stopped at step 2), and they are named at their steps. A study whose arms mix the two kinds of point
    is refused."""
    from study.runs import lost, rebuild_command, strand, tag
    cfg = fixed_study(tmp_path)
    ablate_here(cfg, '--dry_run')
    cmds = [line for line in capsys.readouterr().out.splitlines() if line.startswith('python train.py')]
    trunk = str(tmp_path / 'grid' / 'none' / 'seed1')
    assert [c.split('--out_dir=')[-1].split()[0] for c in cmds] == [trunk, f'{trunk}/at2', f'{trunk}/at4']
    assert all(c.endswith('--init_from=resume') and f'--max_iters={k} ' in c and '--snapshots_at_iter= ' in c
               for c, k in zip(cmds[1:], (4, 6)))
    runs = planned(configure(abl.study_settings(), [cfg]))
    assert [(r.point, r.fixed_steps, r.cfg['max_iters']) for r in runs] == [('trunk', True, 4), (2, True, 4),
                                                                             (4, True, 6)]
    assert tag(runs[1]) == '[none seed 1, cooldown at step 2]'
    runs[0].state, runs[0].records = 'done', fit_log(None)                    # finished, never fit
    kept, never = strand(runs, [])
    assert kept == runs and never == []
    assert lost(runs[1], {runs[0].dir: runs[0]})
    rebuild, move, _ = rebuild_command(runs[1]).split(' && ')
    assert rebuild.endswith(f"--out_dir={trunk}/at2/rebuild --snapshots_at_iter=2 --max_iters=2")
    assert move == f"mv {trunk}/at2/rebuild/at2/ckpt.pt {trunk}/at2/ckpt.pt"
    mixed = study(tmp_path, 'mixed.py', arms={'none': {'snapshots_at_iter': '2,4', 'max_iters': 4},
                                              'wd': {'snapshots_after_fit': '2,4', 'steps_after_fit': 4}},
                  common={**TINY, 'data_dir': str(tmp_path / 'data'), 'cooldown_iters': 2})
    assert 'one kind of point' in refused(mixed, '--dry_run')
    # the reading near each run's fit + k: at fixed steps only, both given as steps, or neither
    assert 'fit_plus_window=1: these read a study at fixed steps' in refused(
        study(tmp_path, 'rel.py', fit_plus_reading=2, fit_plus_window=1), '--dry_run')
    for extra in ({'fit_plus_reading': 2}, {'fit_plus_reading': -2, 'fit_plus_window': 1}):
        assert 'give both as steps > 0' in refused(fixed_study(tmp_path, **extra), '--dry_run')
    assert 'must be below fit_plus_reading=2' in refused(fixed_study(tmp_path, fit_plus_reading=2, fit_plus_window=2),
                                                         '--dry_run')
    ablate_here(fixed_study(tmp_path, fit_plus_reading=2, fit_plus_window=1), '--dry_run')


@pytest.mark.slow   # ~30 s: a trunk and two branches trained and evaluated; the default run covers the parts above
def test_a_trunk_that_never_fits_by_its_fixed_steps_is_cooled_evaluated_and_marked_there(tmp_path, capsys):
    """End to end: a trunk at fixed steps that never fits (4 steps) writes its snapshots; its branches train
    from them, are evaluated like it, and are summarized at their steps with their measured areas, marked
    'not fit by then' in their records and tables. A branch whose folder and record are then lost is not trained:
    the grid prints the one line that rebuilds its snapshot, and once that line has run, a rerun trains the
    branch from it to the same numbers."""
    cfg = fixed_study(tmp_path, results_dir=str(tmp_path / 'results'))
    ablate_here(cfg)
    trunk = tmp_path / 'grid' / 'none' / 'seed1'
    assert all((trunk / d / files.EVAL_CACHE).exists() for d in ('.', 'at2', 'at4'))
    res = json.load(open(tmp_path / 'results' / 'results.json'))
    assert [(n, a['not_fit_by_then'], list(a['area']['per_seed'])) for n, a in res['arms'].items()] == [
        ('none at 4 uncooled', [1], ['1']), ('none at 2', [1], ['1']), ('none at 4', [1], ['1'])]
    records = tmp_path / 'results' / 'runs' / 'none'
    assert [json.load(open(records / f))['fit_by_then'] for f in ('seed1.json', 'seed1/at2.json', 'seed1/at4.json')] \
        == [False] * 3
    assert (res['long']['early'], res['long']['late'], res['long']['fixed_steps']) == (2, 4, True)
    assert (tmp_path / 'results' / 'results.md').read_text() == tables.format_markdown(res)
    shutil.rmtree(trunk / 'at2')
    os.remove(records / 'seed1' / 'at2.json')
    with pytest.raises(SystemExit):                  # not finished: exit 1
        ablate_here(cfg)
    said = [line for line in capsys.readouterr().out.splitlines() if 'its snapshot is gone' in line]
    assert len(said) == 1 and said[0].startswith('[none seed 1, cooldown at step 2] its snapshot is gone: rebuild '
                                                 'it with `python train.py ')
    line = said[0].split('`')[1].replace('python', sys.executable, 1)
    subprocess.run(line, shell=True, cwd=ROOT, check=True, capture_output=True, timeout=300)
    ablate_here(cfg)
    assert json.load(open(tmp_path / 'results' / 'results.json'))['arms'] == res['arms']


@pytest.mark.slow      # end to end: several tiny runs trained (7-11 s)
def test_dry_run_prints_independent_commands_and_trains_nothing(tmp_path, capsys):
    cfg = study(tmp_path)
    ablate_here(cfg, '--arms=wd', '--seeds=1', '--max_iters=2')
    assert not (tmp_path / 'grid' / 'none').exists()
    assert set(json.load(open(tmp_path / 'grid' / 'results.json'))['arms']) == {'wd'}   # not the arms it left out
    capsys.readouterr()
    before = sorted(p for p in (tmp_path / 'grid').rglob('*'))
    ablate_here(cfg, '--dry_run', '--max_iters=2', '--seeds=1')
    out = capsys.readouterr().out
    cmds = [line for line in out.splitlines() if line.startswith('python train.py')]
    assert len(cmds) == 1 and '--dropout_site=none' in cmds[0] and '--seed=1' in cmds[0]
    assert 'not written' in out                                          # the summary: printed, not written
    assert sorted(p for p in (tmp_path / 'grid').rglob('*')) == before
    subprocess.run(cmds[0].replace('python', sys.executable, 1), shell=True, cwd=ROOT, check=True,
                   capture_output=True, timeout=300)                   # as a scheduler would
    ablate_here(cfg, '--dry_run', '--max_iters=2', '--seeds=1')
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith('python train.py')]
    assert not (tmp_path / 'grid' / 'none' / 'seed1' / 'ablate_eval.json').exists()   # a dry run evaluates nothing
    ablate_here(cfg, '--arms=wd', '--max_iters=2', '--seeds=1')          # trains only wd; summarizes every arm
    assert '1 runs, 1 finished, 0 to train' in capsys.readouterr().out
    assert [a['seeds'] for a in json.load(open(tmp_path / 'grid' / 'results.json'))['arms'].values()] == [[1], [1]]
    # a continued-training study starts each seed from the same seed's run of another study
    source = str(tmp_path / 'grid' / 'wd' / 'seed{seed}')
    cont = study(tmp_path, 'cont.py', arms={'late': {'init_from': source, 'dropout_site': 'none'}},
                 grid_dir=str(tmp_path / 'cont'), control='')
    ablate_here(cont, '--dry_run', '--max_iters=2', '--seeds=1')
    assert f"--init_from={source.format(seed=1)}" in capsys.readouterr().out
    assert 'not a finished run yet' in refused(cont, '--dry_run', '--max_iters=2', '--seeds=2')


@pytest.mark.parametrize('args,words', [
    (['--arms=none,wdd'], ["unknown arm 'wdd'", 'none, wd']),
    (['--seeds='], ['seeds']),
    (['--max_iter=3'], ['max_iters']),
    (['--workers=0'], ['workers']),
    (['--control=nonee'], ["control='nonee'", 'none, wd']),
    (['--extrap_threshold=0'], ['extrap_threshold', '(0, 1]']),
    (['--fit_accuracy=1.5'], ['fit_accuracy', '(0, 1]']),
    (['--extrap_multiple=16'], ['extrap_multiple=16', "multiples='1,2'"]),
    (['--extrap_task=vt'], ["arm 'none'", "extrap_task='vt'", 'niah_single']),
    (['--beta1=1.5'], ["arm 'none'", 'beta1=1.5', '[0, 1)']),                # train.py's checks, before any run
    (['--seeds=1,1000000000000000000000000000000'], ["arm 'none'", 'seed=', '2**63']),
    (['--range_threshold=0'], ['range_threshold', '(0, 1]']),
    (['--eval_multiples=2,4'], ["arm 'none'", "eval_multiples='2,4'", 'no 1x']),   # no run could ever fit
    (['--seeds=1,1'], ["seeds='1,1'", 'seed 1 more than once']),
    (['--seed=5'], ['--seeds=5, not --seed=5']),
    (['--snapshots_after_fit=1,,2', '--steps_after_fit=4', '--cooldown_iters=1'], ["snapshots_after_fit='1,,2'"]),
    (['--snapshots_after_fit= ', '--steps_after_fit=4', '--cooldown_iters=1'], ["snapshots_after_fit=' '"]),
    (['--snapshots_at_iter=2,,4', '--cooldown_iters=1'], ["snapshots_at_iter='2,,4'", 'empty item']),
    (['--snapshots_at_iter=4,2', '--cooldown_iters=1'], ["snapshots_at_iter='4,2'", 'increasing positive']),
    (['--snapshots_at_iter=2,4', '--snapshots_after_fit=2', '--steps_after_fit=2', '--cooldown_iters=1'],
     ["snapshots_at_iter='2,4' and snapshots_after_fit='2'", 'not both']),
    (['--snapshots_at_iter=2,4', '--cooldown_iters=1', '--max_iters=6'], ['stops at its last snapshot', 'max_iters=4']),
    (['--snapshots_at_iter=2,4', '--cooldown_iters=1', '--late_snapshot=3'], ['late_snapshot=3', "'2,4'"]),
    (['--eval_variants=yarn,,ntk'], ['eval_variants', 'empty item']),
    (['--eval_variants=yarn2'], ["'yarn2'", 'pi, ntk, yarn']),
    (['--eval_variants=yarn', '--nope_every=1'], ["arm 'none'", 'rescales RoPE layers, and its model has none']),
    (['--eval_variants=decay'], ["arm 'none'", "'decay' rescales Mamba2 layers, and its model has none"]),
    (['--every_run_counts=True', '--steps_after_fit=2'], ['every_run_counts=True', "arm 'none'", 'steps_after_fit=0']),
    (['--comparisons={"x": [["none@yarn", "wd"]]}'], ['comparisons', "'yarn' is not one of eval_variants"]),
    (['--comparisons={"x": [["none", "wdd"]]}'], ['comparisons', "'wdd' is not an arm"]),
    (['--families={"x": ["wd\'s change"]}'], ['families', "\"wd's change\"", "add 'wd' to it"]),
    (['--families={"x": ["wd", "wd\'s change"]}'], ['families', 'only a study of snapshots']),
])
def test_bad_grid_input_is_one_line_before_anything_runs(tmp_path, args, words):
    msg = refused(study(tmp_path), *args)
    for w in words:
        assert w in msg, msg
    assert not (tmp_path / 'grid').exists() and not (tmp_path / 'data').exists()


def test_arms_that_differ_in_their_corpus_need_their_own_data_dirs(tmp_path):
    """Arms differing in a corpus setting (distractors) but sharing a data_dir passed the plan and failed after
    the first arm trained: refused at plan time, naming the setting and the fix; their own data_dirs plan."""
    hay = {'tasks': 'mqar_haystack', 'eval_tasks': 'mqar_haystack', 'block_size': 64}
    cfg = study(tmp_path, 'hay.py', arms={'d1': {**hay, 'distractors': 0.1}, 'd2': {**hay, 'distractors': 0.2}},
                control='d1')
    msg = refused(cfg, '--dry_run')
    assert "arms 'd1' and 'd2' share data_dir=" in msg and 'distractors=0.1' in msg and 'distractors=0.2' in msg, msg
    assert 'give each its own data_dir' in msg and not (tmp_path / 'data').exists()
    cfg = study(tmp_path, 'hay2.py', arms={'d1': {**hay, 'distractors': 0.1, 'data_dir': str(tmp_path / 'd1')},
                                           'd2': {**hay, 'distractors': 0.2, 'data_dir': str(tmp_path / 'd2')}},
                control='d1')
    runs = planned(configure(abl.study_settings(), [cfg], quiet=True))
    assert [r.arm for r in runs] == ['d1', 'd1', 'd2', 'd2']


def test_study_without_arms_or_with_a_bad_override_is_refused(tmp_path):
    no_arms = tmp_path / 'no_arms.py'
    no_arms.write_text(f"grid_dir = {str(tmp_path / 'grid')!r}\n")
    bad = study(tmp_path, 'bad.py', arms={'x': {'dropout_sit': 'none'}}, control='x')
    for cfg, words in ((str(no_arms), ['arms']), (bad, ["arm 'x'", 'dropout_site'])):
        msg = refused(cfg)
        assert all(w in msg for w in words), msg
    assert not (tmp_path / 'grid').exists()
    # end to end once: Python prints the message alone on stderr, no traceback
    out = ablate(bad, check=False)
    assert out.returncode != 0 and out.stderr.strip() == refused(bad), out.stderr


def a_run(d, cfg, selected=True):
    """Run (none, seed 1) in run dir d, with these settings."""
    return GridRun('none', 1, str(d), [], cfg, ['niah_single'], selected)


def logged(i):
    """A log record of train.py's shape, as the summary reads it."""
    return {'iter': i, 'fit_iter': None, 'length_eval': {'mqar': {'1x': 0.5}}}


def write_log(d, records):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'log.jsonl'), 'w') as f:
        f.write(''.join(json.dumps(r) + '\n' for r in records))


@pytest.mark.parametrize('saved,logged,want', [
    ({'iter_num': 40, 'finished': True}, [0, 20, 40], 'done'),       # stopped steps_after_fit after its fit
    ({'iter_num': 40, 'finished': True}, [0, 20], 'partial'),        # its final record is not logged yet
    ({'iter_num': 40, 'finished': False}, [0, 20, 40], 'partial'),
    ({'iter_num': 100, 'finished': True}, [0, 50, 100], 'done'),     # ran to max_iters
])
def test_state_of_runs_that_stop_early(tmp_path, saved, logged, want):
    cfg = {'max_iters': 100, 'dropout': 0.0}
    torch.save({'config': cfg, **saved, **dict.fromkeys(('model', 'optimizer', 'model_args', 'tokenizer', 'fit_iter'))},
               tmp_path / 'ckpt.pt')
    log = [{'iter': i, 'fit_iter': None, 'length_eval': {'mqar': {'1x': 0.5}}} for i in logged]
    write_log(tmp_path, log)
    run = a_run(tmp_path, cfg)
    assert state(run) == want
    assert run.records == (log if want == 'done' else None)   # read once, for the summary
    if want == 'done':                        # a log of the wrong shape is one line, not a traceback in the summary
        write_log(tmp_path, [dict(r, length_eval={'mqar': {'1x': 'abc'}}) for r in log])
        with pytest.raises(SystemExit, match="is not the log train.py writes .* and rerun this command"):
            state(a_run(tmp_path, cfg))


def test_a_rerun_with_other_fit_eval_settings_is_another_run_only_where_the_fit_gates_it(tmp_path):
    """With steps_after_fit the quick eval's interval, tasks and examples decide the fit, the decay
    and the stop: a rerun that changes them is refused; without it they only change what is logged."""
    saved = {'max_iters': 100, 'steps_after_fit': 40, 'eval_interval': 20, 'eval_samples': 64, 'eval_iters': 10}
    torch.save({'config': saved, 'iter_num': 60, 'finished': True,
                **dict.fromkeys(('model', 'optimizer', 'model_args', 'tokenizer', 'fit_iter'))}, tmp_path / 'ckpt.pt')
    write_log(tmp_path, [logged(i) for i in (0, 20, 40, 60)])
    run = lambda **kw: state(a_run(tmp_path, {**saved, **kw}))  # noqa: E731
    assert run(eval_iters=5) == 'done'
    for k, v in (('eval_interval', 50), ('eval_samples', 32)):
        with pytest.raises(SystemExit) as e:
            run(**{k: v})
        assert f'{k}={saved[k]!r}, study: {v!r}' in e.value.code and 'delete' in e.value.code
    assert state(a_run(tmp_path, {**saved, 'eval_interval': 50}, selected=False)) == 'other'
    ungated = {**saved, 'steps_after_fit': 0}
    torch.save({'config': ungated, 'iter_num': 100, 'finished': True,
                **dict.fromkeys(('model', 'optimizer', 'model_args', 'tokenizer', 'fit_iter'))}, tmp_path / 'ckpt.pt')
    write_log(tmp_path, [logged(i) for i in (0, 50, 100)])
    assert state(a_run(tmp_path, {**ungated, 'eval_interval': 50})) == 'done'


def test_a_foreign_checkpoint_is_one_line_naming_what_it_lacks(tmp_path):
    """A loadable torch file that train.py did not write (another project's ckpt.pt): one line that
    names the file and the keys it lacks, from the grid's state check and from train.py's resume."""
    torch.save({'state_dict': {}, 'epoch': 3}, tmp_path / 'ckpt.pt')
    with pytest.raises(SystemExit) as e:
        state(a_run(tmp_path, {}))
    assert "is not a checkpoint train.py wrote (no 'model', 'optimizer', 'model_args', ...)" in e.value.code
    assert 'mv ' in e.value.code and len(e.value.code.splitlines()) == 1
    with pytest.raises(SystemExit) as e:
        train_checks.load_start(str(tmp_path / 'ckpt.pt'), resume=True)
    assert 'not a checkpoint train.py wrote' in e.value.code and '--init_from=scratch' in e.value.code


def test_a_setting_train_py_gained_later_reads_as_its_old_value_in_older_runs():
    """rundir.ADDED: a checkpoint or record written before train.py had a setting trained as its value there
    (mqar_haystack's distractors 0.0, ...), so a study's committed records stay its runs."""
    from study.runs import differing
    now = settings_of(vars(train))
    old = {k: v for k, v in now.items() if k not in rundir.ADDED}
    assert set(rundir.ADDED) <= set(now) and differing(old, now) == []
    assert differing(old, now | {'distractors': 0.3}) == [('distractors', 0.0, 0.3)]


def test_reused_runs_are_the_source_studys_own_once_every_setting_is_checked_equal(tmp_path, monkeypatch):
    """reuse = {arm: 'study'}: the seeds the source study has are its runs (their dirs, so a missing one
    trains in its grid); other seeds train here. A setting that differs, or a cycle, is refused in one
    line that names it and the way out (--reuse={})."""
    monkeypatch.setattr(files, 'STUDY_CONFIGS', str(tmp_path))
    source = study(tmp_path, 'src.py', grid_dir=str(tmp_path / 'src'))
    here = study(tmp_path, 'here.py', seeds='1,2,3', reuse={'none': 'src'})
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        runs = planned(configure(abl.study_settings(), [here]))
    finally:
        os.chdir(cwd)
    dirs = {(r.arm, r.seed): r.dir for r in runs}
    assert dirs[('none', 1)] == str(tmp_path / 'src' / 'none' / 'seed1')
    assert dirs[('none', 3)] == str(tmp_path / 'grid' / 'none' / 'seed3')
    assert dirs[('wd', 1)] == str(tmp_path / 'grid' / 'wd' / 'seed1') and runs[0].reused == 'src/none'
    msg = refused(here, '--learning_rate=0.001')
    assert "arm 'none' reuses src's none runs" in msg and 'learning_rate=0.003 there, 0.001 here' in msg
    assert '--reuse={}' in msg
    study(tmp_path, 'src.py', reuse={'none': 'here'})                     # src now reuses here in turn
    assert 'reuses this study' in refused(here)
    assert 'no arm' in refused(study(tmp_path, 'x.py', reuse={'none': 'src/other'}))
    assert source and 'reuse=' in refused(study(tmp_path, 'y.py', reuse={'nope': 'src'}))
    # init_from_study: a continuation starts from the source study's run of its seed, its reuse followed
    study(tmp_path, 'src.py', grid_dir=str(tmp_path / 'src'))
    cont = study(tmp_path, 'cont.py', seeds='1,3', grid_dir=str(tmp_path / 'cont'), init_from_study='here/none')
    os.chdir(ROOT)
    try:
        runs = planned(configure(abl.study_settings(), [cont]))
    finally:
        os.chdir(cwd)
    assert {(r.arm, r.seed): r.cfg['init_from'] for r in runs} == {
        (arm, seed): str(tmp_path / where / 'none' / f'seed{seed}')
        for arm in ('none', 'wd') for seed, where in ((1, 'src'), (3, 'grid'))}
    assert 'here has no seed 5' in refused(cont, '--seeds=5')
    assert 'set no init_from' in refused(study(tmp_path, 'z.py', init_from_study='here/none',
                                                common={'init_from': 'x'}))


def test_the_study_sets_the_fit_rule_of_every_run(tmp_path):
    msg = refused(study(tmp_path, 'fa.py', arms={'none': {'dropout_site': 'none', 'fit_accuracy': 0.5}}))
    assert "arm 'none'" in msg and 'fit_accuracy' in msg and 'study config' in msg
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        cfg = configure(abl.study_settings(), [study(tmp_path), '--fit_accuracy=0.9'])
        runs = planned(cfg)
    finally:
        os.chdir(cwd)
    # train.py judges the fit as the summary does
    assert len(runs) == 4 and {r.cfg['fit_accuracy'] for r in runs} == {0.9}


def summarize(runs, cfg, argv):
    """outcomes.summarize with the study's list settings parsed here, as study.settings.check parses them."""
    variants = tuple(filter(None, cfg['eval_variants'].split(',')))
    pairs = {f: [(a, b, *(settings.parse_term(x, cfg['arms'], variants) for x in (a, b))) for a, b in ps]
             for f, ps in (cfg['comparisons'] or {}).items()}
    return outcomes.summarize(runs, cfg, settings.Lists(None, E.parse_multiples('multiples', cfg['multiples']),
                                                         variants, {}, pairs), argv)


def fake_run(tmp_path, arm, seed, acc_1x, acc_16x, log):
    """A finished run without training: its log.jsonl (its records, as state() reads them) and final eval."""
    d = str(tmp_path / arm / f'seed{seed}')
    write_log(d, log)
    return GridRun(arm, seed, d, [], {}, ['niah_single'], True, state='done', records=log,
               eval={'block_size': 128, 'length_eval': {'niah_single': {'1x': acc_1x, '16x': acc_16x}}})


def fit_log(fit_iter):
    """train.py's log of a run that fit at fit_iter (None: never): each record notes the fit so far."""
    return [{'iter': i, 'length_eval': {'niah_single': {'1x': 0.5}},
             'fit_iter': fit_iter if fit_iter is not None and i >= fit_iter else None} for i in range(0, 301, 50)] + \
           [{'iter': 300, 'length_eval': {'niah_single': {'1x': 0.5}}, 'fit_iter': fit_iter, 'final': True}]


def test_area_is_the_mean_over_multiples_and_range_the_last_multiple_held_from_1x():
    curve = {1: 1.0, 2: 0.8, 4: 0.6, 8: 0.3, 16: 0.55, 32: 0.0, 64: 0.0}
    area, reach = derive.area_and_range(curve, 0.5)
    assert area == pytest.approx(3.25 / 7) and reach == 4       # 16x's 0.55 comes after a fall: not in the range
    assert derive.area_and_range({1: 0.4, 2: 0.9}, 0.5) == (pytest.approx(0.65), 0)
    assert derive.area_and_range({1: 1.0, 2: None, 4: 1.0}, 0.5) == (1.0, 4)   # a skipped point is left out
    assert stats.seeds_for_shift(0.06, 0.05) == 12 and stats.seeds_for_shift(0.1, 0.05) == 32   # (2.8016 sd / 0.05)^2
    assert stats.seeds_for_shift(None, 0.05) is None
    # a small spread: the normal approximation says 2, but 5 seeds' smallest sign-flip p is 2/32 > 0.05
    assert stats.seeds_for_shift(0.01, 0.05) == 6 and stats.sign_flip([0.1] * 5)['p'] > 0.05
    assert stats.sign_flip([0.1] * 6)['p'] <= 0.05


def test_deterioration_rule_counts_two_consecutive_drops_after_the_fit_and_tests_against_the_control(tmp_path):
    """The study's deterioration rule (deteriorate_*): the quick eval at 4x >= 0.2 below its running
    maximum since the fit at 2 evals in a row; one dip, or a dip before the fit, does not count."""
    def log(*accs, fit_at=1):
        return [{'iter': i, 'length_eval': {'niah_single': {'1x': 1.0, '4x': a}},
                 'fit_iter': fit_at if i >= fit_at else None}
                for i, a in enumerate(accs)] + [{'iter': len(accs), 'length_eval': {'niah_single': {'1x': 1.0}},
                                                 'fit_iter': fit_at, 'final': True}]
    runs = [fake_run(tmp_path, 'none', 1, 1.0, 0.5, log(0.1, 0.9, 0.95, 0.9, 0.94)),        # no drop
            fake_run(tmp_path, 'none', 2, 1.0, 0.5, log(0.9, 0.1, 0.9, 0.8, 0.85, fit_at=2)),  # dip before the fit
            fake_run(tmp_path, 'wd', 1, 1.0, 0.5, log(0.1, 0.9, 0.7, 0.65, 0.9)),            # two in a row
            fake_run(tmp_path, 'wd', 2, 1.0, 0.5, log(0.1, 0.9, 0.6, 0.9, 0.6))]             # never two in a row
    outcomes.find_fit(runs)
    cfg = {k: getattr(abl, k) for k in ('base_config', 'multiples', 'eval_samples', 'fit_accuracy', 'extrap_threshold',
                                           'extrap_task', 'range_threshold', 'deteriorate_drop', 'deteriorate_evals',
                                           'delta', 'families', 'eval_variants', 'comparisons')}
    cfg |= {'grid_dir': str(tmp_path), 'common': {}, 'control': 'none', 'extrap_multiple': 16,
            'deteriorate_multiple': 4, 'arms': {'none': {}, 'wd': {'weight_decay': 0.1}}}
    res = summarize(runs, cfg, ['study.py'])
    assert res['arms']['none']['deterioration'] == {'count': 0, 'of': 2, 'seeds': []}
    assert res['arms']['wd']['deterioration'] | {'fisher_p': None} == \
        {'count': 1, 'of': 2, 'seeds': [1], 'fisher_p': None}
    assert res['arms']['wd']['deterioration']['fisher_p'] == pytest.approx(stats.fisher_exact(1, 1, 0, 2))
    md = tables.format_markdown(res)
    assert 'falls >= 0.2 below its running maximum since the fit at 2 quick evals in a row: none 0 of 2; ' \
           'wd 1 of 2 (Fisher' in md
    assert stats.deteriorates([0.9, 0.7, 0.9, 0.7], 0.2, 2) is False and stats.deteriorates([0.9, 0.7, 0.7], 0.2, 2)
    # a deterioration study's verdict is its rule: the area comes second there, and first where there is no rule
    text = tables.what_tests_support(res)
    assert 'The area paired by seed (secondary: the deterioration rule below' in text and 'Primary' not in text
    del res['rule']['deteriorates']
    assert 'Primary, the area paired by seed (from the paired difference' in tables.what_tests_support(res)
    # a study of families says each arm is against its family's control, not that this area is its primary outcome
    res['rule']['comparisons'] = {'primary': [['wd', 'none']]}
    text = tables.what_tests_support(res)
    assert 'The area paired by seed, each arm against the control in its family (' in text and 'Primary' not in text
    # an arm in no family is named as untested against the control, not as one with no fit run measured
    res['arms']['wd2'] = {k: v for k, v in res['arms']['wd'].items() if k != 'vs_control'}
    text = tables.what_tests_support(res)
    assert 'Not tested against none (in no family): wd2.' in text and 'no fit run measured' not in text


def test_summary_counts_outcomes_and_tests_arms_against_the_control(tmp_path):
    runs = [fake_run(tmp_path, 'none', 1, 1.0, 0.20, fit_log(100)),
            fake_run(tmp_path, 'none', 2, 1.0, 0.95, fit_log(200)),
            fake_run(tmp_path, 'none', 3, 1.0, 0.10, fit_log(300)),
            fake_run(tmp_path, 'vpad', 1, 1.0, 0.97, fit_log(150)),
            fake_run(tmp_path, 'vpad', 2, 1.0, 0.92, fit_log(250)),
            fake_run(tmp_path, 'vpad', 3, 0.5, 0.99, fit_log(None)),   # never fit: its 0.99 must not count
            fake_run(tmp_path, 'wd', 1, 1.0, 0.05, fit_log(None)),     # never fit at all: not tested
            GridRun('wd', 2, str(tmp_path / 'wd' / 'seed2'), [], {}, ['niah_single'], True, state='new')]
    outcomes.find_fit(runs)
    assert [r.fit_iter for r in runs] == [100, 200, 300, 150, 250, None, None, None]
    cfg = {k: getattr(abl, k) for k in ('base_config', 'multiples', 'eval_samples', 'control', 'fit_accuracy',
                                           'extrap_multiple', 'extrap_threshold', 'extrap_task', 'range_threshold',
                                           'deteriorate_multiple', 'deteriorate_drop', 'deteriorate_evals', 'delta',
                                           'families', 'eval_variants', 'comparisons')}
    # every arm continues the same runs
    cfg |= {'grid_dir': str(tmp_path), 'common': {'init_from': 'out/base/seed{seed}'},
            'arms': {'none': {'dropout_site': 'none'}, 'vpad': {'dropout_site': 'vpad'}, 'wd': {'weight_decay': 0.1}}}
    res = json.loads(json.dumps(summarize(runs, cfg, ['study.py'])))     # as results.json holds it
    none, vpad, wd = (res['arms'][a] for a in ('none', 'vpad', 'wd'))
    assert (none['runs'], none['fit'], none['never_fit']) == (3, 3, [])
    assert none['steps_to_fit'] == {'per_seed': {'1': 100, '2': 200, '3': 300}, 'median': 200, 'min': 100, 'max': 300}
    assert none['extrapolates'] | {'ci95': None} == {'count': 1, 'of': 3, 'seeds': [2], 'not_measured': [],
                                                     'share': 1 / 3, 'ci95': None, 'interval': 'Wilson score'}
    assert none['extrapolates']['ci95'] == pytest.approx(stats.wilson(1, 3))
    # vpad seed 3 never fit: counted apart, out of the extrapolation counts and the mean at 16x
    assert (vpad['runs'], vpad['fit'], vpad['never_fit']) == (3, 2, [3])
    assert (vpad['extrapolates']['count'], vpad['extrapolates']['of'], vpad['extrapolates']['seeds']) == (2, 2, [1, 2])
    assert vpad['accuracy_at_extrap']['per_seed'] == {'1': 0.97, '2': 0.92}
    assert vpad['accuracy_at_extrap']['mean'] == pytest.approx(0.945)
    assert vpad['tasks']['niah_single']['16']['per_seed']['3'] == 0.99      # still in the per-seed accuracies
    v = vpad['vs_control']
    assert v['fisher']['table'] == [[2, 0], [1, 2]]
    assert v['fisher']['p'] == pytest.approx(stats.fisher_exact(2, 0, 1, 2)) == pytest.approx(0.4)   # 4 / C(5, 2)
    assert v['fisher']['p_holm'] == pytest.approx(0.4)                     # the only arm tested
    assert v['permutation']['p'] == pytest.approx(stats.permutation_test([0.97, 0.92], [0.2, 0.95, 0.1])[0])
    assert v['permutation']['method'] == 'exact: all 10 splits'
    # by hand: {.97,.92} .53, {.97,.95} .55, {.2,.1} .80 of 10 reach .53
    assert v['permutation']['p'] == pytest.approx(0.3)
    # both continue out/base/seed{seed}: paired over the seeds fit in both (1, 2), d = 0.77, -0.03: all 4 patterns
    # reach it
    assert v['paired']['seeds'] == [1, 2] and v['paired']['p'] == pytest.approx(1.0)
    assert v['paired']['difference'] == pytest.approx((0.77 - 0.03) / 2)
    assert v['power']['seeds_per_arm'] == stats.seeds_for_power(1.0, 1 / 3)
    # the area (mean over the evaluated multiples) and the range, paired by seed against the control
    assert none['area']['per_seed'] == pytest.approx({'1': 0.6, '2': 0.975, '3': 0.55})
    assert none['range']['per_seed'] == {'1': 1, '2': 16, '3': 1} and none['range']['median'] == 1
    assert vpad['area']['per_seed'] == pytest.approx({'1': 0.985, '2': 0.96})            # seed 3 never fit: left out,
    assert vpad['area']['never_fit_as_0']['per_seed'] == pytest.approx({'1': 0.985, '2': 0.96, '3': 0.0})  # or 0
    a = v['area']['left_out']
    assert a['seeds'] == [1, 2] and a['difference'] == pytest.approx((0.385 - 0.015) / 2)
    assert a['p'] == pytest.approx(1.0)
    assert a['p_holm'] == pytest.approx(1.0) and a['ci95'] == [None, None]      # 2 seeds: the sign flip rejects no shift
    assert a['seeds_for_power'] == stats.seeds_for_shift(stats.mean_std([0.385, -0.015])[1], 0.05)
    assert v['area']['never_fit_as_0']['seeds'] == [1, 2, 3]
    assert (wd['runs'], wd['fit'], wd['never_fit'], wd['pending_seeds']) == (1, 0, [1], [2])
    assert wd['vs_control']['fisher'] is None and wd['vs_control']['permutation'] is None
    md = tables.format_markdown(res)
    assert '| vpad | 2 | 0.97 [0.81, 1.00], sd 0.018 | 16x | +0.185 [-inf, +inf] (' in md and '| 1.000 (1.000) |' in md
    assert f"| vpad | 3 | 2 | 200 (150..250) | 2/2, 1.00 [{stats.wilson(2, 2)[0]:.2f}, 1.00] |" in md
    assert '| 0.400 (0.400) | 0.300 | 1.000 (2 seeds) | 9 |' in md and '| none | 3 | 3 |' in md and '| control |' in md
    assert 'Pre-registered rule: a run fits at the first quick eval where the 1x accuracy' in md
    assert "Primary, the area paired by seed (from the paired difference's sign-flip test: 'higher' / 'lower'" in md
    # primary first
    assert "vpad against none, not resolved: [" in md and "(2 seeds, p 1.000, Holm 1.000). Secondary:" in md
    assert 'at 16x on the run\'s first eval task is >= 0.9; control: none.' in md
    assert '2 of 7 finished runs never fit (vpad seed 3; wd seed 1)' in md
    assert 'No arm differs from its control in how often it extrapolates at alpha 0.05 after Holm correction; ' \
           'the smallest adjusted p is 0.400 (vpad, raw 0.400)' in md
    assert 'no outcome could reach p <= 0.05 for vpad (2 vs 3: smallest possible p 0.100)' in md
    assert 'Not tested (no fit run measured at 16x): wd.' in md
    assert '| vpad | 3 † | 0.50 | - | - | - | 0.99 | - | - |' in md and '† never fit' in md
    assert '| wd | 1 | 0 | - | - | - | - | - | no seed fit in both | - |' in md
    # a significant difference is stated as one, and an arm with other init_from is not paired
    cfg['arms']['wd'] = {'init_from': 'other/seed{seed}'}
    runs = [fake_run(tmp_path, 'none', s, 1.0, 0.1, fit_log(100)) for s in range(1, 6)] + \
           [fake_run(tmp_path, 'wd', s, 1.0, 0.99, fit_log(100)) for s in range(1, 6)]
    outcomes.find_fit(runs)
    res = summarize(runs, cfg, ['study.py'])
    assert res['arms']['wd']['vs_control']['paired'] is None
    md = tables.format_markdown(res)
    assert 'wd extrapolates more often than none (5/5 vs 0/5 fit runs; Fisher p = 0.008, 0.008 after Holm)' in md
    assert 'By the mean 16x accuracy of fit runs: wd is above none (difference +0.89, permutation p = 0.008)' in md
    # no control: outcomes, but no tests
    res = summarize(runs, cfg | {'control': ''}, ['study.py'])
    assert 'vs_control' not in res['arms']['wd'] and 'No control is set' in tables.format_markdown(res)



def test_a_study_of_cooled_snapshots_compares_each_run_early_and_late_and_the_arms_at_the_late_point(tmp_path):
    """Planted areas on 6 seeds: the control loses 0.1 of area from its +1000 to its +10000 snapshot
    (lower), vpad keeps it (its change against the control's: higher, family 'sites'), none_wd loses
    0.2 (lower than the control's change, in its own family); every cooldown adds 0.05 to the
    trunk's uncooled area; the arms are compared at +10000 against none +10000; vpad's per-token
    shift grows with its loss of area, so their correlation is measured over its runs."""
    def run(arm, seed, point, area, shift=None):
        name = arm if point is None else f"{arm}/{point}"
        r = fake_run(tmp_path, name, seed, 1.0, 2 * area - 1.0, fit_log(100))     # area: the mean of 1x and 16x
        cfg = {'steps_after_fit': 10000}
        return dataclasses.replace(r, arm=arm, point=point, cfg=cfg,
                                   mismatch={'token_shift': shift} if shift is not None else None)
    runs, noise = [], [0.004, -0.003, 0.002, -0.001, 0.003, -0.002]
    for s, n in zip(range(1, 7), noise):
        for arm, early, late in (('none', 0.6, 0.5 + n), ('vpad', 0.6, 0.6 + n), ('none_wd', 0.6, 0.4 + n)):
            runs += [run(arm, s, 1000, early, 0.1 if arm == 'vpad' else None),
                     run(arm, s, 10000, late, 0.1 + 0.5 * (0.6 - late) + 0.01 * s if arm == 'vpad' else None),
                     run(arm, s, 'trunk', late - 0.05)]
    outcomes.find_fit(runs)
    cfg = configure(abl.study_settings(), []) | {
        'arms': {'none': {}, 'vpad': {'dropout_site': 'vpad'}, 'none_wd': {'weight_decay': 0.1}}, 'extrap_multiple': 16,
        'families': {'sites': ['vpad'], 'weight decay': ['none_wd']}, 'early_snapshot': 1000, 'late_snapshot': 10000,
        'deteriorate_multiple': 4}
    res = json.loads(json.dumps(summarize(runs, cfg, ['study.py'])))
    # the weight decay family named as two tests: none_wd at +10000 and its change, corrected together there
    joined = json.loads(json.dumps(summarize(
        runs, cfg | {'families': {'sites': ['vpad'], 'weight decay': ['none_wd', "none_wd's change"]}}, ['study.py'])))
    alone = res['arms']['none_wd +10000']['vs_control']['area']['left_out'], res['long']['change_vs_control']['none_wd']
    both = joined['arms']['none_wd +10000']['vs_control']['area'], joined['long']['change_vs_control']['none_wd']
    assert [t['p_holm'] for t in alone] == [t['p'] for t in alone]                      # each a family of one
    assert [both[0]['left_out']['p_holm'], both[1]['p_holm']] == stats.holm([t['p'] for t in alone])
    assert both[0]['never_fit_as_0']['p_holm'] == both[0]['left_out']['p_holm']     # the change counts there too
    assert len(both[1]['leave_one_out']['flips']) == 0 and both[0]['left_out']['p_holm'] > alone[0]['p_holm']
    early = joined['arms']['none_wd +1000']['vs_control']['area']['left_out']       # +1000: secondary, alone
    assert early['p_holm'] == early['p']
    assert joined['long']['change_vs_control']['vpad']['p_holm'] == res['long']['change_vs_control']['vpad']['p_holm']
    assert derive.rederive(json.loads(json.dumps(joined))) == joined     # as a committed summary is checked
    assert "none_wd's change with the weight decay family's tests at +10000" in tables.format_markdown(joined)
    assert set(res['arms']) == {f"{a} {p}" for a in cfg['arms'] for p in ('+1000', '+10000', '+10000 uncooled')}
    late = res['arms']['vpad +10000']['vs_control']
    assert (late['control'], late['family'], late['area']['left_out']['label']) == ('none +10000', 'sites', 'higher')
    L = res['long']
    assert L['change']['none']['difference'] == pytest.approx(-0.1 + sum(noise) / 6)
    assert L['change']['none']['label'] == 'lower'
    assert L['change']['vpad']['label'] == 'equivalent within +-0.05'
    assert (L['change_vs_control']['vpad']['label'], L['change_vs_control']['vpad']['family']) == ('higher', 'sites')
    assert L['change_vs_control']['none_wd']['label'] == 'lower' and 'none' not in L['change_vs_control']
    assert {a: t['difference'] for a, t in L['cooldown'].items()} == pytest.approx(dict.fromkeys(cfg['arms'], 0.05))
    assert set(L['mismatch']) == {'vpad'} and L['mismatch_vs_change']['runs'] == 6
    assert L['mismatch_vs_change']['r'] == pytest.approx(stats.pearson(
        [0.5 * -n + 0.01 * s for s, n in zip(range(1, 7), noise)], noise)[0])
    # the only arm with dropout: within it, the same runs and the same r
    (arm, within), = L['mismatch_vs_change']['by_arm'].items()
    assert arm == 'vpad' and within['runs'] == 6 and within['r'] == pytest.approx(L['mismatch_vs_change']['r'])
    assert within['ci95'] == pytest.approx(L['mismatch_vs_change']['ci95'])
    md = tables.format_markdown(res)
    assert '**Long training**' in md and '| vpad | +0.00' in md and '| sites |' in md
    assert 'none +10000 uncooled 0 of 6' in md and 'none +1000 0 of' not in md     # the old rule: on trunks only
    plots.plot(res, plots.step_curves(runs), str(tmp_path))             # the deterioration picture and the curves
    assert set(plots.step_curves(runs)) == set(cfg['arms'])             # of the trunks alone
    # the README's headline, from this study: the control's late 16x sits nearest 0.5
    assert headline.mid_range(res) == ('niah_single', '16')
    headline.draw_headline(res, str(tmp_path / 'headline.png'))


def test_variants_comparisons_and_never_fit_runs_at_every_cooled_point(tmp_path, capsys):
    """Planted areas on 8 seeds at +1000 and +4000: under 'yarn' every area gains 0.2 and vpad's a further
    0.1 (an interaction of +0.1), plain vpad is 0.1 above none; vpad's seed 8 trunk never fit, so its
    branches are never fit at both points, as area 0 in the second analysis, which then differs."""
    noise = [0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001, -0.004]

    def run(arm, seed, point, area, gain):
        r = fake_run(tmp_path, f"{arm}/{point}", seed, 1.0, 2 * area - 1.0, fit_log(100))  # area: mean of 1x, 16x
        yarn = {'block_size': 128, 'length_eval': {'niah_single': {'1x': 1.0, '16x': 2 * (area + gain) - 1.0}}}
        return dataclasses.replace(r, arm=arm, point=point, cfg={'steps_after_fit': 4000},
                                   evals={'yarn': yarn} if point != 'trunk' else {})
    runs = []
    for s, n in zip(range(1, 9), noise):
        for arm, area, gain in (('none', 0.5 + n, 0.2), ('vpad', 0.6 + 2 * n, 0.3 + n)):
            if (arm, s) == ('vpad', 8):
                trunk = dataclasses.replace(run(arm, s, 'trunk', 0.0, 0), records=fit_log(None))
                runs += [trunk] + [dataclasses.replace(run(arm, s, p, 0.0, 0), state='never fit', eval=None, evals={})
                                   for p in (1000, 4000)]
                continue
            runs += [run(arm, s, p, area, gain) for p in (1000, 4000)] + [run(arm, s, 'trunk', area - 0.05, 0)]
    outcomes.find_fit(runs)
    cfg = configure(abl.study_settings(), []) | {
        'arms': {'none': {}, 'vpad': {'dropout_site': 'vpad'}}, 'extrap_multiple': 16, 'early_snapshot': 1000,
        'late_snapshot': 4000, 'eval_variants': 'yarn',
        'comparisons': {'practice': [['none@yarn', 'vpad'], ['vpad@yarn - none@yarn', 'vpad - none']]}}
    res = json.loads(json.dumps(summarize(runs, cfg, ['study.py'])))
    for point in ('+1000', '+4000'):
        arm = res['arms'][f'vpad {point}']
        assert arm['never_fit'] == [8] and arm['area']['never_fit_as_0']['per_seed']['8'] == 0.0
        v = arm['vs_control']['area']
        assert len(v['left_out']['seeds']) == 7 and len(v['never_fit_as_0']['seeds']) == 8
        assert v['left_out']['p'] != v['never_fit_as_0']['p']            # the two analyses, at every cooled point
        yarn = arm['variants']['yarn']
        assert yarn['area']['mean'] == pytest.approx(sum(0.6 + 2 * n + 0.3 + n for n in noise[:7]) / 7)
        assert yarn['area']['never_fit_as_0']['per_seed']['8'] == 0.0
        assert yarn['vs_control']['left_out']['difference'] == pytest.approx(0.2 + sum(2 * n for n in noise[:7]) / 7)
    assert 'yarn' not in res['arms']['vpad +4000 uncooled'].get('variants', {})      # a trunk is evaluated plain
    tests = {(t['point'], t['a']): t for t in res['comparisons']}
    inter = tests[4000, 'vpad@yarn - none@yarn']['left_out']
    assert inter['difference'] == pytest.approx(0.1 + sum(n for n in noise[:7]) / 7) and inter['label'] == 'higher'
    first = tests[4000, 'none@yarn']['left_out']          # none under yarn against vpad plain: 0.7 vs 0.6
    assert first['difference'] == pytest.approx(0.1 + sum(-n for n in noise[:7]) / 7)
    assert first['p_holm'] == pytest.approx(min(1, 2 * min(first['p'], inter['p'])) if first['p'] <= inter['p'] else
                                            max(first['p'], 2 * inter['p']))        # Holm over the family of 2
    md = tables.format_markdown(res)
    assert '**Comparisons**' in md and '| +4000 | practice | (vpad@yarn - none@yarn) - (vpad - none) |' in md
    assert '**Under length-scaling variants**' in md and '| vpad +4000 | 0.60' in md
    rows = publish.rows('s', {'practice': 'beside yarn'}, res)          # the README's rows: the primary point's tests
    assert len(rows) == 2 and rows[1].startswith('| beside yarn | [s](s/README.md) | (vpad@yarn - none@yarn) '
                                                 '- (vpad - none) at +4000, +0.101') and rows[1].endswith(
        '| higher; changes without seed 1, 2, 3, 4, 5, 6, 7; never fit as 0: not resolved: [-0.049, +0.103] |')
    # (7 seeds all up give p 2/128, Holm over 2 0.031: any 6 give 0.062; the never-fit seed 8 as 0 says otherwise)
    plots.plot(res, {}, str(tmp_path))                      # one panel per variant (plots need matplotlib)
    assert (tmp_path / 'accuracy_by_variant.png').exists() or 'matplotlib is not installed' in capsys.readouterr().out
    # a line's legend names what its arm trained with: its overrides of the base config, on a line of their own
    assert plots.arm_label('vpad', {'overrides': {'dropout_site': 'vpad', 'dropout': 0.1}}, 'mean of 8 seeds') == \
        'vpad: mean of 8 seeds\n  dropout_site=vpad, dropout=0.1'
    assert plots.arm_label('none', {'overrides': {}}, 'median of 3 seeds').endswith('\n  the base config')


def fixed_steps_run(tmp_path, arm, seed, point, area, fit):
    """A finished run of a trunk at fixed steps 6000, 11000, 16000 that fit at `fit` (None: never): the trunk
    ('trunk', to 16000) or its branch cooled from `point`, with its area plain (the mean of 1x and 16x) and 0.2
    higher under yarn."""
    end = 16000 if point == 'trunk' else point + 1000
    log = [{'iter': i, 'length_eval': {'niah_single': {'1x': 0.5}},
            'fit_iter': fit if fit is not None and fit <= i else None} for i in range(end - 1000, end + 1, 500)]
    r = fake_run(tmp_path, f"{arm}/{point}", seed, 1.0, 2 * area - 1.0, log)
    yarn = {'block_size': 128, 'length_eval': {'niah_single': {'1x': 1.0, '16x': 2 * (area + 0.2) - 1.0}}}
    return dataclasses.replace(r, arm=arm, point=point, cfg={'max_iters': 16000}, fixed_steps=True,
                               evals={'yarn': yarn} if point != 'trunk' else {})


def test_at_fixed_steps_every_run_counts_in_the_primary_and_one_not_fit_by_then_is_marked(tmp_path, monkeypatch):
    """Planted areas on 7 seeds of trunks at fixed steps 6000, 11000 and 16000: none 0.6, vpad 0.05 above
    and rising 0.05 a point; none's seed 5 never fits (area 1.0 everywhere), vpad's seed 6 fits at 7000, in the
    decay of its branch at 6000 (area 0.55 there): it is not fit by then at 6000, fit at 11000 and 16000.
    Every run's measured area counts in the primary tests, the fit runs alone are tested beside them; the
    tables name the points 'at <step>' and mark the runs not fit by then."""
    noise = [0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001]
    fits = {('none', 5): None, ('vpad', 6): 7000}

    def run(arm, seed, point, area):
        return fixed_steps_run(tmp_path, arm, seed, point, area, fits.get((arm, seed), 3000))

    def area(arm, seed, point):
        if (arm, seed) == ('none', 5):
            return 1.0
        if (arm, seed, point) == ('vpad', 6, 6000):
            return 0.55
        return 0.6 + noise[seed - 1] + (0.05 * (1 + (point - 6000) // 5000) + noise[seed - 1] if arm == 'vpad' else 0)
    runs = [run(arm, s, p, area(arm, s, 16000 if p == 'trunk' else p)) for s in range(1, 8) for arm in ('none', 'vpad')
            for p in (6000, 11000, 16000, 'trunk')]
    outcomes.find_fit(runs)
    cfg = configure(abl.study_settings(), []) | {
        'arms': {'none': {}, 'vpad': {'dropout_site': 'vpad'}}, 'extrap_multiple': 16, 'early_snapshot': 6000,
        'late_snapshot': 16000, 'eval_variants': 'yarn', 'families': {'sites': ['vpad']},
        'comparisons': {'yarn': [['vpad@yarn', 'none@yarn']]}}
    res = json.loads(json.dumps(summarize(runs, cfg, ['study.py'])))
    assert set(res['arms']) == {f"{a} at {p}" for a in cfg['arms'] for p in ('6000', '11000', '16000', '16000 uncooled')}
    early, late = res['arms']['vpad at 6000'], res['arms']['vpad at 16000']
    assert (early['not_fit_by_then'], early['never_fit'], late['not_fit_by_then']) == ([6], [], [])
    assert res['arms']['none at 11000']['not_fit_by_then'] == [5] and res['arms']['none at 11000']['fit'] == 6
    assert early['area']['per_seed']['6'] == pytest.approx(0.55) and '6' not in early['area']['fit_runs_only']['per_seed']
    t, fit_only = early['vs_control']['area']['left_out'], early['vs_control']['area']['fit_runs_only']
    d = {s: area('vpad', s, 6000) - area('none', s, 6000) for s in range(1, 8)}
    assert (len(t['seeds']), len(fit_only['seeds'])) == (7, 5) and 'never_fit_as_0' not in early['vs_control']['area']
    assert t['difference'] == pytest.approx(sum(d.values()) / 7)
    assert fit_only['difference'] == pytest.approx(sum(d[s] for s in (1, 2, 3, 4, 7)) / 5)
    assert late['vs_control']['area']['left_out']['label'] == 'not resolved: [-0.048, +0.152]'    # none seed 5's 1.0
    assert late['vs_control']['area']['fit_runs_only']['label'] == 'higher'
    assert early['variants']['yarn']['area']['per_seed']['6'] == pytest.approx(0.75)      # measured under yarn too
    L = res['long']
    assert (L['fixed_steps'], L['early'], L['late']) == (True, 6000, 16000)
    assert L['change']['vpad']['difference'] == pytest.approx(
        sum(area('vpad', s, 16000) - area('vpad', s, 6000) for s in range(1, 8)) / 7)
    fit = L['fit_runs_only']              # beside: the runs fit by 6000 (vpad's seed 6 fit later, none's 5 never)
    assert fit['change']['vpad']['seeds'] == [1, 2, 3, 4, 5, 7] and fit['change']['none']['seeds'] == [1, 2, 3, 4, 6, 7]
    v = fit['change_vs_control']['vpad']
    assert v['seeds'] == [1, 2, 3, 4, 7] and v['family'] == 'sites' and 'label' in v and 'p_holm' in v
    assert v['difference'] == pytest.approx(sum(area('vpad', s, 16000) - area('vpad', s, 6000) - area('none', s, 16000)
                                                + area('none', s, 6000) for s in (1, 2, 3, 4, 7)) / 5)
    # a family that names the change corrects each analysis's change with that analysis's tests at 16000
    joined = summarize(runs, cfg | {'families': {'sites': ['vpad', "vpad's change"]}}, ['study.py'])
    joined['long']['change_vs_control']['vpad']['p'] = 1.0      # (were it counted in the fit runs' family too,
    derive.rederive(joined)                                   # that family's Holm p would change)
    for which, change in (('left_out', joined['long']['change_vs_control']['vpad']),
                          ('fit_runs_only', joined['long']['fit_runs_only']['change_vs_control']['vpad'])):
        late = joined['arms']['vpad at 16000']['vs_control']['area'][which]
        assert [late['p_holm'], change['p_holm']] == stats.holm([late['p'], change['p']]), which
    assert [(t['point'], sorted(t)) for t in res['comparisons']] == [
        (p, ['a', 'b', 'family', 'fit_runs_only', 'left_out', 'point']) for p in (6000, 11000, 16000)]
    assert 'vpad@yarn vs none@yarn at 16000' in derive.labels(res)
    md = tables.format_markdown(res)
    for text in ('| vpad at 6000 | 7 (1) | 0.64 [0.60, 0.67], sd 0.039 | 0.65 [0.65, 0.66] |',
                 '| fit runs only: paired difference, p (Holm) |',
                 "| +0.150 (6 seeds), 0.031 (0.031): higher, unlike the primary's verdict |",
                 '| vpad at 6000 | 6 (not fit by then) |', '| none at 16000 | 5 (not fit by then) |',
                 '| arm | change at 6000 -> at 16000 (mean [95% CI])', '| at 16000 | yarn | vpad@yarn - none@yarn |',
                 'primary at 16000, the other points secondary', '5 of 56 runs at their points were not fit by then',
                 "Not fit by then: the run's fit came after", '| vpad at 16000 | yarn |', 'fit runs only: p (Holm) |',
                 'Fit runs only: the same over the runs fit by step 6000 (so by step 16000 too;'):
        assert text in md, text
    assert '+6000' not in md and 'never fit as 0' not in md and '†' not in md
    rows = publish.rows('s', {'sites': 'c', 'yarn': 'y'}, res)        # the README's rows, at the primary point
    assert rows[0].startswith('| c | [s](s/README.md) | vpad vs none at 16000: ') and \
        rows[0].endswith('not resolved: [-0.048, +0.152]; changes without seed 5; fit runs only: higher |')
    assert rows[1].startswith('| y | [s](s/README.md) | vpad@yarn - none@yarn at 16000, +0.094')
    drawn = {}
    monkeypatch.setattr(E, 'plot_panels', lambda panels, draw, path, *a, **k: drawn.update({os.path.basename(path):
                                                                                          panels}))
    plots.plot(res, {}, str(tmp_path))
    assert drawn['accuracy_vs_length.png'] == [f"niah_single, cooled at {p}" for p in (6000, 11000, 16000)]


def test_with_every_run_counts_each_run_of_equal_steps_counts_fit_or_not(tmp_path):
    """every_run_counts: runs that all train the same steps count with their measured area whether they fit or
    not (none's seed 5 never fits: area 1.0 counts, and is left out of the fit runs only); the comparisons of
    variants count every run as well; the tables mark the run not fit by then and never call it never fit."""
    noise = [0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001]

    def area(arm, seed):
        return 1.0 if (arm, seed) == ('none', 5) else 0.6 + noise[seed - 1] + (0.1 if arm == 'vpad' else 0)

    def run(arm, seed):
        fit = None if (arm, seed) == ('none', 5) else 3000
        log = [{'iter': i, 'length_eval': {'niah_single': {'1x': 0.5}}, 'fit_iter': fit if fit and fit <= i else None}
               for i in range(0, 10001, 2500)]
        r = fake_run(tmp_path, arm, seed, 1.0, 2 * area(arm, seed) - 1.0, log)
        decay = {'block_size': 128, 'length_eval': {'niah_single': {'1x': 1.0, '16x': 2 * area(arm, seed) - 0.8}}}
        return dataclasses.replace(r, cfg={'max_iters': 10000}, fixed_steps=True, evals={'decay': decay})
    runs = [run(arm, s) for s in range(1, 8) for arm in ('none', 'vpad')]
    outcomes.find_fit(runs)
    cfg = configure(abl.study_settings(), []) | {
        'arms': {'none': {}, 'vpad': {'dropout_site': 'vpad'}}, 'extrap_multiple': 16, 'every_run_counts': True,
        'eval_variants': 'decay', 'comparisons': {'primary': [['vpad@decay', 'none@decay'], ['vpad', 'none']]}}
    res = json.loads(json.dumps(summarize(runs, cfg, ['study.py'])))
    none, vpad = res['arms']['none'], res['arms']['vpad']
    assert (none['not_fit_by_then'], none['never_fit'], none['runs']) == ([5], [], 7)
    assert none['area']['per_seed']['5'] == pytest.approx(1.0) and '5' not in none['area']['fit_runs_only']['per_seed']
    t = vpad['vs_control']['area']
    assert len(t['left_out']['seeds']) == 7 and len(t['fit_runs_only']['seeds']) == 6
    assert t['left_out']['difference'] == pytest.approx(sum(area('vpad', s) - area('none', s) for s in range(1, 8)) / 7)
    assert t['fit_runs_only']['label'] == 'higher'
    decay, plain = res['comparisons']
    assert len(decay['left_out']['seeds']) == 7 and decay['left_out']['p_holm'] == plain['left_out']['p_holm'] or \
        decay['left_out']['p_holm'] >= decay['left_out']['p']
    assert 'every run trains the same steps' in res['rule']['fixed_steps']
    md = tables.format_markdown(res)
    assert '| none | 7 (1) |' in md and 'never fit as 0' not in md


@pytest.mark.slow      # end to end: several tiny runs trained (7-11 s)
def test_a_study_at_fixed_steps_is_also_read_near_each_runs_own_fit_plus_k(tmp_path):
    """fit_plus_reading=4000, fit_plus_window=1500 on planted runs at 6000, 11000, 16000 (areas 0.5 + 0.01 x the
    point's index + seed/100 for none, 0.1 higher for vpad): a run fit at 3000 is read at 6000 (fit + 4000 = 7000),
    at 6500 at 11000 (10500), at 5500 at 11000 (9500: the window's edge, inside); fit at 9000 it has none (13000
    lies 2000 from 11000), nor at 4750 (8750: 2250 from 11000) or 4500 (8500: 2500 from both), nor never fit.
    The test pairs the seeds where both arms have a point, whichever points they are."""
    fits = {'none': [3000, 3000, 6500, 3000, 4750, None, 5500, 3000],
            'vpad': [3000, 6500, 6500, 9000, 3000, 3000, 3000, 4500]}
    index = {6000: 0, 11000: 1, 16000: 2}

    def area(arm, seed, point):
        return 0.5 + 0.01 * index[16000 if point == 'trunk' else point] + seed / 100 + (0.1 if arm == 'vpad' else 0)
    runs = [fixed_steps_run(tmp_path, arm, s, p, area(arm, s, p), fits[arm][s - 1]) for s in range(1, 9)
            for arm in fits for p in (6000, 11000, 16000, 'trunk')]
    outcomes.find_fit(runs)
    cfg = configure(abl.study_settings(), []) | {
        'arms': {'none': {}, 'vpad': {'dropout_site': 'vpad'}}, 'extrap_multiple': 16, 'early_snapshot': 6000,
        'late_snapshot': 16000, 'families': {'sites': ['vpad']}, 'fit_plus_reading': 4000, 'fit_plus_window': 1500}
    F = json.loads(json.dumps(summarize(runs, cfg, ['study.py'])))['long']['fit_plus']
    assert F['points'] == {'none': {'1': 6000, '2': 6000, '3': 11000, '4': 6000, '7': 11000, '8': 6000},
                           'vpad': {'1': 6000, '2': 11000, '3': 11000, '5': 6000, '6': 6000, '7': 6000}}
    assert F['area']['vpad']['2'] == pytest.approx(area('vpad', 2, 11000))
    t = F['vs_control']['vpad']
    assert t['seeds'] == [1, 2, 3, 7] and t['family'] == 'sites'     # 4, 8: none only; 5, 6: vpad only
    assert t['difference'] == pytest.approx((0.1 + 0.11 + 0.1 + 0.09) / 4) and t['p_holm'] == t['p'] and 'label' in t
    md = tables.format_markdown(summarize(runs, cfg, ['study.py']))
    assert 'each run at its cooled point within +-1500 steps of its own fit + 4000' in md
    assert '| none | 6 (4 at 6000, 2 at 11000) |' in md and '| vpad | 6 (4 at 6000, 2 at 11000) |' in md
    wide = configure(abl.study_settings(), []) | cfg | {'fit_plus_window': 2500}
    F = summarize(runs, wide, ['study.py'])['long']['fit_plus']
    assert F['points']['vpad']['4'] == 11000 and F['points']['none']['5'] == 11000   # 8750: 2250 from 11000
    assert F['points']['vpad']['8'] == 6000                   # 8500: 2500 from both, within +-2500: the earlier
    assert summarize(runs, cfg | {'fit_plus_reading': 0, 'fit_plus_window': 0},
                              ['study.py'])['long'].get('fit_plus') is None


def test_the_mismatch_correlation_is_also_given_within_each_arm():
    """Two sites whose shift growth and area change are unrelated run by run, but one grows more and
    gains more on average: pooled over the arms r is large, within each arm it is 0."""
    growth, change = [1, 2, 3, 4, 5], [0.01, -0.01, 0.0, -0.01, 0.01]          # uncorrelated: sum of products 0
    arms_out = {}
    for arm, g0, c0 in (('x', 0, 0.0), ('y', 10, 0.2)):
        for point, g, c in ((1000, [0] * 5, [0.0] * 5), (10000, growth, change)):
            arms_out[f"{arm} +{point}"] = {
                'arm': arm, 'point': point,
                'area': {'per_seed': {str(s): 0.5 + (c0 + dc if point == 10000 else 0) for s, dc in zip(range(1, 6), c)}},
                'mismatch_per_seed': {str(s): {'token_shift': 0.1 + 0.01 * (g0 + dg if point == 10000 else 0)}
                                      for s, dg in zip(range(1, 6), g)}}
    cfg = {'early_snapshot': 1000, 'late_snapshot': 10000, 'delta': 0.05, 'arms': {'x': {}, 'y': {}},
           'control': '', 'families': {}}
    long = json.loads(json.dumps(outcomes.long_training(arms_out, cfg)))
    m = long['mismatch_vs_change']
    pooled = stats.pearson([0.01 * g for g in growth] + [0.01 * (10 + g) for g in growth],
                           change + [0.2 + c for c in change])[0]
    assert m['runs'] == 10 and m['r'] == pytest.approx(pooled) and pooled > 0.9
    assert {a: (c['runs'], c['r']) for a, c in m['by_arm'].items()} == {'x': (5, pytest.approx(0, abs=1e-9)),
                                                                       'y': (5, pytest.approx(0, abs=1e-9))}
    text = '\n'.join(tables.long_training_tables({'long': long, 'rule': {'control': '', 'label': 'labels'}}))
    assert f"r = {pooled:+.2f}" in text and 'within each arm' in text and 'x r = +0.00' in text
    # x's shift grows by 0.01-0.05 eval sds on 5 runs (p 1/16, as low as 5 seeds go: no shift is rejected at 0.05):
    # a shift, not area, so no margin of area makes it equivalent within +-0.05; the table reads it as the summary
    assert '| x | 0.100 | 0.130 | +0.030 [-inf, +inf] | 5 | 0.062 | not resolved: [-inf, +inf] |' in text


# --- cluster launchers (submitit). The tests need submitit (.ci/run installs it): none skips without it.

def ablate_here(*args):
    """ablate.py in this process: a job submitted without --wait outlives the call (a subprocess
    would hold the output pipes open until its jobs end)."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        ablate_main(list(args))
    finally:
        os.chdir(cwd)


def job_files(grid, name='job.json'):
    return {os.path.relpath(d, grid): json.load(open(os.path.join(d, name)))
            for d, _, files in os.walk(grid) if name in files}


def fake_slurm(tmp_path, monkeypatch, sbatch):
    """sbatch, srun and sacct as shell scripts, first on PATH: what a cluster answers, without one (and
    whether or not this machine has Slurm). sacct, which submitit's job objects ask, prints $FAKE_SLURM/sacct
    (the states a test sets), or fails as on a cluster without accounting if $FAKE_SLURM/no_accounting
    exists; srun is never called (no job runs)."""
    import submitit
    fake = tmp_path / 'slurm'
    (fake / 'bin').mkdir(parents=True)
    sacct = ('[ -e "$FAKE_SLURM/no_accounting" ] && { echo "sacct: error: Slurm accounting storage is disabled" >&2; '
             'exit 1; }\ncat "$FAKE_SLURM/sacct" 2>/dev/null || echo "JobID|State|NodeList"')
    for name, text in (('sbatch', sbatch), ('srun', 'exit 0'), ('sacct', sacct)):
        (fake / 'bin' / name).write_text('#!/bin/sh\n' + text + '\n')
        (fake / 'bin' / name).chmod(0o755)
    monkeypatch.setenv('PATH', f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv('FAKE_SLURM', str(fake))
    submitit.SlurmJob.watcher.clear()          # (job ids repeat across tests: no state of another test's)
    return fake


@pytest.mark.slow   # ~11 s; the Slurm tests cover the same path on a cluster; .ci/run runs -m slow
def test_submitit_local_trains_evaluates_and_a_rerun_submits_nothing(tmp_path, capsys):
    """submitit_local jobs (processes here) train a run and then, in the same job, evaluate it. A rerun while its
    job runs does not submit it again; --wait waits for it; a rerun after that submits nothing and summarizes the
    same, as the local launcher does from the same caches. One run: the arrays are the slurm test's."""
    cfg = study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1', results_dir=str(tmp_path / 'results'))
    grid, out, run_dir = tmp_path / 'grid', tmp_path / 'results', tmp_path / 'grid' / 'none' / 'seed1'
    args = [cfg, '--launcher=submitit_local', '--eval_on=submitit_local', '--slurm_cpus_per_run=1']
    ablate_here(*args)                                                   # submits and returns
    first = capsys.readouterr().out
    assert '1 runs, 0 finished, 1 to train or evaluate as submitit_local jobs' in first
    assert first.count('submitted job') == 1
    info = json.load(open(run_dir / 'job.json'))
    ablate_here(*args)                                                   # at once: the job has not finished
    again = capsys.readouterr().out
    assert f"job {info['job_id']} is RUNNING: not resubmitted" in again and 'submitted job' not in again
    assert '1 job(s) queued or running' in again
    ablate_here(*args, '--wait')                                         # waits for that job
    waited = capsys.readouterr().out
    assert 'submitted job' not in waited and f"job {info['job_id']} ended (FINISHED)" in waited
    assert 'FAILED' not in waited and 'not trained' not in waited
    res = json.load(open(out / 'results.json'))
    assert res['command'] == f'python ablate.py {cfg}'              # how the runs were launched does not matter
    assert json.load(open(out / 'runs' / 'none' / 'seed1.json'))['eval']['record'] == \
        json.load(open(run_dir / 'ablate_eval.json'))['record']        # recorded from what the job cached
    arm = res['arms']['none']
    assert arm['seeds'] == [1] and arm['pending_seeds'] == [] and arm['runs'] == 1
    assert set(arm['tasks']['niah_single']) == {'1', '2'} and arm['mismatch_per_seed']['1']['layers'] == 0
    jobs = job_files(grid)
    assert set(jobs) == {'none/seed1'} and jobs['none/seed1'] == info
    assert info['launcher'] == 'submitit_local' and info['folder'] == str(grid / 'submitit')
    # the job ran the local pool's commands, into the run's own train.log and eval.log
    log = open(run_dir / 'train.log').read()
    assert log.startswith(f'$ {sys.executable} train.py tests/base_config.py') and '--seed=1' in log.splitlines()[0]
    assert 'final eval: 3 examples' in (run_dir / 'eval.log').read_text()
    rec = json.load(open(run_dir / 'ablate_eval.json'))['record']
    assert {m[:-1]: a for m, a in rec['length_eval']['niah_single'].items()} == \
        {m: p['per_seed']['1'] for m, p in arm['tasks']['niah_single'].items()}
    # a rerun submits nothing, trains nothing and summarizes the same
    before = mtimes(grid)
    ablate_here(*args, '--wait')
    again = capsys.readouterr().out
    assert '1 finished, 0 to train' in again and 'submitted job' not in again
    assert mtimes(grid) == before and job_files(grid) == jobs
    assert json.load(open(out / 'results.json'))['arms'] == res['arms']
    # in the job or the default local eval: one summary (it reads the same caches, computes nothing)
    ablate_here(cfg)
    assert 'final eval' not in capsys.readouterr().out and json.load(open(out / 'results.json'))['arms'] == res['arms']


@pytest.mark.slow   # ~30 s: a trunk and its two branches as submitit_local jobs; .ci/run runs -m slow
def test_a_launcher_submits_a_trunks_branches_once_it_has_written_their_snapshots(tmp_path, capsys):
    """--launcher=submitit_local --wait on a trunk at fixed steps: its job first, its branches' jobs once it has
    written their snapshots; every run finished and summarized, none said to have failed."""
    cfg = fixed_study(tmp_path, results_dir=str(tmp_path / 'results'))
    ablate_here(cfg, '--launcher=submitit_local', '--slurm_cpus_per_run=1', '--wait')
    out = capsys.readouterr().out
    assert '2 cooldown branch(es) wait for the snapshot of their trunk' in out
    assert out.count('submitted job') == 3 and 'FAILED' not in out and 'not trained' not in out, out
    res = json.load(open(tmp_path / 'results' / 'results.json'))
    assert [(a['seeds'], a['pending_seeds']) for a in res['arms'].values()] == [([1], [])] * 3


def test_slurm_submits_a_job_array_and_resubmits_only_ended_jobs(tmp_path, monkeypatch, capsys):
    # a fake sbatch numbers the submissions from 4242 and keeps each batch script
    fake = fake_slurm(tmp_path, monkeypatch, 'n=$(( $(cat "$FAKE_SLURM/n" 2>/dev/null || echo 4241) + 1 ))\n'
                      'echo $n > "$FAKE_SLURM/n"; cp "$1" "$FAKE_SLURM/sbatch$n.sh"; echo "Submitted batch job $n"')
    cfg = study(tmp_path)
    grid = tmp_path / 'grid'
    args = [cfg, '--launcher=slurm', '--slurm_partition=gpu', '--slurm_gpus_per_run=2', '--slurm_time_min=90',
            '--slurm_mem_gb=16', '--slurm_extra=account=lab,qos=high']
    ablate_here(*args)
    script = (fake / 'sbatch4242.sh').read_text()
    for flag in ('partition=gpu', 'gpus-per-node=2', 'cpus-per-task=4', 'time=90', 'mem=16GB', 'account=lab',
                 'qos=high', 'array=0-3%4'):
        assert f'#SBATCH --{flag}' in script, script
    # seed by seed across the arms, as the local pool goes
    ids = {d: info['job_id'] for d, info in job_files(grid).items()}
    assert ids == {'none/seed1': '4242_0', 'wd/seed1': '4242_1', 'none/seed2': '4242_2', 'wd/seed2': '4242_3'}
    assert all(info['launcher'] == 'slurm' for info in job_files(grid).values())
    assert not list(grid.rglob('ckpt.pt'))
    assert [a['pending_seeds'] for a in json.load(open(grid / 'results.json'))['arms'].values()] == [[1, 2], [1, 2]]
    # what each job runs: the local pool's command (its resume picked when the job starts: run_job); no eval in
    # the job, as eval_on is local
    with open(grid / 'submitit' / '4242_2_submitted.pkl', 'rb') as f:
        cmds, run_dir, threads = pickle.load(f).args
    assert run_dir == str(grid / 'none' / 'seed2') and threads == 4 and len(cmds) == 1
    assert cmds[0][1:3] == ['train.py', 'tests/base_config.py'] and '--seed=2' in cmds[0]
    capsys.readouterr()
    # sacct: one running, one queued, one preempted (Slurm requeues it), one failed: only that one goes again
    (fake / 'sacct').write_text('JobID|State|NodeList\n4242_0|RUNNING|n1\n4242_1|PENDING|None assigned\n'
                                '4242_2|FAILED|n2\n4242_3|PREEMPTED|n3\n')
    ablate_here(*args)
    out = capsys.readouterr().out
    assert 'job 4242_0 is RUNNING: not resubmitted' in out and 'job 4242_1 is PENDING: not resubmitted' in out
    assert 'job 4242_2 ended (FAILED) with its work not done: resubmitting' in out
    assert 'job 4242_3 is PREEMPTED: not resubmitted' in out
    assert {d: info['job_id'] for d, info in job_files(grid).items()} == \
        {'none/seed1': '4242_0', 'wd/seed1': '4242_1', 'none/seed2': '4243', 'wd/seed2': '4242_3'}   # (one job)
    # a cluster without accounting cannot say how its jobs ended: refused in one line, before anything is submitted
    (fake / 'no_accounting').write_text('')
    msg = refused(*args)
    assert msg.startswith("--launcher=slurm reads each job's state from Slurm's accounting, and sacct does not answer "
                          "here (sacct: error: Slurm accounting storage is disabled)"), msg
    assert not (fake / 'sbatch4244.sh').exists()


def test_a_jobs_gpus_follow_the_runs_device_and_a_refused_gres_names_the_key(tmp_path, monkeypatch, capsys):
    fake = fake_slurm(tmp_path, monkeypatch, 'n=$(( $(cat "$FAKE_SLURM/n" 2>/dev/null || echo 4241) + 1 ))\n'
                      'echo $n > "$FAKE_SLURM/n"; cp "$1" "$FAKE_SLURM/sbatch$n.sh"; echo "Submitted batch job $n"')
    cfg = study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1')
    args = [cfg, '--launcher=slurm', '--slurm_partition=cpu']
    for n, (device, gpus) in enumerate((('cpu', None), ('auto', None), ('cuda', 1)), start=4242):
        # cuda: the node's, not this host's
        ablate_here(*args, f'--device={device}', f'--grid_dir={tmp_path / device}')
        script = (fake / f'sbatch{n}.sh').read_text()
        assert ('#SBATCH --gpus-per-node=1' in script) == (gpus == 1), (device, script)
    ablate_here(*args, '--device=cpu', '--slurm_gpus_per_run=2', f'--grid_dir={tmp_path / "two"}')
    assert '#SBATCH --gpus-per-node=2' in (fake / 'sbatch4245.sh').read_text()
    (fake / 'bin' / 'sbatch').write_text('#!/bin/sh\necho "sbatch: error: Invalid generic resource (gres) '
                                         'specification" >&2; exit 1\n')
    msg = refused(*args, '--device=cuda', f'--grid_dir={tmp_path / "gres"}')
    assert 'Invalid generic resource (gres) specification' in msg and '--slurm_gpus_per_run=N' in msg, msg


def test_a_jobs_end_is_what_its_submitit_object_says_and_an_error_its_function_raised(tmp_path):
    """launch.ended of submitit's own job objects, here LocalJobs of an earlier ablate.py (no process known): a job
    that left no result ended as its state says; one whose function raised (train.py exited non-zero) says its
    error's last line, never 'FINISHED'; one submitit stopped at its time limit says TIMEOUT."""
    import submitit
    from submitit.core import utils
    results = {'ok': ('success', None),
               'killed': ('error', 'Traceback (most recent call last):\nsubprocess.CalledProcessError: Command '
                                   "'train.py' returned non-zero exit status -9."),
               'late': ('error', 'submitit.core.utils.UncompletedJobError: Job 4 (task: 0) timed-out')}
    said = {}
    for name in ('gone', *results):
        job = submitit.LocalJob(tmp_path / name, '7')
        if name in results:
            job.paths.folder.mkdir(parents=True)
            utils.cloudpickle_dump(results[name], job.paths.result_pickle)
        said[name] = launch.ended(job)
    assert said == {'gone': 'NO PROCESS AND NO RESULT', 'ok': 'FINISHED',
                    'killed': 'FAILED: subprocess.CalledProcessError: returned non-zero exit status -9.',
                    'late': 'TIMEOUT'}


def test_run_job_resumes_where_the_run_dir_holds_a_checkpoint_and_fails_with_its_process(tmp_path, monkeypatch):
    """A job's train.py command resumes when the run dir holds a checkpoint as the job starts (a job Slurm requeued
    after a preemption), starts fresh where it holds none; its eval's output goes to eval.log; a process that fails
    fails the job."""
    ran = []
    monkeypatch.setattr(launch, 'run_process', lambda cmd, run_dir, env, log, **kw: ran.append((cmd[2:], log)) or 0)
    train_cmd, eval_cmd = [sys.executable, 'train.py', '--seed=1'], [sys.executable, '-m', 'study.evals', '{}']
    run_dir = tmp_path / 'run'
    launch.run_job([train_cmd, eval_cmd], str(run_dir), 1)
    (run_dir / 'ckpt.pt').write_bytes(b'')
    launch.run_job([train_cmd], str(run_dir), 1)
    assert ran == [(['--seed=1'], 'train.log'), (['study.evals', '{}'], 'eval.log'),
                   (['--seed=1', '--init_from=resume'], 'train.log')]
    monkeypatch.setattr(launch, 'run_process', lambda *a, **kw: 3)
    with pytest.raises(subprocess.CalledProcessError):
        launch.run_job([train_cmd], str(run_dir), 1)


@pytest.mark.parametrize('args,words', [
    (['--launcher=sge'], ["unknown launcher 'sge'", 'local', 'slurm', 'submitit_local']),
    (['--launcher=slurm'], ['--launcher=slurm needs --slurm_partition=']),
    (['--eval_on=slurm'], ["eval_on='slurm'", '--launcher=local']),
    (['--launcher=slurm', '--slurm_partition=gpu', '--slurm_cpus_per_run=0'], ['slurm_cpus_per_run=0', '>= 1']),
    (['--launcher=slurm', '--slurm_partition=gpu', '--slurm_extra=account'], ["slurm_extra='account'", 'key=value']),
])
def test_bad_launcher_input_is_one_line_before_anything_runs(tmp_path, args, words):
    msg = refused(study(tmp_path), *args)
    for w in words:
        assert w in msg, msg
    assert not (tmp_path / 'grid').exists() and not (tmp_path / 'data').exists()


def test_launchers_without_submitit_name_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'submitit', None)                  # as if it were not installed
    for launcher in ('slurm', 'submitit_local'):
        msg = refused(study(tmp_path), f'--launcher={launcher}', '--slurm_partition=gpu')
        assert f'--launcher={launcher} needs the submitit package' in msg and 'pip install submitit' in msg, msg
    assert not (tmp_path / 'grid').exists() and not (tmp_path / 'data').exists()
    cfg = configure(abl.study_settings(), [])
    settings.check_launcher(cfg)                                          # the local launcher never imports it


def test_refused_submission_is_one_line_and_changes_nothing(tmp_path, monkeypatch):
    fake = fake_slurm(tmp_path, monkeypatch, 'echo "sbatch: error: Batch job submission failed: Invalid partition '
                                             'name specified" >&2; exit 1')
    cfg = study(tmp_path, results_dir=str(tmp_path / 'results'))
    grid = tmp_path / 'grid'
    args = [cfg, '--launcher=slurm', '--slurm_partition=nope']
    (fake / 'bin' / 'srun').rename(fake / 'srun')                     # first a machine without Slurm at all:
    with monkeypatch.context() as m:                                    # no srun anywhere on PATH, even where
        m.setenv('PATH', str(fake / 'bin'))                             # this machine has slurm-wlm installed
        msg = refused(*args)
    assert msg.startswith('slurm refused the submission of 4 job(s)') and 'srun' in msg, msg
    (fake / 'srun').rename(fake / 'bin' / 'srun')
    msg = refused(*args)
    assert msg == 'slurm refused the submission of 4 job(s): sbatch: error: Batch job submission failed: ' \
                  'Invalid partition name specified', msg
    assert not grid.exists() and not (tmp_path / 'results').exists()   # no job.json, no submitit files, no summary
    # a grid_dir that holds an earlier submission's files is left as it was
    (grid / 'submitit').mkdir(parents=True)
    (grid / 'submitit' / '17_submitted.pkl').write_text('earlier')
    refused(*args)
    assert sorted(p.relative_to(grid).as_posix() for p in grid.rglob('*')) == ['submitit', 'submitit/17_submitted.pkl']
    # end to end: the message alone on stderr, no traceback (submitit's copy of sbatch's stderr swallowed)
    out = ablate(*args, check=False)
    assert out.returncode != 0 and out.stderr.strip() == msg, out.stderr


def test_a_records_variants_and_provenance_are_saved_and_recalled(tmp_path, capsys):
    """A run evaluated plain and under 'yarn': its record holds both with their keys and the provenance
    its log and eval name; recalled, it gives them back; a study that now asks for another variant
    trains it again (its record was evaluated another way)."""
    grid, folder, mults = str(tmp_path / 'grid'), str(tmp_path / 'runs'), [1, 2]
    prov = {'commit': 'abc', 'cpu': 'Some CPU', 'torch': '2.13.0'}
    run = GridRun('none', 1, os.path.join(grid, 'none', 'seed1'), [], {'max_iters': 9, 'device': 'cpu'}, ['mqar'], True,
              state='done',
              records=[{'iter': 0, 'fit_iter': None, 'provenance': prov, 'length_eval': {}},
                       {'iter': 9, 'fit_iter': 3, 'length_eval': {}}],
              eval={**acc(0.1), 'provenance': prov}, mismatch={'layers': 0}, evals={'yarn': acc(0.2)})
    os.makedirs(run.dir)
    for name, key, rec in ((files.EVAL_CACHE, evals.eval_key(run, mults, 3, 'cpu'), run.eval),
                           (files.eval_cache('yarn'), evals.eval_key(run, mults, 3, 'cpu', 'yarn'), run.evals['yarn']),
                           (files.MISMATCH_CACHE, evals.mismatch_key(run), run.mismatch)):
        rundir.write_atomic(os.path.join(run.dir, name), json.dumps({'key': key, 'record': rec}).encode())
    assert 'variant' not in evals.eval_key(run, mults, 3, 'cpu')        # the plain key is as it always was
    records.save_records([run], folder, grid, ('yarn',))
    saved = json.load(open(os.path.join(folder, 'none', 'seed1.json')))
    assert saved['variants']['yarn'] == {'key': evals.eval_key(run, mults, 3, 'cpu', 'yarn'), 'record': acc(0.2)}
    assert saved['provenance'] == {'train': [prov], 'eval': prov}
    assert outcomes.machine_of(saved['provenance']) == 'Some CPU, torch 2.13.0'
    shutil.rmtree(grid)
    fresh = dataclasses.replace(run, state='new', eval=None, evals={}, mismatch=None, records=None)
    records.recall([fresh], folder, grid, mults, 3, ('yarn',))
    assert (fresh.state, fresh.evals, fresh.provenance) == ('done', {'yarn': acc(0.2)}, saved['provenance'])
    again = dataclasses.replace(run, state='new', eval=None, evals={}, mismatch=None, records=None)
    records.recall([again], folder, grid, mults, 3, ('yarn', 'ntk'))
    assert again.state == 'new' and 'was evaluated another way' in capsys.readouterr().out
    # a trunk is evaluated plain only, and a branch planned as its copy does not lend it the branch's variants
    trunk = dataclasses.replace(run, point='trunk', evals={}, eval=None)
    branch = dataclasses.replace(trunk, dir=os.path.join(run.dir, 'cooldown2'), point=2, trunk=run.dir)
    for r in (trunk, branch):
        os.makedirs(r.dir, exist_ok=True)
        open(os.path.join(r.dir, rundir.CKPT), 'w').close()
        for v in ('', 'yarn'):
            rundir.write_atomic(os.path.join(r.dir, files.eval_cache(v)), json.dumps(
                {'key': evals.eval_key(r, mults, 3, 'cpu', v), 'record': acc(0.2 if v else 0.1)}).encode())
    evals.final_evals([trunk, branch], mults, 3, compute=False, variants=('yarn',))
    assert (trunk.eval, trunk.evals) == (acc(0.1), {}) and branch.evals == {'yarn': acc(0.2)}


def acc(a):
    """A final eval's record with one accuracy."""
    return {'block_size': 64, 'length_eval': {'mqar': {'1x': a}}}


def test_a_branch_without_its_snapshot_waits_for_its_trunk_and_a_lost_one_is_one_line_that_rebuilds_it(tmp_path):
    """ready() and lost(): a branch starts from the snapshot its trunk writes into its dir; one whose snapshot is gone
    once its trunk finished with a fit is lost, and its rebuild is one shell line: the trunk's settings stopped at
    fit + 2 into the branch's rebuild/ (resumed where a rebuild was cut short), the snapshot moved in. Not while
    the trunk trains, nor after it never fit (it wrote none)."""
    from study.runs import command, lost, ready, rebuild_command
    trunk = GridRun('none', 1, str(tmp_path / 't'), ['--seed=1'], {'cooldown_iters': 3}, ['mqar'], True,
                    point='trunk', state='partial')
    branch = dataclasses.replace(trunk, dir=str(tmp_path / 't' / 'cooldown2'), point=2, trunk=trunk.dir, state='new',
                                 argv=['--seed=1', '--steps_after_fit=5', '--snapshots_after_fit='])
    trunks = {trunk.dir: trunk}
    assert not ready(branch) and not lost(branch, trunks)                 # the trunk still trains
    trunk.state, trunk.records = 'done', [{'iter': 9, 'fit_iter': None}]
    assert not lost(branch, trunks)                                        # it never fit: no snapshot to rebuild
    trunk.records = [{'iter': 9, 'fit_iter': 3}]
    assert lost(branch, trunks)
    out = f"{branch.dir}/rebuild"
    assert rebuild_command(branch) == (f"python train.py --seed=1 --out_dir={out} --snapshots_after_fit=2 "
                                       f"--steps_after_fit=3 && mv {out}/cooldown2/ckpt.pt {branch.dir}/ckpt.pt && "
                                       f"rm -r {out}")                     # the trunk's settings, to fit + 2
    os.makedirs(out)
    open(os.path.join(out, 'ckpt.pt'), 'w').close()                       # a rebuild cut short: resumed
    assert '--steps_after_fit=3 --init_from=resume && mv' in rebuild_command(branch)
    open(os.path.join(branch.dir, 'ckpt.pt'), 'w').close()
    assert ready(branch) and not lost(branch, trunks)
    assert command(branch, False)[1:] == ['train.py', *branch.argv, '--init_from=resume']   # it resumes its snapshot


def test_each_run_is_recorded_as_it_finishes_and_recalled_on_its_own(tmp_path, capsys):
    """A trunk is recorded once it is done and evaluated, a branch when it is (a clone missing a branch's
    snapshot rebuilds it, so nothing waits for the group); each is recalled on its own, a run whose
    record is gone trains again alone; a record evaluated on other lengths is left alone: it trains again."""
    grid, folder, mults = str(tmp_path / 'grid'), str(tmp_path / 'runs'), [1, 2]
    cfg = {'max_iters': 9, 'seed': 1}

    def group(seed, done):                  # a trunk and one branch, finished and evaluated where done says
        trunk = GridRun('none', seed, os.path.join(grid, 'none', f'seed{seed}'), [], cfg, ['mqar'], True, point='trunk')
        branch = dataclasses.replace(trunk, dir=os.path.join(trunk.dir, 'cooldown2'), point=2, trunk=trunk.dir)
        for run, finished in zip((trunk, branch), done):
            os.makedirs(run.dir, exist_ok=True)
            run.state = 'done' if finished else 'partial'
            run.records, run.eval, run.mismatch = [{'iter': 9, 'fit_iter': 3, 'length_eval': {'mqar': {'1x': 1.0}}}], \
                acc(seed / 10), {'layers': 0}
            for name, key in ((files.EVAL_CACHE, evals.eval_key(run, mults, 3, 'cpu')),
                              (files.MISMATCH_CACHE, evals.mismatch_key(run))):
                rundir.write_atomic(os.path.join(run.dir, name), json.dumps({'key': key, 'record': run.eval}).encode())
        return [trunk, branch]
    runs = group(1, (True, True)) + group(2, (True, False))
    records.save_records(runs, folder, grid)
    assert sorted(str(p.relative_to(folder)) for p in (tmp_path / 'runs').rglob('*.json')) == \
        ['none/seed1.json', 'none/seed1/cooldown2.json', 'none/seed2.json']     # seed 2's branch is not done
    for run in runs:                                                      # a fresh clone: no run dirs
        run.state, run.eval = 'new', None
    shutil.rmtree(grid)
    records.recall(runs, folder, grid, mults, 3)
    assert [(r.state, r.recorded, r.eval) for r in runs] == \
        [('done', True, acc(0.1))] * 2 + [('done', True, acc(0.2)), ('new', False, None)]
    assert '3 finished run(s) recalled' in capsys.readouterr().out
    for run in runs:
        run.state, run.recorded = 'new', False
    records.recall(runs, folder, grid, [1, 2, 4], 3)                       # the study now evaluates 4x too
    assert [r.state for r in runs] == ['new'] * 4
    assert '[none seed 1] its record' in capsys.readouterr().out
    os.remove(os.path.join(folder, 'none', 'seed1', 'cooldown2.json'))    # a branch's record deleted: it alone
    records.recall(runs, folder, grid, mults, 3)                           # trains again (from a rebuilt snapshot)
    assert [r.state for r in runs] == ['done', 'new', 'done', 'new']
    # a trunk that never fit wrote no snapshot: it is recorded and recalled alone, its branches never train
    never = group(3, (True, False))
    never[0].records = [{'iter': 9, 'fit_iter': None, 'length_eval': {'mqar': {'1x': 0.5}}}]
    records.save_records(never, folder, grid)
    assert os.path.isfile(os.path.join(folder, 'none', 'seed3.json'))
    shutil.rmtree(grid)
    never[0].state = never[1].state = 'new'
    records.recall(never, folder, grid, mults, 3)
    assert [(r.state, r.recorded) for r in never] == [('done', True), ('new', False)]
    # a record whose eval is empty is damaged, not a run done without an eval
    path = os.path.join(folder, 'none', 'seed3.json')
    damaged = json.load(open(path))
    damaged['eval']['record'] = None
    with open(path, 'w') as f:
        json.dump(damaged, f)
    never[0].state = 'new'
    with pytest.raises(SystemExit, match='is not the record of a finished run'):
        records.recall(never, folder, grid, mults, 3)
    # valid JSON of the wrong shape: an accuracy that is text, a log record without its length eval
    for edit, why in ((lambda r: r['eval'].update(record={'block_size': 64, 'length_eval': {'mqar': {'1x': 'abc'}}}),
                       "its accuracy of 'mqar' at 1x is 'abc'"),
                      (lambda r: r['log'][0].pop('length_eval'), 'the log record of iter 9: its length eval is a')):
        rec = dict(damaged, eval={'key': damaged['eval']['key'],
                                  'record': {'block_size': 64, 'length_eval': {'mqar': {'1x': 1.0}}}},
                   log=[{'iter': 9, 'fit_iter': None, 'length_eval': {'mqar': {'1x': 0.5}}}])
        edit(rec)
        with open(path, 'w') as f:
            json.dump(rec, f)
        with pytest.raises(SystemExit) as e:
            records.recall(never, folder, grid, mults, 3)
        assert why in str(e.value) and len(str(e.value).splitlines()) == 1


def test_a_rerun_whose_numbers_are_equal_keeps_the_committed_summary(tmp_path, monkeypatch):
    """Rerunning a finished study's command rewrote its committed results.json (the provenance of the process
    that summarized it changes, no number does): kept as it is where nothing else differs."""
    monkeypatch.setattr(summary, 'plot', lambda *a: None)
    monkeypatch.setattr(summary, 'format_markdown', lambda results: '| the tables |\n')
    results = {'arms': {'none': {'area': {'mean': 0.5}}}, 'provenance': {'commit': 'aaa', 'threads': 2},
               'rule': {'delta': 0.05, 'fixed': {'delta': 0.05}, 'config_commit': 'aaa'}}
    summary.write(str(tmp_path), results, [], 'rerun')
    committed = (tmp_path / 'results.json').read_bytes()
    summary.write(str(tmp_path), dict(results, provenance={'commit': 'bbb', 'threads': 1}, rule={
        'delta': 0.05, 'fixed': {'delta': 0.05, 'fit_plus_reading': 0}, 'config_commit': 'bbb'}), [], 'rerun')
    assert (tmp_path / 'results.json').read_bytes() == committed
    summary.write(str(tmp_path), dict(results, arms={'none': {'area': {'mean': 0.6}}}), [], 'rerun')
    assert json.loads((tmp_path / 'results.json').read_bytes())['arms']['none']['area']['mean'] == 0.6


def test_each_optional_feature_is_one_module_the_rest_runs_without(tmp_path):
    """launch.py (Slurm and submitit), plots.py, reproduce.py and records.py deleted (their imports fail, as a
    deleted module's would): a study config's own grid is still planned and dry-run with its summary printed, and
    a summary is written, without plots."""
    cfg = study(tmp_path, results_dir=str(tmp_path / 'results'))
    shutil.copy(os.path.join(ROOT, 'results', 'study_quick', 'results.json'), tmp_path / 'quick.json')
    code = (f"import sys, json, runpy\n"
            f"for m in ('study.launch', 'study.plots', 'study.reproduce', 'study.records'): sys.modules[m] = None\n"
            f"sys.argv = ['ablate.py', {cfg!r}, '--dry_run']\n"
            f"runpy.run_path('ablate.py', run_name='__main__')\n"
            f"from study import grid, summary\n"
            f"assert grid.records is None and summary.plot is None\n"
            f"summary.write({str(tmp_path / 'out')!r}, json.load(open({str(tmp_path / 'quick.json')!r})), [], 'x')\n")
    out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert 'not written' in out.stdout and sorted(os.listdir(tmp_path / 'out')) == ['results.json', 'results.md']


def test_a_dry_run_piped_into_head_ends_quietly_and_says_the_records_hold_every_run(tmp_path):
    """`python ablate.py config/study_quick.py --dry_run | head`, on a copy of its committed records: they hold
    every run, so no command is pending, and the dry run says why; a reader that stops reading ends it with no
    traceback (PYTHONUNBUFFERED=1: each print meets the closed pipe at once)."""
    shutil.copytree(os.path.join(ROOT, 'results', 'study_quick', 'runs'), tmp_path / 'runs')
    proc = subprocess.Popen([sys.executable, 'ablate.py', 'config/study_quick.py', '--dry_run',
                             f'--results_dir={tmp_path}'], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED='1'))
    said = next((line for line in proc.stdout if line.startswith('# no command')), None)
    proc.stdout.close()                                                 # as head does after its lines
    err = proc.stderr.read()
    proc.wait(timeout=300)
    assert said == (f"# no command is pending: every run of this grid is finished (its records in {tmp_path}/runs "
                    f"hold them)\n"), err[-3000:]
    assert 'Traceback' not in err and 'BrokenPipe' not in err and proc.returncode in (0, 1), err[-3000:]


def test_reproduce_says_where_a_records_cpu_kernels_are_not_this_machines():
    """torch picks its CPU kernels by instruction set: a record trained with another one, or that names none
    (recorded before records kept it), is said so beside the comparison; the same one, or no record, says nothing."""
    here = {'cpu_capability': 'AVX2'}
    assert reproduce.kernels({'train': [{'cpu_capability': 'AVX2'}], 'eval': {}}, here) is None
    assert reproduce.kernels(None, here) is None
    assert 'it trained with CPU capability AVX512, this machine has AVX2' in reproduce.kernels(
        {'train': [{'cpu_capability': 'AVX512'}]}, here)
    assert 'does not name the CPU capability' in reproduce.kernels({'train': [{'cpu': 'AMD EPYC'}]}, here)


# --- a Ctrl-C that lands where it is swallowed, or in a child's wait: one line, exit 130

def test_ctrl_c_while_the_summary_is_plotted_is_one_line_and_exit_130(tmp_path, monkeypatch, capfd):
    """A Ctrl-C while ablate.py plots a finished grid said its line, then 'Exception ignored in ... SystemExit:
    130' (matplotlib swallows an exit raised inside a callback, a finalizer here), and ablate.py went on to exit
    0. The exit is held until the plots are drawn: one line, exit 130."""
    monkeypatch.setattr(rundir, 'STOP', {})

    def plot(results, curves, out):          # a finalizer that the signal lands in, as matplotlib's callbacks
        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(1000))               # the handler runs here, inside the finalizer
        Finalized()
    monkeypatch.setattr(summary, 'plot', plot)
    monkeypatch.setattr(summary, 'format_markdown', lambda results: '| the tables |\n')
    rundir.exit_on_signals(lambda: '16 of 16 runs finished; resume with: python ablate.py study.py')
    with pytest.raises(SystemExit) as e:
        summary.write(str(tmp_path), {'arms': {}}, [], 'rerun')
    err = capfd.readouterr().err
    assert e.value.code == 130 and err == '\nSIGINT: 16 of 16 runs finished; resume with: python ablate.py study.py\n', err


def test_ctrl_c_while_reproduce_retrains_is_one_line_and_exit_130(tmp_path):
    """A Ctrl-C during `--reproduce` was a 20-line KeyboardInterrupt traceback from subprocess.run: its line,
    exit 130, and the retraining stopped at its last checkpoint (SIGINT to ablate.py alone: it stops the child)."""
    results = tmp_path / 'results'
    results.mkdir()
    (results / 'results.json').write_text(json.dumps({'arms': {'none': {'tasks': {'niah_single': {
        str(m): {'per_seed': {'1': 0.5}} for m in (1, 2)}}}}}))
    cfg = study(tmp_path, arms={'none': {'dropout_site': 'none'}}, seeds='1', results_dir=str(results))
    out = tmp_path / 'reproduce'
    code = (f"import sys; from study import reproduce; reproduce.OUT = {str(out)!r}; import runpy; "
            f"sys.argv = ['ablate.py', {cfg!r}, '--reproduce=1', '--max_iters=3000', '--eval_interval=50']; "
            f"runpy.run_path('ablate.py', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, '-c', code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    log = out / 'results' / 'none' / 'seed1' / 'log.jsonl'
    deadline = time.time() + 600      # a wait for progress, not a timing: a loaded machine starves the child
    while not (log.exists() and log.read_text().count('\n') >= 2):       # the retraining is under way
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    trainer = int((log.parent / rundir.LOCK).read_text().split()[0]) if (log.parent / rundir.LOCK).exists() else None
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and 'Traceback' not in stderr, stderr     # (before it: the corpus's progress bars)
    assert stderr.strip().splitlines()[-1] == (f"SIGINT: retraining none seed 1 stopped at its last checkpoint; rerun "
                                               f"python ablate.py {cfg} --reproduce=1 --max_iters=3000 "
                                               f"--eval_interval=50 to continue it"), stderr
    assert trainer is None or not alive(trainer)
    assert 'SIGTERM: stopped at iter' in (log.parent / 'train.log').read_text()


def test_the_range_table_counts_the_seeds_where_a_extends_b_fourfold():
    """The paper's metric beside each comparison of two arms: per seed a's range / b's, and the seeds with 4x or
    more (a range of 0, below the threshold at 1x already, is extended by any range); an interaction has none."""
    rng = lambda **per_seed: {'range': {'per_seed': per_seed}}       # noqa: E731
    res = {'rule': {'range_threshold': 0.5},
           'arms': {'a': {**rng(**{'1': 64, '2': 8, '3': 4}), 'variants': {'yarn': rng(**{'1': 64, '2': 64, '3': 64})}},
                    'b': rng(**{'1': 16, '2': 4, '3': 0})},
           'comparisons': [{'a': 'a', 'b': 'b', 'point': None, 'family': 'f', 'left_out': {'seeds': [1, 2, 3]}},
                           {'a': 'a@yarn', 'b': 'a', 'point': None, 'family': 'f', 'left_out': {'seeds': [1, 2]}},
                           {'a': 'a - b', 'b': 'a@yarn - b', 'point': None, 'family': 'f',
                            'left_out': {'seeds': [1, 2]}}]}
    lines = tables.range_extension(res)
    assert lines[4] == '| - | f | a / b | 1: 64x / 16x, 2: 8x / 4x, 3: 4x / 0 | 2 of 3 (1, 3) |'
    assert lines[5] == '| - | f | a@yarn / a | 1: 64x / 64x, 2: 64x / 8x | 1 of 2 (2) |'
    assert len(lines) == 7 and lines[-1] == ''              # the interaction: no row


def test_results_md_states_the_examples_per_point_past_64x_as_the_eval_drew_them():
    """eval_samples_long past 64x: the text says both counts, and the area's standard error bound uses each
    point's own count (100 a point over 1..64x and 32 over 128..1024x: sqrt(7 * 0.25/100 + 4 * 0.25/32) / 11)."""
    ev = {'multiples': [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], 'eval_samples': 100, 'eval_samples_long': 32}
    assert evals.examples({'eval': ev}) == '100 held-out examples to 64x and 32 past it'
    assert evals.samples_per_point(ev) == [100] * 7 + [32] * 4
    assert evals.examples({'eval': dict(ev, multiples=[1, 16, 64])}) == '100 held-out examples'
    assert evals.examples({'eval': dict(ev, eval_samples_long=0)}) == '100 held-out examples'
