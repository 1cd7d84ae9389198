# The first pilot of the fit-gated recipe (niah_single, window 16), superseded by config/ablate_pilot.py: no dropout vs VPAD.
# Result (README, 5 runs finished): this recipe fails the pilot: without dropout 3/3 fit at steps
# 2000-2250 and none extrapolates past 4x; with VPAD 0/2 fit in 4000 steps; 14-27 min per run.
#   python ablate.py config/ablate_pilot_niah.py --workers=2
# The layout has no window shortcut: on niah_single every training value sits more than 30 tokens
# before its answer, and the two window layers of 16 reach 2 x 15 = 30 tokens (train.py prints the
# measured share, 100%). The NoPE layer comes first (N W N W): with the window layer first, window 16
# had not learned to copy by step 500 (README). A run stops 500 steps after it fits (1x >= 0.95 in
# the quick eval), so the arms compare after equal training past the fit; never fitting within
# max_iters is its own outcome. Width 64 for speed (one thread per run with --workers=2).
base_config = 'config/niah_128.py'
common = {'window': 16, 'nope_first': True, 'n_embd': 64, 'n_head': 2, 'learning_rate': 3e-3,
          'max_iters': 4000, 'steps_after_fit': 500, 'eval_multiples': '1,16'}
arms = {'none': {'dropout_site': 'none'}, 'vpad': {'dropout_site': 'vpad'}}
seeds = '1,2,3,4,5,6,7,8'
grid_dir = 'out/ablate_pilot_niah'
results_dir = 'results/ablate_pilot_niah'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
# the pre-registered outcome rule
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 16
extrap_threshold = 0.9
