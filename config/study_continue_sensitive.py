# The paper's headline experiment on the sensitive recipe: each of the 12 no-dropout runs of
# config/study_positive.py (global RoPE, rope_theta 1e4; fit, then 1000 steps of decay) continues
# for 1000 more steps with each dropout site, and with no dropout as the control continuation; the
# runs of one seed share their base and their batches, so each site is tested against the control
# paired by base. Does dropout added late move the curve where the control fails (its range: 4x)?
#   python ablate.py config/study_positive.py --arms=none --workers=2     # the bases, if not done yet
#   python ablate.py config/study_continue_sensitive.py --workers=2
base_config = 'config/sensitive.py'
init_from_study = 'study_positive/none'   # each run continues that seed's run (weights only: fresh optimizer
                                          # and schedule), wherever study_positive keeps it (seeds 1-6: study_regime's)
common = {
    'max_iters': 1000,
    'steps_after_fit': 0,      # the same 1000 steps for every continuation, fit or not
    'warmup_iters': 50,
    'learning_rate': 1e-3,
}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_norm': {'dropout_site': 'pre_norm'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '1,2,3,4,5,6,7,8,9,10,11,12'
grid_dir = 'out/study_continue_sensitive'
results_dir = 'results/study_continue_sensitive'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100         # mqar asks 2 keys an example: 200 scored values per point
# the rule, fixed before the runs (study_positive's): primary, the area paired by base against the none
# continuation, Holm over the three sites; secondary, the range (>= 0.5) and the share >= 0.75 at 4x
control = 'none'
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.75
range_threshold = 0.5
