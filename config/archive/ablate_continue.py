# Continued training, the paper's headline experiment in miniature: start from the `none` runs of
# config/ablate_sites.py (same seed) and train a short while longer with each dropout site; `none`
# again is the control. Does dropout added late recover extrapolation?
#   python ablate.py config/ablate_sites.py --arms=none     # first, if not done yet
#   python ablate.py config/ablate_continue.py
# Time on a 2-core CPU with --workers=2 (measured): ~5 min per run two at a time (35 min of
# training for the 12 runs), then ~1.3 min of final eval per run: ~50 min, after the `none` runs
# of the sites study.
exec(open('config/ablate_sites.py').read())
common = {
    'init_from': 'out/ablate_sites/none/seed{seed}',   # weights only: fresh optimizer and schedule
    'max_iters': 500,
    'warmup_iters': 50,
    'learning_rate': 1e-3,
    'eval_interval': 100,
}
arms = {name: arms[name] for name in ('none', 'pre_norm', 'pre_linear', 'vpad')}
grid_dir = 'out/ablate_continue'
results_dir = 'results/ablate_continue'   # summary (committed); checkpoints stay in grid_dir
