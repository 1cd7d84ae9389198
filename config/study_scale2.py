# The second scale in its own regime, compared at equal steps: does the small model's plain verdict (VPAD
# above no dropout) hold at 4 layers x 128 (0.97M parameters) when the control has room and the arms are
# read at equal total steps after long training? study_scale compared the two at fit + 4000, where its
# sites fit ~2000 steps later than the control and its control held to 32x; this study takes the recipe
# config/sensitive_4x128_theta1e3.py (rope_theta 1e3 from results/study_scale2_pilot, where the control's range lies in
# 2x..8x as the small model's does) and reads each run at fixed steps of its own training, as the paper
# does ("at 44K steps"). Arms none and vpad, fresh seeds 51-60 (no other study ran them). Each run is one
# trunk at the peak learning rate to step 16000 that keeps its exact state at 6000, 11000 and 16000
# total steps; each snapshot is cooled for 1000 steps to min_lr (<run>/at<k>/) and evaluated at 1x..64x
# plain and under yarn (100 held-out examples a point), paired by seed. A run not fit by a snapshot is
# cooled, evaluated and marked "not fit by then"; its measured area counts in every test, with the same
# test over the runs fit by then beside it ("fit runs only").
#   python ablate.py config/study_scale2.py --workers=2
# Budget: vpad's step at this recipe, 192-196 ms (the pilot's vpad seed, one run on the 2-core CPU, one
# thread, quick evals between; study_scale measured 177-191 ms with two runs at a time). A trunk to 16000
# plus three 1000-step cooldowns is 19,000 steps, about 62 min; 20 runs at --workers=2 about 10.5 h, plus
# the final evals (60 cooled models, plain and under yarn) in the workers' slots, about 1 h (study_scale's
# share): under the 12 h that would have cut it to 8 seeds, so 10 seeds.
# Rerunning the command continues it (finished runs are recorded in results/study_scale2/runs/).
base_config = 'config/sensitive_4x128_theta1e3.py'
common = {
    'steps_after_fit': 0,                  # no fit gating: the trunk runs to its last snapshot
    'snapshots_at_iter': '6000,11000,16000',
    'max_iters': 16000,
    'cooldown_iters': 1000,                # each snapshot: 1000 steps of cosine decay to min_lr
    'eval_interval': 250,                  # the quick eval, which marks the fit
    'eval_multiples': '1,2,4,8',
    'eval_samples': 128,
    'final_multiples': '1,2,4,8',          # the trainer's own last eval; the study's is below (1x..64x)
}
arms = {
    'none': {'dropout_site': 'none'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '51,52,53,54,55,56,57,58,59,60'
grid_dir = 'out/study_scale2'
results_dir = 'results/study_scale2'   # summary and run records (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
eval_variants = 'yarn'

# The outcomes, fixed before the runs. Area: a run's mean accuracy over 1x..64x in the final eval of a
# cooled snapshot. Paired sign-flip tests over the seeds; labels from the interval, delta = 0.05.
# Primary: at 16000 total steps, plain, vpad against none (family "sites", one test).
# Secondary: the same at 6000 and at 11000; the change 6000 -> 16000 per arm and vpad's change against the
# control's (claim 1 at this scale); vpad under yarn against none under yarn at 16000 (and at the other
# points); for comparison with study_scale, each run read at its snapshot within +-1500 steps of its own
# fit + 4000, where it has one (vpad against none over the seeds where both have one); fit runs only beside
# every test.
control = 'none'
families = {'sites': ['vpad']}
comparisons = {'yarn': [['vpad@yarn', 'none@yarn']]}
early_snapshot = 6000
late_snapshot = 16000
delta = 0.05
fit_accuracy = 0.95
extrap_multiple = 4                    # secondary, as in the other sensitive studies: >= 0.75 at 4x
extrap_threshold = 0.75
range_threshold = 0.5
# The reading near each run's fit + 4000 declared above, as settings (added while the study ran, from the
# worktree at the config's commit; they name that reading, changing no run and no other test):
fit_plus_reading = 4000
fit_plus_window = 1500
