"""
A study's settings, checked in one place before anything runs: check() refuses in one line naming the key and
the fix what cannot make the grid a study config describes (ablate.py's keys, every run's train.py settings as
train.py checks them, and how the two fit) and returns each run's exact settings and the study's lists,
parsed once. split_argv reads ablate.py's command line.
"""

import os
import re
from typing import NamedTuple

import eval_lengths
import sample_data
import train
from configurator import configure, items, settings_of, unknown_key
from train_checks import check_config
from study.stats import CHANGE, early_late

LAUNCHERS = ('local', 'slurm', 'submitit_local')


class Planned(NamedTuple):
    """One run of the grid as check() found it: (arm, seed k), trained into grid_dir/<arm>/seed<k>/."""
    arm: str
    seed: int
    dir: str
    argv: list        # train.py's arguments that make it (init_from_study's --init_from not yet among them)
    cfg: dict         # the exact settings train.py will use, checked as train.py checks them
    tasks: list       # its eval tasks
    snapshots: tuple  # a trunk's snapshots (train_checks.check_config's), () for a run that is no trunk
    fixed: bool       # whether they are steps of its training (snapshots_at_iter), not steps past its fit


class Lists(NamedTuple):
    """A study's settings that are lists, as check() parsed them, once: what it hands them to never parses them."""
    seeds: list       # the training seeds
    multiples: list   # the final eval's lengths, in multiples of each run's block_size
    variants: tuple   # the length-scaling variants the final eval is also taken under
    slurm_extra: dict  # other sbatch options, {key: value}
    comparisons: dict  # the study's own comparisons: {family: [(a, b, a's terms, b's terms)]}, each parse_term's


def fail(msg):
    raise SystemExit(f"config error: {msg}")


def check(cfg, passed, selected, train_settings):
    """Every setting of a study, checked before anything runs, top to bottom as the refusals come. cfg: its
    config read with ablate.py's keys; passed: train.py overrides from the command line for every run;
    selected: the --arms selection or None; train_settings: train.py's keys and defaults. -> ([Planned],
    arm-major: each run's exact settings; Lists)"""
    extra = check_launcher(cfg)

    # the grid: its arms, seeds and folders
    if not cfg['arms']:
        fail("the study sets no arms: a study config needs arms = {'name': {train.py overrides}, ...}")
    if selected is not None:
        if not selected:
            fail("--arms is empty: name arms of the study, e.g. --arms=" + ','.join(list(cfg['arms'])[:2]))
        for a in selected:
            if a not in cfg['arms']:
                fail(f"unknown arm '{a}' in --arms; arms of this study: {', '.join(cfg['arms'])}")
    try:        # the settings that are lists: each parsed here, once (Lists hands them on)
        seed_items, variants = items('seeds', cfg['seeds']), items('eval_variants', cfg['eval_variants'])
        mults = eval_lengths.parse_multiples('multiples', cfg['multiples'])
    except ValueError as e:
        fail(str(e))
    for v in variants:
        try:
            eval_lengths.parse_variant(v)
        except ValueError as e:
            fail(f"eval_variants={cfg['eval_variants']!r}: {e}")
    try:
        seeds = [int(s) for s in seed_items]
    except ValueError:
        seeds = None
    if not seeds:
        fail(f"seeds={cfg['seeds']!r}: give integers separated by commas, e.g. --seeds=1,2,3")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        fail(f"seeds={cfg['seeds']!r} names seed {', '.join(map(str, twice))} more than once: give each seed once")
    for arm in cfg['arms']:       # an arm's name is a folder inside grid_dir, never a path out of it
        if not (isinstance(arm, str) and re.fullmatch(r'[A-Za-z0-9_.+-]+', arm) and arm not in ('.', '..')):
            fail(f"arm name {arm!r}: run (arm, seed k) trains into grid_dir/<arm>/seed<k>/, so name it with letters, "
                 f"digits, '_', '-', '+' or '.' (not '', '.' or '..', no '/')")
    if not os.path.isfile(cfg['base_config']):
        fail(f"base_config '{cfg['base_config']}' not found (run from the repository root)")
    for k in ('workers', 'eval_samples'):
        if cfg[k] < 1:
            fail(f"{k}={cfg[k]} must be positive")
    if cfg['eval_samples_long'] < 0:
        fail(f"eval_samples_long={cfg['eval_samples_long']} must be >= 0 (0: eval_samples past 64x too)")
    for k in ('grid_dir', 'results_dir'):
        if os.path.exists(cfg[k]) and not os.path.isdir(cfg[k]):
            fail(f"{k}={cfg[k]!r} is a file, not a folder: give a folder")

    # the pre-registered rule: the final eval, the thresholds, the families and comparisons it tests
    if cfg['control'] and cfg['control'] not in cfg['arms']:
        fail(f"control={cfg['control']!r} is not an arm of this study ({', '.join(cfg['arms'])}); name one, "
             f"or '' for no tests")
    if cfg['deteriorate_multiple'] < 0:
        fail(f"deteriorate_multiple={cfg['deteriorate_multiple']} must be >= 0 (0 = no rule)")
    if cfg['deteriorate_evals'] < 1:
        fail(f"deteriorate_evals={cfg['deteriorate_evals']} must be >= 1")
    if not 0 < cfg['deteriorate_drop'] <= 1:
        fail(f"deteriorate_drop={cfg['deteriorate_drop']} must be in (0, 1]")
    for k in ('fit_accuracy', 'extrap_threshold', 'range_threshold'):
        if not 0 < cfg[k] <= 1:
            fail(f"{k}={cfg[k]} must be in (0, 1]: it is an accuracy")
    if not 0 < cfg['delta'] <= 1:
        fail(f"delta={cfg['delta']} must be in (0, 1]: it is a difference of areas")
    in_family = [a for arms in cfg['families'].values() for a in (arms if isinstance(arms, list) else [None])]
    for a in in_family:
        arm = a.removesuffix(CHANGE) if isinstance(a, str) else a
        if arm not in cfg['arms'] or arm == cfg['control']:
            fail(f"families={cfg['families']!r}: each family is a list of the arms tested against "
                 f"control={cfg['control']!r}, other than it "
                 f"({', '.join(n for n in cfg['arms'] if n != cfg['control'])}), and of the changes it tests "
                 f"with them (\"arm{CHANGE}\")")
    changes = [(f, a) for f, arms in cfg['families'].items() if isinstance(arms, list) for a in arms
               if a.endswith(CHANGE)]
    for family, a in changes:
        if a.removesuffix(CHANGE) not in cfg['families'][family]:
            fail(f"families[{family!r}] names {a!r}: the change of an arm the family lists; add "
                 f"{a.removesuffix(CHANGE)!r} to it")
    for a in cfg['reuse']:
        if a not in cfg['arms'] or not isinstance(cfg['reuse'][a], str):
            fail(f"reuse={cfg['reuse']!r}: map arms of this study to 'study' or 'study/arm' "
                 f"(arms: {', '.join(cfg['arms'])})")
    if cfg['init_from_study'] and (cfg['init_from_study'].count('/') != 1 or 'init_from' in cfg['common']
                                   or any('init_from' in o for o in cfg['arms'].values() if isinstance(o, dict))):
        fail(f"init_from_study={cfg['init_from_study']!r}: name one 'study/arm', and set no init_from in common "
             f"or the arms")
    if len(set(in_family)) < len(in_family):
        fail(f"families={cfg['families']!r}: an arm is in two families; Holm adjusts each arm's p once")
    if len(set(variants)) < len(variants):
        fail(f"eval_variants={cfg['eval_variants']!r} names a variant twice")
    comparisons, parsed = cfg['comparisons'], {}
    try:
        if not isinstance(comparisons, dict):
            raise ValueError("comparisons must map a family's name to a list of [a, b] pairs")
        for family, pairs in comparisons.items():
            if not isinstance(pairs, list) or not pairs:
                raise ValueError(f"comparisons[{family!r}] must be a non-empty list of [a, b] pairs")
            for pair in pairs:
                if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                    raise ValueError(f"comparisons[{family!r}]: {pair!r} is not a pair [a, b] (a - b is tested)")
                parsed.setdefault(family, []).append((*pair, *(parse_term(side, cfg['arms'], variants)
                                                               for side in pair)))
    except ValueError as e:
        fail(f"comparisons: {e}")
    if cfg['extrap_multiple'] not in mults:
        fail(f"extrap_multiple={cfg['extrap_multiple']} is not in multiples={cfg['multiples']!r}: the final eval "
             f"would not measure it")

    # every run: its train.py settings, checked as train.py checks them, and how they fit the rule
    runs, kinds = [], {}    # kinds: arm -> whether its trunks keep their snapshots at fixed steps
    for arm, overrides in cfg['arms'].items():
        if not isinstance(overrides, dict):
            fail(f"arm '{arm}' must map to a dict of train.py overrides, got {type(overrides).__name__}")
        if 'seed' in cfg['common'] or 'seed' in overrides:
            fail(f"arm '{arm}': a run's seed comes from seeds={cfg['seeds']!r}; drop 'seed' from common and the arms")
        # one fit rule: train.py's (it logs fit_iter, and stops steps_after_fit after it) is the study's
        if any(o.get('fit_accuracy', cfg['fit_accuracy']) != cfg['fit_accuracy'] for o in (cfg['common'], overrides)):
            fail(f"arm '{arm}': fit_accuracy is the study's pre-registered fit rule: set it once, at the top of the "
                 f"study config, not in common or an arm")
        for seed in seeds:
            run = run_settings(cfg, arm, seed, passed, train_settings, variants)
            if run.snapshots:
                kinds[arm] = run.fixed
            runs.append(run)

    # one corpus a data_dir: arms that differ in one (its tasks, distractors, ...) each need their own
    corpora = {}
    for run in runs:
        corpus = sample_data.corpus_settings(run.cfg)
        arm, theirs = corpora.setdefault(os.path.normpath(run.cfg['data_dir']), (run.arm, corpus))
        differ = [k for k in corpus if corpus[k] != theirs.get(k)] + [k for k in theirs if k not in corpus]
        if differ:
            fail(f"arms '{arm}' and '{run.arm}' share data_dir={run.cfg['data_dir']!r} but differ in its corpus ("
                 + ', '.join(f"{k}={theirs.get(k)!r} there, {k}={corpus.get(k)!r} here" for k in differ[:3])
                 + "): give each its own data_dir in its overrides")

    if cfg['every_run_counts']:
        unequal = next((r for r in runs if r.cfg['steps_after_fit'] or r.snapshots), None)
        if unequal:
            fail(f"every_run_counts=True counts every run as trained for the same steps, and arm '{unequal.arm}' "
                 f"stops {unequal.cfg['steps_after_fit']} steps after its fit or keeps snapshots: give every arm "
                 f"steps_after_fit=0 and no snapshots (a study of snapshots at fixed steps counts every run already)")

    # one kind of point in a study
    if len(set(kinds.values())) > 1:
        fail("arms " + ', '.join(a for a, f in kinds.items() if f) + " keep snapshots at fixed steps "
             "(snapshots_at_iter), " + ', '.join(a for a, f in kinds.items() if not f) + " past the fit "
             "(snapshots_after_fit): a study compares its arms at one kind of point; give every arm the same")
    if changes and not kinds:
        fail(f"families={cfg['families']!r} names a change ({changes[0][1]!r}), from early_snapshot to late_snapshot: "
             f"only a study of snapshots (snapshots_after_fit or snapshots_at_iter) has one")
    return runs, Lists(seeds, mults, tuple(variants), extra, parsed)


def check_launcher(cfg):
    """The launcher's settings, first: submitit, which the cluster launchers need, is optional. -> slurm_extra,
    {key: value}"""
    launcher = cfg['launcher']
    if launcher not in LAUNCHERS:
        fail(f"unknown launcher {launcher!r}: local (train here, the default), slurm (a Slurm job per run, via "
             f"submitit) or submitit_local (those jobs as processes here)")
    if cfg['eval_on'] not in ('local', launcher):
        fail(f"eval_on={cfg['eval_on']!r}: eval jobs go through the runs' launcher, so eval_on is 'local' (the "
             f"default) or the launcher's name (--launcher={launcher})")
    if launcher == 'local':
        return {}
    if launcher == 'slurm' and not cfg['slurm_partition']:
        fail("--launcher=slurm needs --slurm_partition=NAME (`sinfo -s` lists the partitions)")
    for key, least in (('slurm_gpus_per_run', -1), ('slurm_cpus_per_run', 1), ('slurm_time_min', 1),
                       ('slurm_mem_gb', 0)):
        if cfg[key] < least:
            fail(f"{key}={cfg[key]} must be >= {least}")
    try:
        extra = items('slurm_extra', cfg['slurm_extra'])
    except ValueError as e:
        fail(str(e))
    if any('=' not in kv or not kv.split('=', 1)[0].strip() for kv in extra):
        fail(f"slurm_extra={cfg['slurm_extra']!r}: give sbatch options as key=value separated by commas, "
             f"e.g. account=abc,qos=high")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise SystemExit(f"--launcher={launcher} needs the submitit package, which is not installed: "
                         f"pip install submitit") from None
    return dict(kv.split('=', 1) for kv in extra)


def run_settings(cfg, arm, seed, passed, train_settings, variants):
    """Run (arm, seed k)'s train.py settings, checked as train.py checks them, and how they fit the study's
    rule. -> Planned"""
    run_dir = os.path.join(cfg['grid_dir'], arm, f'seed{seed}')
    argv = [cfg['base_config'], *flags(cfg['common'], seed), *flags(cfg['arms'][arm], seed),
            *(p.replace('{seed}', str(seed)) for p in passed), f"--fit_accuracy={cfg['fit_accuracy']}",
            f'--seed={seed}', f'--out_dir={run_dir}']
    try:  # the exact settings train.py will use, checked as train.py checks them
        run_cfg = configure(train_settings, argv, quiet=True)
        # init_from: see study.runs.check_sources; the device and memory only where the runs run here (not
        # a job's node)
        checked = check_config({**run_cfg, 'init_from': 'scratch'}, here=cfg['launcher'] == 'local')
    except SystemExit as e:
        fail(f"arm '{arm}': {str(e).removeprefix('config error: ')}")
    eval_tasks, quick, model, snapshots, fixed = (checked.eval_tasks, checked.quick, checked.model, checked.snapshots,
                                                  checked.fixed)
    for v in variants:
        misfit = eval_lengths.variant_misfit(model, v)
        if misfit:
            fail(f"arm '{arm}': eval_variants={cfg['eval_variants']!r}: {v!r} rescales {misfit} layers, and its model "
                 f"has none")
    if 1 not in quick:      # the summary's fit rule reads the 1x quick eval of every run
        fail(f"arm '{arm}': its quick eval (eval_multiples={run_cfg['eval_multiples']!r}) has no 1x: "
             f"no run could fit, so the study would summarize nothing; add 1")
    if cfg['deteriorate_multiple'] and cfg['deteriorate_multiple'] not in quick:
        fail(f"arm '{arm}': deteriorate_multiple={cfg['deteriorate_multiple']} is not in its quick eval "
             f"(eval_multiples={run_cfg['eval_multiples']!r}): the rule would see nothing")
    if cfg['extrap_task'] and cfg['extrap_task'] not in eval_tasks:
        fail(f"arm '{arm}': extrap_task={cfg['extrap_task']!r} is not among its eval tasks "
             f"({', '.join(eval_tasks)})")
    # a trunk (a run with snapshots): early_snapshot and late_snapshot two of its snapshots, the late one
    # its own stop (its own final eval is the uncooled model there)
    key = 'snapshots_at_iter' if fixed else 'snapshots_after_fit'
    for k in ('early_snapshot', 'late_snapshot'):
        if cfg[k] and cfg[k] not in snapshots:
            fail(f"{k}={cfg[k]} is not a snapshot of arm '{arm}' ({key}={run_cfg[key]!r})")
    if (cfg['fit_plus_reading'] or cfg['fit_plus_window']) and not fixed:
        fail(f"fit_plus_reading={cfg['fit_plus_reading']}, fit_plus_window={cfg['fit_plus_window']}: these read a "
             f"study at fixed steps (snapshots_at_iter) near each run's fit + k; arm '{arm}' has none "
             f"(a study with snapshots_after_fit reads fit + k itself): remove them")
    if cfg['fit_plus_reading'] < 0 or cfg['fit_plus_window'] < 0 or (
            cfg['fit_plus_reading'] > 0) != (cfg['fit_plus_window'] > 0):
        fail(f"fit_plus_reading={cfg['fit_plus_reading']}, fit_plus_window={cfg['fit_plus_window']}: give both as "
             f"steps > 0 (e.g. 4000 and 1500: the snapshot within 1500 steps of fit + 4000), or neither")
    if cfg['fit_plus_window'] >= cfg['fit_plus_reading'] > 0:     # a point read must lie past the run's fit
        fail(f"fit_plus_window={cfg['fit_plus_window']} must be below fit_plus_reading={cfg['fit_plus_reading']}: "
             f"a wider window could read a run before its fit")
    if snapshots:
        early, late = early_late(snapshots, cfg['early_snapshot'], cfg['late_snapshot'])
        stop = 'max_iters' if fixed else 'steps_after_fit'
        if early >= late or late != run_cfg[stop]:
            fail(f"arm '{arm}': early_snapshot={early} must come before late_snapshot={late}, and that one "
                 f"be the trunk's stop, {stop}={run_cfg[stop]}")
    return Planned(arm, seed, run_dir, argv, run_cfg, eval_tasks, snapshots, fixed)


def parse_term(term, arms, variants):
    """A side of a comparison: 'vpad', 'vpad@yarn', or a difference of such, 'vpad@yarn - none@yarn'.
    -> [(sign, arm, variant)], variant '' plain. A ValueError names what is wrong."""
    if not isinstance(term, str) or not term.strip():
        raise ValueError(f"{term!r} is not a side of a comparison: give 'arm', 'arm@variant' or 'x - y' of those")
    parts = []
    for i, part in enumerate(term.split(' - ')):
        arm, _, variant = part.strip().partition('@')
        if arm not in arms:
            raise ValueError(f"{term!r}: {arm!r} is not an arm of this study ({', '.join(arms)})")
        if variant and variant not in variants:
            raise ValueError(f"{term!r}: {variant!r} is not one of eval_variants ({', '.join(variants) or 'none'})")
        parts.append((-1 if i else 1, arm, variant))
    return parts


def flags(overrides, seed):
    """{'dropout': 0.1, 'init_from': 'runs/seed{seed}'} -> ['--dropout=0.1', '--init_from=runs/seed1']."""
    out = []
    for k, v in overrides.items():
        v = (v.replace('{seed}', str(seed)) if isinstance(v, str) else repr(v))
        out.append(f'--{k}={v}')
    return out


def train_defaults():
    """train.py's keys and their defaults."""
    return settings_of(vars(train))


def split_argv(argv, study_keys):
    """ablate.py's command line -> (its own argv, train.py overrides for every run, the --arms selection or None)."""
    train_keys = train_defaults()
    own, passed, selected = [], [], None
    for arg in argv:
        key = arg[2:].split('=', 1)[0] if arg.startswith('--') else None
        if key == 'arms':
            try:
                selected = items('arms', arg.split('=', 1)[1]) if '=' in arg else []
            except ValueError as e:
                raise SystemExit(f"config error: {e}") from None
        elif key is None or key in study_keys or key in ('help', ''):
            own.append(arg)
        elif key == 'seed':
            raise SystemExit(f"config error: ablate.py gives run (arm, seed k) --seed=k from the grid's seeds: "
                             f"--seeds={arg.split('=', 1)[-1]}, not {arg}")
        elif key == 'out_dir':
            raise SystemExit("config error: ablate.py trains run (arm, seed k) into grid_dir/<arm>/seed<k>: "
                             f"give the grid's root as --grid_dir={arg.split('=', 1)[-1]}, not --out_dir")
        elif key in train_keys:
            passed.append(arg)                # '{seed}' in it is filled in per run, as in a config's overrides
        else:
            raise SystemExit("config error: " + unknown_key(key, list(study_keys) + list(train_keys)))
    return own, passed, selected
