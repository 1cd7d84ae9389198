# Pilot of the mqar recipe (config/vpad.py) before the decisive study: no dropout vs VPAD, 8 seeds
# each, fit-gated (a run stops 1000 steps after 1x >= 0.95 in the quick eval; never fitting within
# max_iters is its own outcome). The VPAD arm is the main run itself with seeds 1-8.
#   python ablate.py config/ablate_pilot.py --workers=2
base_config = 'config/vpad.py'
common = {}
arms = {'none': {'dropout_site': 'none'}, 'vpad': {'dropout_site': 'vpad'}}
seeds = '1,2,3,4,5,6,7,8'
grid_dir = 'out/ablate_pilot'
results_dir = 'results/ablate_pilot'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
# the pre-registered outcome rule
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 16
extrap_threshold = 0.9
