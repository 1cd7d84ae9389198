# The four dropout sites on Mamba2 (claim 5), 12 seeds each, paired by seed as
# study_sites_sensitive, on the studies' Mamba2 recipe (config/mamba2_sensitive.py). Fit-gated as
# the other studies (the decay after the fit; study_mamba2, archived, ran under the old schedule).
#   python ablate.py config/study_sites_mamba2.py --workers=2
base_config = 'config/mamba2_sensitive.py'
common = {}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_norm': {'dropout_site': 'pre_norm'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
reuse = {'none': 'study_regime/mamba2'}   # its seeds 1-6 are the regime map's Mamba2 control (checked equal)
seeds = '1,2,3,4,5,6,7,8,9,10,11,12'
grid_dir = 'out/study_sites_mamba2'
results_dir = 'results/study_sites_mamba2'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100         # mqar asks 2 keys an example: 200 scored values per point
# the rule, fixed before the runs from the regime map's Mamba2 control (seeds 1-3: area 0.56-0.63,
# 8x accuracy 0.73-0.89): primary, the area paired by seed against none, Holm over the three sites;
# secondary, the range (>= 0.5) and the share with >= 0.75 at 8x (Fisher)
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 8
extrap_threshold = 0.75
range_threshold = 0.5
