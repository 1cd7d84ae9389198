# Claim 1 (length generalization can deteriorate during training): no dropout and VPAD trained 3x
# longer than the sites study, with the quick length eval logged often; accuracy_vs_step.png shows
# whether extrapolation rises and then falls.
#   python ablate.py config/ablate_long.py
# Time on a 2-core CPU with --workers=2 (measured on the no-dropout pair): ~240 s per 500 steps
# with the quick eval for each of two runs at once, 78 min per pair (part of it sharing the CPU),
# then ~4 min of final eval per run; 4 runs ~2.8 h.
exec(open('config/ablate_sites.py').read())
common = {'max_iters': 7500, 'eval_interval': 500, 'eval_multiples': '1,4,16,64'}
arms = {name: arms[name] for name in ('none', 'vpad')}
seeds = '1,2'
grid_dir = 'out/ablate_long'
results_dir = 'results/ablate_long'   # summary (committed); checkpoints stay in grid_dir
