# Claim 5 (dropout helps an SSM extrapolate too): the sites on a pure Mamba2 model, otherwise the
# main run's settings (config/mamba2.py):
#   python ablate.py config/ablate_mamba2.py
# Time on a 2-core CPU with --workers=2, estimated: a Mamba2 step now costs about what a
# transformer step does (bench.py --only=mamba), so ~17 min per pair of 2500-step runs + ~3 min of
# final eval per run: 8 runs ~1.3 h. config/mamba2.py fits the task (vpad, seed 1: 1.00 at 1x,
# 24 min as a third process beside another grid).
exec(open('config/ablate_sites.py').read())
base_config = 'config/mamba2.py'
arms = {name: arms[name] for name in ('none', 'pre_norm', 'pre_linear', 'vpad')}
seeds = '1,2'
out_dir = 'out/ablate_mamba2'
results_dir = 'results/ablate_mamba2'   # summary (committed); checkpoints stay in out_dir
