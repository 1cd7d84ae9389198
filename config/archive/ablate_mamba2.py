# Claim 5 (dropout helps an SSM extrapolate too): the sites on a pure Mamba2 model, otherwise the
# niah_single run's settings (config/niah_128.py) with config/mamba2.py's model:
#   python ablate.py config/ablate_mamba2.py
# Time on a 2-core CPU with --workers=2 (measured): 440-460 ms per step for each of two runs at
# once when nothing else runs, ~20 min per pair of 2500-step runs with their quick evals, then
# ~2.5 min of final eval per run: the 8 runs take ~1.6 h.
exec(open('config/ablate_sites.py').read())
base_config = 'config/niah_128.py'
common = {'block_pattern': 'M', 'n_layer': 4, 'd_state': 32, 'expand': 2, 'headdim': 32, 'chunk_size': 64}
arms = {name: arms[name] for name in ('none', 'pre_norm', 'pre_linear', 'vpad')}
seeds = '1,2'
grid_dir = 'out/ablate_mamba2'
results_dir = 'results/ablate_mamba2'   # summary (committed); checkpoints stay in grid_dir
