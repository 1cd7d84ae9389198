"""
results/headline.png, the README's picture: study_long's runs cooled early and late in their own training, where
the control's loss of length shows. `python -m publish.report` draws it from the committed summary.
"""

import statistics


def mid_range(res):
    """(task, multiple) where the median accuracy over its runs of a study of snapshots' control, cooled late, is
    nearest 0.5: where a loss of length shows, not where every run is at 1 or at 0."""
    late = (res['rule']['control'], res['long']['late'])
    ctrl = next(a for a in res['arms'].values() if (a['arm'], a['point']) == late and a['tasks'])
    task = next(iter(ctrl['tasks']))
    accs = ctrl['tasks'][task]
    return task, min(accs, key=lambda m: abs(statistics.median(accs[m]['per_seed'].values()) - 0.5))


def draw_headline(res, path):
    """results/headline.png, study_long's deterioration picture: each run's area, and its accuracy where the
    control is mid-range, cooled early (left) and late (right) in its own training, one line per run, arm by arm."""
    import eval_lengths                               # matplotlib's plots: only to draw
    from study.plots import early_late_panel
    task, m = mid_range(res)
    panels = {'area (mean accuracy, 1x..64x)': lambda a: a['area']['per_seed'],
              f"accuracy at {m}x (the control's mid-range)":
                  lambda a: a['tasks'].get(task, {}).get(m, {}).get('per_seed', {})}
    e, late = res['long']['early'], res['long']['late']
    eval_lengths.plot_panels(list(panels), lambda ax, p: early_late_panel(ax, res, panels[p]), path,
                             f"cooled at fit +{e} | fit +{late}",
                             f"{task} accuracy (a line: one run; a bar: median)", log2=False)
