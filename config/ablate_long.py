# Claim 1 (length generalization can deteriorate during training): no dropout and VPAD trained 4x
# longer than the sites study, with the quick length eval logged often; accuracy_vs_step.png shows
# whether extrapolation rises and then falls.
#   python ablate.py config/ablate_long.py
# TIME_NOTE
base_config = 'config/vpad.py'
common = {'max_iters': 10000, 'eval_interval': 500, 'eval_multiples': '1,4,16,64'}
arms = {
    'none': {'dropout_site': 'none'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '1,2'
out_dir = 'out/ablate_long'
multiples = '1,2,4,8,16,32,64'
num_samples = 100
