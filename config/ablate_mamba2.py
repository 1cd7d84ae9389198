# Claim 5 (dropout helps an SSM extrapolate too): the sites on a pure Mamba2 model, otherwise the
# main run's settings (config/mamba2.py):
#   python ablate.py config/ablate_mamba2.py
# Time on a 2-core CPU with --workers=2, estimated (not yet run): a Mamba2 step costs ~1.35x a
# transformer step (bench.py --only=mamba), so ~23 min per pair of 2500-step runs + ~3 min of final
# eval per run; 8 runs ~1.9 h. First check that it fits at all: python train.py config/mamba2.py
exec(open('config/ablate_sites.py').read())
base_config = 'config/mamba2.py'
arms = {name: arms[name] for name in ('none', 'pre_norm', 'pre_linear', 'vpad')}
seeds = '1,2'
out_dir = 'out/ablate_mamba2'
results_dir = 'results/ablate_mamba2'   # summary (committed); checkpoints stay in out_dir
