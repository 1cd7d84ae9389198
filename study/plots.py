"""
A study's plots (they need matplotlib): accuracy_vs_length.png, area_by_arm.png and
accuracy_vs_step.png, from its results.json and its runs' logs.
"""

import os
import statistics

import eval_lengths
import rundir


def step_curves(runs):
    """{arm: {task: {'<m>x': {seed: {iter: accuracy}}}}}: each finished run's quick length eval from
    its log.jsonl, to that run's own end (runs that fit later train longer)."""
    curves = {}
    for run in runs:
        path = os.path.join(run['dir'], 'log.jsonl')
        if run['state'] != 'done' or not os.path.exists(path):
            continue
        for rec in rundir.read_log(path, float('inf')):
            for task, accs in (rec.get('length_eval') or {}).items():
                for m, a in accs.items():
                    if a is not None and not rec.get('final'):      # the final eval has other multiples
                        curves.setdefault(run['arm'], {}).setdefault(task, {}).setdefault(m, {}) \
                              .setdefault(run['seed'], {})[rec['iter']] = a
    return curves


def dots_with_median(ax, x, values, color, label=None, jitter=0.04, half=0.3):
    """One group of an area plot: each value a dot, spread around x so none hides another, their median a bar."""
    n = len(values)
    ax.plot([x + jitter * (k - (n - 1) / 2) for k in range(n)], values, 'o', color=color, alpha=0.6, ms=4, label=label)
    ax.plot([x - half, x + half], [statistics.median(values)] * 2, color=color, lw=2.5)


def plot(results, curves, out):
    """accuracy_vs_length.png (every run thin, each arm's median bold: outcomes are nearly binary per
    run, so a mean with a band would hide them), area_by_arm.png (each run's area and each arm's median
    range, in the study's arm order: along the dial in a regime map) and accuracy_vs_step.png (every
    run's quick eval to its own end, each arm's median bold)."""
    def by_length(ax, task):
        for i, (name, arm) in enumerate(results['arms'].items()):
            pts = sorted((int(m), p) for m, p in arm['tasks'].get(task, {}).items())
            if not pts:
                continue
            xs, color = [m for m, _ in pts], f"C{i}"
            for seed in pts[0][1]['per_seed']:
                ax.plot(xs, [p['per_seed'].get(seed) for _, p in pts], color=color, lw=0.8, alpha=0.35)
            medians = [statistics.median(p['per_seed'].values()) for _, p in pts]
            ax.plot(xs, medians, color=color, lw=2.5, marker='o', label=f"{name} (median of {len(arm['seeds'])} seeds)")
            ax.set_xticks(xs, [f"{m}x" for m in xs])
            ax.minorticks_off()

    def by_step(ax, panel):          # every run thin to its own end, each arm's median over its runs bold
        task, m = panel.split(' at ')
        for i, (name, by_task) in enumerate(curves.items()):
            per_seed = by_task.get(task, {}).get(m, {})
            for pts in per_seed.values():
                ax.plot(list(pts), list(pts.values()), color=f"C{i}", lw=0.7, alpha=0.35)
            steps = sorted({it for pts in per_seed.values() for it in pts})
            if steps:
                ax.plot(steps, [statistics.median(p[it] for p in per_seed.values() if it in p) for it in steps],
                        color=f"C{i}", lw=2, label=f"{name} (median of the runs still training)")

    def by_arm(ax, panel):            # every run's area a dot, each arm's median a bar, its median range above
        arms = [(n, a) for n, a in results['arms'].items() if a['area']['per_seed']]
        for i, (name, arm) in enumerate(arms):
            areas = list(arm['area']['per_seed'].values())
            dots_with_median(ax, i, areas, f"C{i}")
            ax.text(i, min(0.97, max(areas) + 0.04), f"range {arm['range']['median']:g}x", ha='center', fontsize=8)
        ax.set_xticks(range(len(arms)), [n for n, _ in arms], fontsize=8)

    tasks = list(dict.fromkeys(t for a in results['arms'].values() for t in a['tasks']))
    if any(a['area']['per_seed'] for a in results['arms'].values()):
        eval_lengths.plot_panels([f"area per run (mean accuracy over {', '.join(f'{m}x' for m in results['eval']['multiples'])})"],
                                 by_arm, os.path.join(out, 'area_by_arm.png'), 'arm', 'area (dot: one run; bar: median)',
                                 log2=False)
    if tasks:
        eval_lengths.plot_panels(tasks, by_length, os.path.join(out, 'accuracy_vs_length.png'),
                                 'length (multiple of the training length)', 'accuracy (thin: one run each)')
    panels = sorted({(t, m) for a in curves.values() for t, by_m in a.items() for m in by_m},
                    key=lambda tm: (tasks.index(tm[0]) if tm[0] in tasks else 99, int(tm[1][:-1])))
    if panels:
        eval_lengths.plot_panels([f"{t} at {m}" for t, m in panels], by_step, os.path.join(out, 'accuracy_vs_step.png'),
                                 'training step', 'accuracy (thin: one run each)', log2=False)
