# The four dropout sites on a 2-layer Mamba2 (claim 5), the main run's task otherwise, 12 seeds each,
# under the schedule that decays after the fit (study_mamba2 ran under the old one, whose decay over
# max_iters left later fits at a lower learning rate). Paired by seed, as study_sites_sensitive.
#   python ablate.py config/study_sites_mamba2.py --workers=2
exec(open('config/study_sites_sensitive.py').read())   # arms, seeds, eval and the tests
common = {'block_pattern': 'M', 'max_iters': 6000}     # Mamba2 fits later (regime map: 1750-2250 steps)
grid_dir = 'out/study_sites_mamba2'
results_dir = 'results/study_sites_mamba2'   # summary (committed); checkpoints stay in grid_dir
# the rule, fixed before the runs from the regime map's Mamba2 control (seeds 1-3: area 0.56-0.63,
# 8x accuracy 0.73-0.89): primary, the area paired by seed against none; secondary, the range
# (>= 0.5) and the share with >= 0.75 at 8x (Fisher)
extrap_multiple = 8
extrap_threshold = 0.75
