# The decisive study, part 1: the four dropout sites trained from scratch on the main run's recipe
# (config/vpad.py: mqar at 64 tokens, 2 NoPE layers with short convolutions), 12 seeds each,
# fit-gated (a run stops 1000 steps after 1x >= 0.95 in the quick eval).
#   python ablate.py config/study_sites.py --workers=2
# Rerunning the command continues it; runs go seed by seed, so a stopped study has every arm at
# about the same number of seeds.
base_config = 'config/vpad.py'
common = {}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_norm': {'dropout_site': 'pre_norm'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '1,2,3,4,5,6,7,8,9,10,11,12'
grid_dir = 'out/study_sites'
results_dir = 'results/study_sites'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
# the pre-registered outcome rule, fixed before the runs: in the pilot (results/ablate_pilot) both
# arms held >= 0.9 at 16x, so extrapolation is judged at the longest length evaluated, 64x
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 64
extrap_threshold = 0.9
