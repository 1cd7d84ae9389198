# The dropout-site study (claims 2-4) with the weight-decay arms (claim 1), on the main run's
# transformer (sliding window + NoPE, 128-token training, config/niah_128.py):
#   python ablate.py config/ablate_sites.py
# Time on a 2-core CPU with --workers=2 (measured on the first runs): 370-420 ms per step for each
# of two runs at once, so a pair of 2500-step runs takes 16-18 min, plus ~2-3 min of final eval
# (100 examples x 7 lengths) per run: the 18 runs take ~3.3 h. Rerunning the command continues it.
# Trained task: niah_single only; a task that needs the key did not learn in a CPU budget (README).
base_config = 'config/niah_128.py'
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
grid_dir = 'out/ablate_sites'
results_dir = 'results/ablate_sites'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
