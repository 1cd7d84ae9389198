# Claim 5 (dropout helps an SSM extrapolate too): the sites on a pure Mamba2 model, otherwise the
# main run's settings (config/mamba2.py):
#   python ablate.py config/ablate_mamba2.py
# TIME_NOTE
base_config = 'config/mamba2.py'
common = {}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_norm': {'dropout_site': 'pre_norm'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '1,2'
out_dir = 'out/ablate_mamba2'
multiples = '1,2,4,8,16,32,64'
num_samples = 100
