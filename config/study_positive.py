# The instrument's positive control: two settings of the dial that differ by a known amount, through
# the same 12-seed paired pipeline and tests as the site studies. The no-dropout control of the
# sensitive recipe (config/sensitive.py, rope_theta 1e4) against rope_theta 3e4; the regime map
# (results/study_regime) has the area rise from about 0.4 at 1e4 to about 0.6 at 1e5. If this shift
# is not detected, a null site verdict on this recipe reads "underpowered", not "not reproduced".
# Its `none` arm is also the 12-seed pilot of the sensitive recipe's control.
#   python ablate.py config/study_positive.py --workers=2
base_config = 'config/sensitive.py'
common = {'dropout_site': 'none'}
arms = {'none': {}, 'theta_3e4': {'rope_theta': 3e4}}
reuse = {'none': 'study_regime/theta_1e4'}   # its seeds 1-6 are the regime map's (the same settings, checked)
seeds = '1,2,3,4,5,6,7,8,9,10,11,12'
grid_dir = 'out/study_positive'
results_dir = 'results/study_positive'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100         # mqar asks 2 keys an example: 200 scored values per point
# the outcome rule, fixed before the runs (from the regime map's rope_theta 1e4 runs, seeds 1-4: area
# 0.38-0.43, range 4x at 0.5, 4x accuracy 0.61-0.78): primary, the area paired by seed against none;
# secondary, the range (>= 0.5) and the share with >= 0.75 at 4x (Fisher)
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.75
range_threshold = 0.5
