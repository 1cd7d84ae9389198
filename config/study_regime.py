# The regime map: the no-dropout control of the sensitive recipe (config/sensitive.py: the main run
# with global RoPE) along one dial, rope_theta, 6 seeds per setting, and the Mamba2 recipe's control
# as a reference point. accuracy_vs_length.png shows where along the dial extrapolation fails; the
# site studies then sit at one point of it. No arm is tested against another: this is a map.
#   python ablate.py config/study_regime.py --workers=2
# Rerunning the command continues it (runs go seed by seed across the arms).
base_config = 'config/sensitive.py'
common = {'dropout_site': 'none'}
arms = {
    'theta_1e3': {'rope_theta': 1e3},
    'theta_1e4': {'rope_theta': 1e4},
    'theta_1e5': {'rope_theta': 1e5},
    'theta_1e6': {'rope_theta': 1e6},
    # config/mamba2_sensitive.py, the studies' Mamba2 recipe, as overrides (an arm names no file)
    'mamba2': {'block_pattern': 'M', 'max_iters': 6000},
}
seeds = '1,2,3,4,5,6'
grid_dir = 'out/study_regime'
results_dir = 'results/study_regime'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100          # mqar asks 2 keys an example: 200 scored values per point
# the outcome rule, fixed before the runs: the area (mean accuracy over the 7 multiples) and the range
# (the largest multiple with accuracy >= 0.5 there and at every shorter one) per run
control = ''
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.5
range_threshold = 0.5
