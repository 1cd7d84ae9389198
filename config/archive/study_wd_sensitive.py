# Claim 1 on the sensitive recipe: does length generalization deteriorate during long training, and
# does weight decay speed that up? No dropout and VPAD, each with and without weight_decay=0.1, 12
# seeds, trained 10,000 steps past the fit at a constant learning rate after warmup (this study's
# own schedule, on purpose: a decay would hide a drift), the quick eval every 250 steps on 64
# examples at 1x-8x, where the control sits mid-range (regime map: 0.88 / 0.67 / 0.27 at 2x / 4x /
# 8x; at 16x and beyond it is near the floor, where no drop could show).
#   python ablate.py config/study_wd_sensitive.py --workers=2      # the longest study: 8-10 min a run, ~4.5 h
base_config = 'config/sensitive.py'
common = {'steps_after_fit': 10000, 'max_iters': 14000, 'decay_lr': False,
          'eval_interval': 250, 'eval_multiples': '1,2,4,8', 'eval_samples': 64}
arms = {
    'none': {'dropout_site': 'none'},
    'none_wd': {'dropout_site': 'none', 'weight_decay': 0.1},
    'vpad': {'dropout_site': 'vpad'},
    'vpad_wd': {'dropout_site': 'vpad', 'weight_decay': 0.1},
}
seeds = '1,2,3,4,5,6,7,8,9,10,11,12'
grid_dir = 'out/study_wd_sensitive'
results_dir = 'results/study_wd_sensitive'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100         # mqar asks 2 keys an example: 200 scored values per point
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.75
range_threshold = 0.5
# the rule, fixed before the runs: a fit run deteriorates when its 4x quick eval falls >= 0.2 below
# its running maximum since the fit at 2 quick evals in a row (counted per arm, Fisher against
# none); the area at the end paired by seed as in the other studies. The verdict (README's table):
# Fisher on that count for none_wd vs none, vpad_wd vs vpad (weight decay) and vpad vs none, Holm
# over the three
deteriorate_multiple = 4
deteriorate_drop = 0.2
deteriorate_evals = 2
