# The four dropout sites on the sensitive recipe (config/sensitive.py: the main run with global RoPE,
# whose no-dropout control fits and then decays from 2x: results/study_regime), 12 seeds each, paired
# by seed (a seed fixes the initial weights and the batches in every arm). Claims 3-4: does
# Pre-Linear dropout or VPAD move the curve where the control fails?
#   python ablate.py config/study_sites_sensitive.py --workers=2
# Rerunning the command continues it; runs go seed by seed across the arms.
base_config = 'config/sensitive.py'
common = {}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_norm': {'dropout_site': 'pre_norm'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
reuse = {'none': 'study_positive'}   # its none arm: the same settings and seeds (checked), trained once
seeds = '1,2,3,4,5,6,7,8,9,10,11,12'
grid_dir = 'out/study_sites_sensitive'
results_dir = 'results/study_sites_sensitive'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100         # mqar asks 2 keys an example: 200 scored values per point
# the rule, fixed before the runs (study_positive's, from the regime map's rope_theta 1e4 runs): primary,
# the area paired by seed against none, Holm over the three sites; secondary, the range (>= 0.5), the
# share with >= 0.75 at 4x (Fisher, Holm), steps to fit
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.75
range_threshold = 0.5
