# The decisive study, part 3 (claim 1: weight decay speeds up the loss of length generalization):
# no dropout with and without weight_decay=0.1, trained 3000 steps past the fit at a constant
# learning rate, so any loss of extrapolation has time to show. The committed runs had no warmup
# (decay_lr=False skipped it then; it no longer does), so warmup_iters=0 retrains them as they were
# (their own checkpoints, which say warmup_iters=100, are refused as runs of other settings).
#   python ablate.py config/study_wd.py --workers=2
exec(open('config/study_sites.py').read())
common = {'dropout_site': 'none', 'steps_after_fit': 3000, 'max_iters': 7000, 'decay_lr': False,
          'warmup_iters': 0}
arms = {'none': {}, 'none_wd': {'weight_decay': 0.1}}
grid_dir = 'out/study_wd'
results_dir = 'results/study_wd'   # summary (committed); checkpoints stay in grid_dir
# pre-registered as in study_sites: a fit run extrapolates when it holds >= 0.9 at 64x at its end
