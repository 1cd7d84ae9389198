# The decisive study, part 4 (claim 5: the dropout site matters for an SSM too): the sites on a
# 2-layer Mamba2 model in place of the attention layers, otherwise the main run's recipe
# (config/vpad.py: mqar at 64 tokens), 6 seeds each, fit-gated as in config/study_sites.py.
#   python ablate.py config/study_mamba2.py --workers=2
# Unlike the attention recipe, this model's extrapolation can fail: in the pilot (seed 1, 6000
# steps at most) no dropout held 0.97 at 4x and fell to 0.77 at 8x and 0.16 at 16x.
exec(open('config/study_sites.py').read())
common = {'block_pattern': 'M', 'max_iters': 6000}      # Mamba2 fits later than attention (pilot: 2000-3250 steps)
# pre_norm was added after the first three arms had run, under the same rule
arms = {name: arms[name] for name in ('none', 'pre_linear', 'vpad', 'pre_norm')}
seeds = '1,2,3,4,5,6'
grid_dir = 'out/study_mamba2'
results_dir = 'results/study_mamba2'   # summary (committed); checkpoints stay in grid_dir
# the pre-registered outcome rule, fixed before the runs: the longest multiple at which the no-dropout
# pilot run held >= 0.9 (4x; 0.77 at 8x)
extrap_multiple = 4
