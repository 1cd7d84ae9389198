"""
A study in one command: a grid of arms x seeds, each an ordinary train.py run, then every run
evaluated on the same held-out examples and the grid summarized.

    python ablate.py config/ablate_sites.py
    python ablate.py config/ablate_sites.py --arms=none,vpad --seeds=1,2 --max_iters=300
    python ablate.py config/ablate_sites.py --dry_run       # the train.py commands, for a cluster

A study config sets `base_config` (a train.py config), `arms` (name -> train.py overrides),
`common` (overrides for every arm), `seeds` and `out_dir`. Any other --key=value that train.py knows
is passed to every run; `multiples` and `num_samples` set the final eval (eval_lengths.py's names).
Run (arm, seed k) trains into out_dir/<arm>/seed<k>/ with --seed=k: seeds vary initial weights,
dropout masks and batch order, never the corpus (that is data_seed). A string override may name
the seed, e.g. init_from='out/ablate_sites/none/seed{seed}'.

Rerunning the same command skips finished runs and resumes interrupted ones, so a long grid
outlives a terminal. With --dry_run nothing is trained: it prints one train.py command per pending
run (each run dir is independent: a scheduler's job array can run them anywhere) and summarizes
what has finished. The summary goes to results_dir (default: out_dir): results.json (per arm its
overrides; per task and length multiple the per-seed accuracies, mean and standard deviation; the
train-vs-eval mismatch at the arm's dropout site), results.md, accuracy_vs_length.png and
accuracy_vs_step.png (the quick length eval in each run's log.jsonl, mean over seeds: does
extrapolation rise, then fall, during training?). The PNGs need matplotlib.
"""

import contextlib
import io
import json
import math
import os
import shlex
import subprocess
import sys
import time


# -----------------------------------------------------------------------------
base_config = 'config/vpad.py'   # the train.py config every run starts from
arms = {}                  # arm name -> dict of train.py overrides; --arms=a,b trains only those
                           # (the summary still covers every arm's finished runs)
common = {}                # train.py overrides for every arm of the study
seeds = '1,2,3'            # training seeds, comma-separated
out_dir = 'out/ablate'     # run (arm, seed k) trains into out_dir/<arm>/seed<k>/
results_dir = ''           # where results.* and the plots go; '' = out_dir
workers = 1                # runs trained at a time; the CPU threads are split between them
dry_run = False            # print the train.py command of each pending run, train nothing
multiples = '1,2,4,8,16,32,64'   # final eval lengths, in multiples of each run's block_size
num_samples = 100          # held-out examples per task and length in the final eval
# -----------------------------------------------------------------------------
from configurator import configure, settings_of, unknown_key  # noqa: E402
import eval_lengths  # noqa: E402
import sample_data  # noqa: E402
import train  # noqa: E402  (its settings and checks; its training loop runs in a subprocess)
import torch  # noqa: E402
from model import dropout_mismatch  # noqa: E402

# settings that change how a run is executed or logged, not what it learns: a rerun may change them
NOT_THE_RUN = {'init_from', 'out_dir', 'device', 'compile', 'dtype', 'log_interval', 'peak_flops', 'eval_interval',
               'eval_iters', 'eval_tasks', 'eval_multiples', 'final_multiples', 'eval_samples', 'eval_batch_size'}


def flags(overrides, seed):
    """{'dropout': 0.1, 'init_from': 'runs/seed{seed}'} -> ['--dropout=0.1', '--init_from=runs/seed1']."""
    out = []
    for k, v in overrides.items():
        v = (v.replace('{seed}', str(seed)) if isinstance(v, str) else repr(v))
        out.append(f'--{k}={v}')
    return out


def split_argv(argv, study_keys, train_keys):
    """-> (ablate's own argv, train.py overrides for every run, the --arms selection or None)."""
    own, passed, selected = [], [], None
    for arg in argv:
        key = arg[2:].split('=', 1)[0] if arg.startswith('--') else None
        if key == 'arms':
            selected = [a for a in arg.split('=', 1)[1].split(',') if a.strip()] if '=' in arg else []
        elif key is None or key in study_keys or key in ('help', ''):
            own.append(arg)
        elif key in train_keys:
            passed.append(arg)                # '{seed}' in it is filled in per run, as in a config's overrides
        else:
            raise SystemExit("config error: " + unknown_key(key, list(study_keys) + list(train_keys)))
    return own, passed, selected


def plan(cfg, passed, selected, train_settings):
    """Check the whole grid before anything runs. -> [run dicts], in arm-major order; those of
    arms left out by --arms are marked 'selected': False (summarized if finished, never trained)."""
    def fail(msg):
        raise SystemExit(f"config error: {msg}")
    if not cfg['arms']:
        fail("the study sets no arms: a study config needs arms = {'name': {train.py overrides}, ...}")
    if selected is not None:
        if not selected:
            fail("--arms is empty: name arms of the study, e.g. --arms=" + ','.join(list(cfg['arms'])[:2]))
        for a in selected:
            if a not in cfg['arms']:
                fail(f"unknown arm '{a}' in --arms; arms of this study: {', '.join(cfg['arms'])}")
    try:
        seed_list = [int(s) for s in cfg['seeds'].split(',') if s.strip()]
    except ValueError:
        seed_list = None
    if not seed_list:
        fail(f"seeds={cfg['seeds']!r}: give integers separated by commas, e.g. --seeds=1,2,3")
    if not os.path.isfile(cfg['base_config']):
        fail(f"base_config '{cfg['base_config']}' not found (run from the repository root)")
    if cfg['workers'] < 1 or cfg['num_samples'] < 1:
        fail("workers and num_samples must be positive")
    try:
        eval_lengths.parse_multiples('multiples', cfg['multiples'])
    except ValueError as e:
        fail(str(e))
    runs = []
    for arm in cfg['arms']:
        overrides = cfg['arms'][arm]
        if not isinstance(overrides, dict):
            fail(f"arm '{arm}' must map to a dict of train.py overrides, got {type(overrides).__name__}")
        for seed in seed_list:
            run_dir = os.path.join(cfg['out_dir'], arm, f'seed{seed}')
            argv = [cfg['base_config'], *flags(cfg['common'], seed), *flags(overrides, seed),
                    *(p.replace('{seed}', str(seed)) for p in passed), f'--seed={seed}', f'--out_dir={run_dir}']
            try:  # the exact settings train.py will use, checked as train.py checks them
                with contextlib.redirect_stdout(io.StringIO()):
                    run_cfg = configure(train_settings, argv)
            except SystemExit as e:
                fail(f"arm '{arm}': {str(e).removeprefix('config error: ')}")
            try:
                eval_tasks, _, _ = train.check_config({**run_cfg, 'init_from': 'scratch'})   # init_from: see check_sources
            except SystemExit as e:
                fail(f"arm '{arm}': {str(e).removeprefix('config error: ')}")
            runs.append({'arm': arm, 'seed': seed, 'dir': run_dir, 'argv': argv, 'cfg': run_cfg, 'tasks': eval_tasks,
                         'selected': selected is None or arm in selected})
    return runs


def state(run):
    """'done', 'partial' (a checkpoint short of max_iters) or 'new'; exits if the run dir holds a
    run with other settings (it would be mixed into this study's results), unless the run is not
    selected: then it is 'other', left out of the summary."""
    path = os.path.join(run['dir'], 'ckpt.pt')
    if not os.path.exists(path):
        return 'new'
    ckpt = train.load_checkpoint(path)
    saved, wanted = ckpt['config'], run['cfg']
    differ = [k for k in wanted if k not in NOT_THE_RUN and saved.get(k) != wanted[k]]
    if differ and not run['selected']:
        return 'other'
    if differ:
        raise SystemExit(f"{run['dir']} was trained with other settings ("
                         + ", ".join(f"{k}={saved.get(k)!r}, study: {wanted[k]!r}" for k in differ[:4])
                         + f"): pick another out_dir, or delete {run['dir']} to retrain it")
    if ckpt['iter_num'] < wanted['max_iters']:
        return 'partial'
    logged = train.read_log(os.path.join(run['dir'], 'log.jsonl'), wanted['max_iters']) \
        if os.path.exists(os.path.join(run['dir'], 'log.jsonl')) else []
    return 'done' if any(r['iter'] == wanted['max_iters'] for r in logged) else 'partial'


def check_sources(runs):
    """A pending run that starts from another run's weights needs that run finished."""
    for run in runs:
        source = run['cfg']['init_from']
        if run['state'] == 'done' or not run['selected'] or source in ('scratch', 'resume'):
            continue
        path = train.init_path(source)
        done = os.path.isfile(path) and (lambda c: c['iter_num'] >= c['config']['max_iters'])(train.load_checkpoint(path))
        if not done:
            raise SystemExit(f"config error: arm '{run['arm']}', seed {run['seed']}: init_from={source!r} is not a "
                             f"finished run yet; run the study it comes from first")


def command(run, resume):
    return [sys.executable, 'train.py', *run['argv'], *(['--init_from=resume'] if resume else [])]


def last_progress(run):
    """The last 'iter i/n' line of a running run's train.log, for the progress display."""
    try:
        with open(os.path.join(run['dir'], 'train.log'), 'rb') as f:
            f.seek(max(0, os.path.getsize(f.name) - 4000))
            lines = [l for l in f.read().decode(errors='replace').splitlines() if l.startswith('iter ')]
        return lines[-1].split(',')[0] if lines else 'starting'
    except OSError:
        return 'starting'


def prepare_data(runs):
    """Generate each corpus once, here, before the runs start: parallel runs would race to write it."""
    for run in runs:
        c = run['cfg']
        if run['selected'] and run['state'] != 'done' and not os.path.exists(os.path.join(c['data_dir'], 'meta.json')):
            print(f"generating {c['data_dir']} ({c['tasks']}, {c['num_tokens']:,} tokens)")
            sample_data.prepare(c['data_dir'], c['block_size'], c['num_tokens'], tasks=c['tasks'],
                                data_seed=c['data_seed'], tokenizer=c['tokenizer'])


def train_grid(runs, workers):
    """Train the pending runs, `workers` at a time, each a train.py subprocess writing train.log in
    its run dir. -> the runs that failed."""
    pending = [r for r in runs if r['selected'] and r['state'] != 'done']
    threads = max(1, (os.cpu_count() or 1) // workers)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED='1')
    running, failed, n_done = [], [], sum(r['selected'] and r['state'] == 'done' for r in runs)
    t0, last_status = time.time(), time.time()
    n_runs = sum(r['selected'] for r in runs)
    print(f"grid: {n_runs} runs, {n_done} finished, {len(pending)} to train, {workers} at a time "
          f"({threads} thread(s) each)")
    while pending or running:
        while pending and len(running) < workers:
            run = pending.pop(0)
            os.makedirs(run['dir'], exist_ok=True)
            log = open(os.path.join(run['dir'], 'train.log'), 'a')
            cmd = command(run, run['state'] == 'partial')
            log.write(f"$ {shlex.join(cmd)}\n")
            log.flush()
            run['proc'], run['log'], run['t0'] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log, time.time()
            print(f"[{run['arm']} seed {run['seed']}] {'resuming' if run['state'] == 'partial' else 'starting'} "
                  f"-> {run['dir']}/train.log")
            running.append(run)
        time.sleep(0.5)
        for run in [r for r in running if r['proc'].poll() is not None]:
            running.remove(run)
            run['log'].close()
            minutes = (time.time() - run['t0']) / 60
            if run['proc'].returncode == 0 and state(run) == 'done':
                n_done += 1
                run['state'] = 'done'
                print(f"[{run['arm']} seed {run['seed']}] done in {minutes:.1f} min")
            else:
                failed.append(run)
                with open(os.path.join(run['dir'], 'train.log')) as f:
                    tail = f.read().strip().splitlines()[-1:]
                print(f"[{run['arm']} seed {run['seed']}] FAILED after {minutes:.1f} min: {' '.join(tail)}")
            elapsed = (time.time() - t0) / 60
            print(f"grid: {n_done}/{n_runs} done, {len(running)} running, {len(pending)} waiting, "
                  f"{len(failed)} failed; {elapsed:.1f} min so far")
        if running and time.time() - last_status > 60:
            last_status = time.time()
            print("  " + "; ".join(f"{r['arm']} seed {r['seed']}: {last_progress(r)}" for r in running))
    return failed


def cached(run, name, key, compute):
    """compute() once per run and key: kept in the run dir as `name`; other settings recompute it."""
    path = os.path.join(run['dir'], name)
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if saved.get('key') == key:
            return saved['record']
    record = compute()
    sample_data.write_atomic(path, json.dumps({'key': key, 'record': record}, indent=1).encode())
    return record


def evaluate(runs, mults, n):
    """The final eval of every finished run, cached in its dir (ablate_eval.json) for these settings."""
    for run in runs:
        if run['state'] != 'done':
            continue
        tasks = run['tasks']                         # the run's eval_tasks, or the tasks it trained on
        device = eval_lengths.pick_device(run['cfg']['device'])
        key = {'multiples': mults, 'num_samples': n, 'tasks': tasks, 'iter': run['cfg']['max_iters'], 'seed': 0,
               'device': device.split(':')[0]}

        def final_eval():
            print(f"[{run['arm']} seed {run['seed']}] final eval: {n} examples per task and length")
            with contextlib.redirect_stdout(io.StringIO()):          # the model summary line, for every run
                return eval_lengths.evaluate_run(run['dir'], tasks, mults, n, run['cfg']['eval_batch_size'], device)
        run['eval'] = cached(run, 'ablate_eval.json', key, final_eval)


MISMATCH = ('mean_shift', 'var_ratio', 'pre_act_mean_shift', 'pre_act_var_ratio')
MISMATCH_ROWS = 16   # validation rows per run for the mismatch; in its cache key (it fixes the rows for a corpus)


def measure_mismatch(runs):
    """Train-vs-eval mismatch of every finished run at its own dropout site: model.dropout_mismatch
    on (up to) MISMATCH_ROWS rows of its validation data, averaged over the linear layers; cached in the run dir
    (ablate_mismatch.json). `python model.py RUN_DIR` prints the per-layer values for every site."""
    for run in runs:
        if run['state'] != 'done':
            continue

        def mean_over_layers():               # the data is read only here: a cached run needs none
            T = run['cfg']['block_size']
            ids, _ = sample_data.load_split(run['cfg']['data_dir'], 'val')
            idx = torch.from_numpy(ids[:min(MISMATCH_ROWS, len(ids) // T) * T].astype('int64')).view(-1, T)   # (<= MISMATCH_ROWS, T)
            with contextlib.redirect_stdout(io.StringIO()):
                model, _, _ = eval_lengths.load_run(run['dir'], 'cpu')
            rows = dropout_mismatch(model, idx)
            return {k: sum(r[k] for r in rows) / len(rows) for k in MISMATCH}
        run['mismatch'] = cached(run, 'ablate_mismatch.json', {'iter': run['cfg']['max_iters'], 'max_rows': MISMATCH_ROWS},
                                 mean_over_layers)


def mean_std(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return m, sd


def summarize(runs, cfg, study_argv):
    """results.json: per arm, its overrides and per task and multiple the per-seed accuracies."""
    arms_out = {}
    for run in runs:
        arm = arms_out.setdefault(run['arm'], {'overrides': cfg['arms'][run['arm']], 'seeds': [], 'pending_seeds': [],
                                               'tasks': {}})
        if 'eval' not in run:
            arm['pending_seeds'].append(run['seed'])
            continue
        arm['seeds'].append(run['seed'])
        if 'mismatch' in run:
            arm.setdefault('mismatch_per_seed', {})[str(run['seed'])] = run['mismatch']
        for r in run['eval']['results']:
            point = arm['tasks'].setdefault(r['task'], {}).setdefault(str(r['multiple']), {'per_seed': {}})
            point['per_seed'][str(run['seed'])] = r['accuracy']
            point['length'] = r['length']
    for arm in arms_out.values():
        if arm.get('mismatch_per_seed'):
            per_seed = list(arm['mismatch_per_seed'].values())
            arm['mismatch'] = {k: sum(m[k] for m in per_seed) / len(per_seed) for k in MISMATCH}
        for task in arm['tasks'].values():
            for point in task.values():
                point['mean'], point['std'] = mean_std(list(point['per_seed'].values()))
    # the command that regenerates these results: how the runs were scheduled does not matter
    study_argv = [a for a in study_argv if a[2:].split('=', 1)[0] not in ('arms', 'workers', 'dry_run')]
    return {'command': 'python ablate.py ' + shlex.join(study_argv), 'base_config': cfg['base_config'],
            'common': cfg['common'], 'out_dir': cfg['out_dir'],
            'eval': {'multiples': eval_lengths.parse_multiples('multiples', cfg['multiples']),
                     'num_samples': cfg['num_samples'], 'seed': 0, 'std': 'sample standard deviation over seeds'},
            'arms': arms_out}


def format_markdown(results):
    mults = results['eval']['multiples']
    lines = [f"`{results['command']}`", '',
             f"Accuracy per length multiple: mean ± standard deviation over seeds, "
             f"{results['eval']['num_samples']} held-out examples per point and seed.", '']
    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    for task in tasks:
        lines += [f"**{task}**", '', '| arm | seeds | ' + ' | '.join(f'{m}x' for m in mults) + ' |',
                  '| --- | --- |' + ' --- |' * len(mults)]
        for name, arm in results['arms'].items():
            cells = []
            for m in mults:
                p = arm['tasks'].get(task, {}).get(str(m))
                cells.append('-' if p is None else f"{p['mean']:.2f}" + (f" ± {p['std']:.2f}" if p['std'] is not None else ''))
            lines.append(f"| {name} | {len(arm['seeds'])} | " + ' | '.join(cells) + ' |')
        # a mean over 2-3 seeds hides whether they agree: every seed's own row
        lines += ['', 'Per seed:', '', '| arm | seed | ' + ' | '.join(f'{m}x' for m in mults) + ' |',
                  '| --- | --- |' + ' --- |' * len(mults)]
        for name, arm in results['arms'].items():
            for seed in arm['seeds']:
                points = [arm['tasks'].get(task, {}).get(str(m), {}).get('per_seed', {}).get(str(seed)) for m in mults]
                lines.append(f"| {name} | {seed} | " + ' | '.join('-' if a is None else f"{a:.2f}" for a in points) + ' |')
        lines.append('')
    measured = {n: a['mismatch'] for n, a in results['arms'].items() if a.get('mismatch')}
    if measured:
        lines += ["Train-vs-eval mismatch at each arm's own dropout site, mean over its linear layers and its "
                  f"seeds ({MISMATCH_ROWS} validation rows, 8 masks; `python model.py RUN_DIR` gives it per layer and site): "
                  "shift of the mean in eval standard deviations (0 = kept) and train/eval variance ratio "
                  "(1 = kept), at the layers' inputs and at their outputs (pre-activations).", '',
                  '| arm | input shift | input var ratio | pre-act shift | pre-act var ratio |',
                  '| --- | --- | --- | --- | --- |']
        lines += [f"| {n} | " + ' | '.join(f"{m[k]:.3f}" for k in MISMATCH) + ' |' for n, m in measured.items()]
        lines.append('')
    pending = {n: a['pending_seeds'] for n, a in results['arms'].items() if a['pending_seeds']}
    if pending:
        lines.append('Not finished yet (left out above): ' + '; '.join(f"{n} seeds {s}" for n, s in pending.items()))
    return '\n'.join(lines) + '\n'


def step_curves(runs):
    """{arm: {task: {'<m>x': {iter: mean over the arm's seeds}}}} from each run's log.jsonl; an
    iteration counts once every finished seed of the arm has logged it."""
    per_run = {}
    for run in runs:
        path = os.path.join(run['dir'], 'log.jsonl')
        if run['state'] != 'done' or not os.path.exists(path):
            continue
        for rec in train.read_log(path, float('inf')):
            for task, accs in (rec.get('length_eval') or {}).items():
                if isinstance(accs, dict):
                    for m, a in accs.items():
                        if a is not None:
                            per_run.setdefault((run['arm'], task, m), {}).setdefault(rec['iter'], {})[run['seed']] = a
    curves = {}
    for (arm, task, m), by_iter in per_run.items():
        n_seeds = max(len(v) for v in by_iter.values())
        points = {it: sum(v.values()) / len(v) for it, v in sorted(by_iter.items()) if len(v) == n_seeds}
        if len(points) > 1:         # the quick eval's multiples, not those measured only at the end
            curves.setdefault(arm, {}).setdefault(task, {})[m] = points
    return curves


def plot(results, curves, out):
    """accuracy_vs_length.png (mean over seeds, band: min..max) and accuracy_vs_step.png."""
    def by_length(ax, task):
        for name, arm in results['arms'].items():
            pts = sorted((int(m), p) for m, p in arm['tasks'].get(task, {}).items())
            if pts:
                xs = [m for m, _ in pts]
                line, = ax.plot(xs, [p['mean'] for _, p in pts], marker='o', label=f"{name} ({len(arm['seeds'])} seeds)")
                ax.fill_between(xs, [min(p['per_seed'].values()) for _, p in pts],
                                [max(p['per_seed'].values()) for _, p in pts], color=line.get_color(), alpha=0.15)

    def by_step(ax, panel):
        task, m = panel.split(' at ')
        for name, by_task in curves.items():
            pts = by_task.get(task, {}).get(m)
            if pts:
                ax.plot(list(pts), list(pts.values()), marker='.', label=name)

    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    if tasks:
        eval_lengths.plot_panels(tasks, by_length, os.path.join(out, 'accuracy_vs_length.png'),
                                 'length (x training length)', 'accuracy (mean; band: seeds min..max)')
    panels = sorted({(t, m) for a in curves.values() for t, by_m in a.items() for m in by_m},
                    key=lambda tm: (tasks.index(tm[0]) if tm[0] in tasks else 99, int(tm[1][:-1])))
    if panels:
        eval_lengths.plot_panels([f"{t} at {m}" for t, m in panels], by_step, os.path.join(out, 'accuracy_vs_step.png'),
                                 'training step', 'accuracy (mean over seeds)', log2=False)


def main(argv):
    study = {k: v for k, v in globals().items() if k in ('arms', 'common')}
    settings = settings_of(globals()) | study
    train_settings = settings_of(vars(train))
    own, passed, selected = split_argv(argv, settings, train_settings)
    cfg = configure(settings, own)
    runs = plan(cfg, passed, selected, train_settings)
    for run in runs:
        run['state'] = state(run)
    check_sources(runs)
    prepare_data(runs)                  # also for --dry_run: jobs started elsewhere must not race to write it
    if cfg['dry_run']:
        pending = [r for r in runs if r['selected'] and r['state'] != 'done']
        print(f"# {len(pending)} pending of {sum(r['selected'] for r in runs)} runs; each is independent (run them in any order, anywhere "
              f"that sees {cfg['out_dir']}), then rerun this command without --dry_run to summarize")
        for run in pending:
            print(shlex.join(['python', *command(run, run['state'] == 'partial')[1:]]))
    else:
        failed = train_grid(runs, cfg['workers'])
        if failed:
            print(f"{len(failed)} run(s) failed: see their train.log; rerun this command to retry them")
    evaluate(runs, eval_lengths.parse_multiples('multiples', cfg['multiples']), cfg['num_samples'])
    measure_mismatch(runs)
    results = summarize(runs, cfg, argv)
    out = cfg['results_dir'] or cfg['out_dir']
    os.makedirs(out, exist_ok=True)
    sample_data.write_atomic(os.path.join(out, 'results.json'), json.dumps(results, indent=1).encode())
    table = format_markdown(results)
    sample_data.write_atomic(os.path.join(out, 'results.md'), table.encode())
    print('\n' + table)
    plot(results, step_curves(runs), out)
    print(f"wrote {out}/results.json and results.md")
    if not cfg['dry_run'] and any(r['selected'] and r['state'] != 'done' for r in runs):
        sys.exit(1)


if __name__ == '__main__':
    main(sys.argv[1:])
