# The four dropout sites on the sensitive recipe (config/sensitive.py: the main run with global RoPE,
# whose no-dropout control fits and then decays from 2x: results/study_regime), 12 seeds each, paired
# by seed (a seed fixes the initial weights and the batches in every arm). Claims 3-4: does
# Pre-Linear dropout or VPAD move the curve where the control fails?
#   python ablate.py config/study_sites_sensitive.py --workers=2
# Rerunning the command continues it; runs go seed by seed across the arms.
exec(open('config/study_positive.py').read())       # its recipe, eval and rule (fixed before these runs)
common = {}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_norm': {'dropout_site': 'pre_norm'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
grid_dir = 'out/study_sites_sensitive'
results_dir = 'results/study_sites_sensitive'   # summary (committed); checkpoints stay in grid_dir
# primary: the area paired by seed against none, Holm over the three sites; secondary: the range
# (>= 0.5), the share with >= 0.75 at 4x (Fisher, Holm), steps to fit
