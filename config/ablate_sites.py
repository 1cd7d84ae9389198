# The dropout-site study (claims 2-4) with the weight-decay arms (claim 1), on the main run's
# transformer (sliding window + NoPE, 128-token training, config/vpad.py):
#   python ablate.py config/ablate_sites.py
# TIME_NOTE
base_config = 'config/vpad.py'
common = {}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_norm': {'dropout_site': 'pre_norm'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
    'pre_norm_wd': {'dropout_site': 'pre_norm', 'weight_decay': 0.1},
    'vpad_wd': {'dropout_site': 'vpad', 'weight_decay': 0.1},
}
seeds = '1,2,3'
out_dir = 'out/ablate_sites'
multiples = '1,2,4,8,16,32,64'
num_samples = 100
