# The dropout-site study (claims 2-4) with the weight-decay arms (claim 1), on the main run's
# transformer (sliding window + NoPE, 128-token training, config/vpad.py):
#   python ablate.py config/ablate_sites.py
# Time on a 2-core CPU, estimated from measured parts (the full grid has not been run yet): one
# 2500-step run of config/vpad.py took 11 min 52 s and its final eval (100 examples x 7 lengths)
# ~75 s, so 18 runs take ~4 h (--workers=2 trained a small grid 1.09x faster than --workers=1).
# Trained task: niah_single only; a task that needs the key did not learn in a CPU budget (README).
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
results_dir = 'results/ablate_sites'   # summary (committed); checkpoints stay in out_dir
multiples = '1,2,4,8,16,32,64'
num_samples = 100
