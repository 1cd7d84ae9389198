# Claim 5 (dropout helps an SSM extrapolate too): the sites on a pure Mamba2 model, otherwise the
# main run's settings (config/mamba2.py):
#   python ablate.py config/ablate_mamba2.py
# Time on a 2-core CPU, estimated (not yet run): a Mamba2 step costs ~1.35x a transformer step
# (bench.py --only=mamba), so ~16 min per 2500-step run + ~1.5 min of final eval; 8 runs ~2.3 h.
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
