# The pilot of the second scale's control (config/sensitive_4x128.py): no dropout, 2 seeds at rope_theta
# 1e4 and 1e5, each a fit-gated run decayed over the 1000 steps past its fit (the sensitive recipe's
# schedule), evaluated plain at 1x..64x. It picks the recipe's theta before any site study: the one whose
# control's range (the largest multiple with accuracy >= 0.5 there and at every shorter one) lies in 2x..8x,
# as the small model's does at 1e4; if both or neither do, the one whose mean area is nearer 0.45.
# A map, no test: seeds 1-2 (study_scale's are 21-30).
#   python ablate.py config/study_scale_pilot.py --workers=2
base_config = 'config/sensitive_4x128.py'
common = {'dropout_site': 'none'}
arms = {
    'theta_1e4': {'rope_theta': 1e4},
    'theta_1e5': {'rope_theta': 1e5},
}
seeds = '1,2'
grid_dir = 'out/study_scale_pilot'
results_dir = 'results/study_scale_pilot'
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
control = ''
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.5
range_threshold = 0.5
