"""
A study's plots (they need matplotlib): accuracy_vs_length.png, area_by_arm.png, accuracy_by_variant.png and,
from its runs' logs, accuracy_vs_step.png; ablate.py draws them after a grid, and from results.json alone:

    python -m study.plots results/<study>/results.json ...
"""

import configurator  # first: a script's Ctrl-C at start-up is one line (configurator.startup)

import os
import statistics
import sys

import eval_lengths
from study import files
from study.stats import at_point, fixed_steps, range_text


def step_curves(runs):
    """{arm: {task: {'<m>x': {seed: {iter: accuracy}}}}}: each finished run's quick length eval from
    its log.jsonl, to that run's own end (runs that fit later train longer), and under the key
    '<a>x-<b>x (mean)' its mean over the quick eval's multiples. In a study of snapshots, the trunks'
    (a cooldown branch is a short tail of its trunk)."""
    curves = {}
    for run in runs:
        if run.state != 'done' or isinstance(run.point, int):
            continue
        for rec in run.records:
            if rec.get('final'):                                   # the final eval has other multiples
                continue
            for task, accs in (rec.get('length_eval') or {}).items():
                by_m = curves.setdefault(run.arm, {}).setdefault(task, {})
                for m, a in accs.items():
                    if a is not None:
                        by_m.setdefault(m, {}).setdefault(run.seed, {})[rec['iter']] = a
                if len(accs) > 1 and None not in accs.values():
                    key = f"{min(accs, key=lambda m: int(m[:-1]))}-{max(accs, key=lambda m: int(m[:-1]))} (mean)"
                    by_m.setdefault(key, {}).setdefault(run.seed, {})[rec['iter']] = sum(accs.values()) / len(accs)
    return curves


def median_while_most_train(per_seed):
    """-> (steps, medians) of a set of runs' curves {seed: {iter: value}}, only at the steps where at
    least half of the runs are still training: past that, a median of the last runs standing is theirs
    alone, not the arm's."""
    steps = sorted({it for pts in per_seed.values() for it in pts})
    kept = [it for it in steps if 2 * sum(it in p for p in per_seed.values()) >= len(per_seed)]
    return kept, [statistics.median(p[it] for p in per_seed.values() if it in p) for it in kept]


def early_late_panel(ax, results, per_seed):
    """A study of cooled snapshots, arm by arm: each run a line from its value cooled at the early
    snapshot (left) to its value cooled at the late one (right), each side's median a bar.
    per_seed(an arm's entry in results.json) -> {seed: value}."""
    L, colour = results['long'], {}
    at = {(a['arm'], a['point']): a for a in results['arms'].values()}
    for i, arm in enumerate(dict.fromkeys(a['arm'] for a in results['arms'].values())):
        colour[arm] = f"C{i}"
        early, late = (per_seed(at[arm, p]) if (arm, p) in at else {} for p in (L['early'], L['late']))
        for seed in (s for s in early if s in late):
            ax.plot([i - 0.2, i + 0.2], [early[seed], late[seed]], color=colour[arm], lw=0.8, alpha=0.5,
                    marker='o', ms=3)
        for x, values in ((i - 0.2, early), (i + 0.2, late)):
            if values:
                ax.plot([x - 0.12, x + 0.12], [statistics.median(values.values())] * 2, color=colour[arm], lw=2.5)
    ax.set_xticks(range(len(colour)), list(colour), fontsize=8)      # the caller's x label names the two points


def assignments(settings):
    """'dropout_site=pre_linear, state_passing=carry': settings as the command line would set them."""
    return ', '.join(f'{k}={v}' for k, v in (settings or {}).items())


def arm_label(name, arm, what):
    """'pre_linear_carry: median of 4 seeds' over 'dropout_site=pre_linear, state_passing=carry': an arm and
    its overrides of the base config, so a figure read alone says what each line trained with (a line each:
    one long line would squeeze the panels beside the legend)."""
    return f"{name}: {what}\n  {assignments(arm.get('overrides')) or 'the base config'}"


def length_ticks(ax, xs):
    """Every multiple labelled; past 8 of them slanted, or 512x and 1024x run into each other."""
    many = len(xs) > 8
    ax.set_xticks(xs, [f"{m}x" for m in xs], rotation=45 if many else 0, fontsize=8 if many else None)
    ax.minorticks_off()


def plot(results, curves, out):
    """accuracy_vs_length.png (every run thin, each arm's median bold: outcomes are nearly binary per
    run, so a mean with a band would hide them; the range threshold dotted), area_by_arm.png (each
    run's area and each arm's median range, in the study's arm order: along the dial in a regime map;
    in a study of snapshots each run's line from its early to its late cooled area) and
    accuracy_vs_step.png (every run's quick eval to its own end, each arm's median bold where at least
    half of its runs still train)."""
    arms, long, fixed = results['arms'], results.get('long'), fixed_steps(results)
    # the figure says what trained: the base config and what every arm shares, each arm's own in its legend
    common = assignments(results.get('common'))
    title = f"{results.get('base_config', '')}" + (f" with {common}" if common else '')
    base = {n: a.get('arm', n) for n, a in arms.items()}      # (a study summarized before snapshots: the name)
    colour = {a: f"C{i}" for i, a in enumerate(dict.fromkeys(base.values()))}   # one colour per arm
    tasks = list(dict.fromkeys(t for a in arms.values() for t in a['tasks']))
    # a study of snapshots: one panel per task and cooled point (its early and late snapshot; at fixed steps,
    # every one: the arms are compared at each), else per task
    points = (sorted({a['point'] for a in arms.values() if isinstance(a.get('point'), int)}) if fixed else
              (long['early'], long['late']) if long else ())
    panels = ({f"{t}, cooled {at_point(p, fixed)}": (t, p) for t in tasks for p in points}
              if long else {t: (t, None) for t in tasks})

    def by_length(ax, panel):
        task, point = panels[panel]
        for name, arm in arms.items():
            pts = sorted((int(m), p) for m, p in arm['tasks'].get(task, {}).items())
            if not pts or arm.get('point') != point:
                continue
            xs, color = [m for m, _ in pts], colour[base[name]]
            for seed in pts[0][1]['per_seed']:
                ax.plot(xs, [p['per_seed'].get(seed) for _, p in pts], color=color, lw=0.8, alpha=0.35)
            medians = [statistics.median(p['per_seed'].values()) for _, p in pts]
            ax.plot(xs, medians, color=color, lw=2.5, marker='o',
                    label=arm_label(base[name], arm, f"median of {len(arm['seeds'])} seeds"))
            length_ticks(ax, xs)
        ax.axhline(results['rule']['range_threshold'], color='grey', ls=':', lw=1,
                   label=f"range threshold {results['rule']['range_threshold']:g}")

    def by_step(ax, panel):          # every run thin to its own end, each arm's median bold while most still train
        task, m = panel.split(' at ')
        for name, by_task in curves.items():
            per_seed, color = by_task.get(task, {}).get(m, {}), colour.get(name, 'k')
            for pts in per_seed.values():
                ax.plot(list(pts), list(pts.values()), color=color, lw=0.7, alpha=0.35)
            steps, medians = median_while_most_train(per_seed)
            if steps:
                ax.plot(steps, medians, color=color, lw=2, label=f"{name} (median, where >= half its runs still train)")

    def by_arm(ax, panel):            # every run's area a dot, each arm's median a bar, its median range above
        shown = [(n, a) for n, a in arms.items() if a['area']['per_seed']]
        for i, (name, arm) in enumerate(shown):
            areas, color = list(arm['area']['per_seed'].values()), colour[base[name]]
            n = len(areas)         # the dots spread around i so that none hides another
            ax.plot([i + 0.04 * (k - (n - 1) / 2) for k in range(n)], areas, 'o', color=color, alpha=0.6, ms=4)
            ax.plot([i - 0.3, i + 0.3], [statistics.median(areas)] * 2, color=color, lw=2.5)
            ax.text(i, min(0.97, max(areas) + 0.04), f"range {range_text(arm['range'])}", ha='center', fontsize=8)
        ax.set_xticks(range(len(shown)), [n for n, _ in shown], fontsize=8)

    if any(a['area']['per_seed'] for a in arms.values()):
        mults = ', '.join(f'{m}x' for m in results['eval']['multiples'])
        if long:
            eval_lengths.plot_panels([f"each run cooled {at_point(long['early'], fixed)} (left) and "
                                      f"{at_point(long['late'], fixed)} (right) "
                                      + ("steps of its own training" if fixed else "steps past the fit")],
                                     lambda ax, _: early_late_panel(ax, results, lambda a: a['area']['per_seed']),
                                     os.path.join(out, 'area_by_arm.png'), 'arm',
                                     f"area, mean accuracy over {mults} (line: one run; bar: median)", log2=False,
                                     title=title)
        else:
            eval_lengths.plot_panels([f"area per run (mean accuracy over {mults})"], by_arm,
                                     os.path.join(out, 'area_by_arm.png'), 'arm', 'area (dot: one run; bar: median)',
                                     log2=False, title=title)
    if panels:
        eval_lengths.plot_panels(list(panels), by_length, os.path.join(out, 'accuracy_vs_length.png'),
                                 'length (multiple of the training length)', 'accuracy (thin: one run each)',
                                 title=title)
    variants = results['eval'].get('variants')
    if variants:        # one panel per eval variant, a line per arm (its mean over seeds), at the primary point
        point = long['late'] if long else None
        task = tasks[0]

        def by_variant(ax, panel):
            for name, arm in arms.items():
                if arm.get('point') != point:
                    continue
                curve = ({m: p['mean'] for m, p in arm['tasks'].get(task, {}).items()} if panel == 'plain' else
                         arm.get('variants', {}).get(panel, {}).get('accuracy', {}))
                pts = sorted((int(m), a) for m, a in curve.items())
                if pts:
                    ax.plot(*zip(*pts), color=colour[base[name]], lw=2, marker='o',
                            label=arm_label(base[name], arm, f"mean of {len(arm['seeds'])} seeds"))
                    length_ticks(ax, [m for m, _ in pts])
        eval_lengths.plot_panels(['plain', *variants], by_variant, os.path.join(out, 'accuracy_by_variant.png'),
                                 'length (multiple of the training length)',
                                 f"{task} accuracy" + (f", cooled {at_point(point, fixed)}" if long else ''),
                                 title=title)
    order = lambda m: int(m[:-1]) if m[:-1].isdigit() else 1 << 20     # noqa: E731  (the mean last)
    steps = sorted({(t, m) for a in curves.values() for t, by_m in a.items() for m in by_m},
                   key=lambda tm: (tasks.index(tm[0]) if tm[0] in tasks else 99, order(tm[1])))
    if steps:
        eval_lengths.plot_panels([f"{t} at {m}" for t, m in steps], by_step, os.path.join(out, 'accuracy_vs_step.png'),
                                 'training step', 'accuracy (thin: one run each)', log2=False, title=title)


def main(paths):
    if not paths or any(p in ('-h', '--help') for p in paths):
        raise SystemExit("usage: python -m study.plots results/<study>/results.json ...: redraws "
                         "accuracy_vs_length.png and area_by_arm.png beside each (accuracy_vs_step.png needs the "
                         "runs' logs: ablate.py)")
    for path in paths:
        plot(files.read_json(path, f"restore it (git checkout {path}) or rerun its study"), {}, os.path.dirname(path))


if __name__ == '__main__':
    configurator.started()   # loaded: Ctrl-C is Python's KeyboardInterrupt again
    main(sys.argv[1:])
