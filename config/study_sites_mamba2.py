# The four dropout sites on Mamba2 (claim 5), 12 seeds each, paired by seed as study_sites_sensitive.
# The Mamba2 recipe of the studies is the sensitive recipe's settings with its two attention layers
# replaced by two Mamba2 layers (block_pattern 'M': d_state 64, SSD chunks of 64, width 64; the
# RoPE settings then touch no layer), not config/mamba2.py (4 layers, d_state 32). Fit-gated as the
# other studies (the decay after the fit; study_mamba2, archived, ran under the old schedule).
#   python ablate.py config/study_sites_mamba2.py --workers=2
base_config = 'config/sensitive.py'
common = {'block_pattern': 'M', 'max_iters': 6000}     # Mamba2 fits later (here 1250-5500 steps)
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
