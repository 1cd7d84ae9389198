# Long training on Mamba2 (claim 5: the paper says dropout extends Mamba2's range by at least 4x; here,
# 1000 steps past the fit, VPAD shortened it: results/study_sites_mamba2). study_long's design on the
# studies' Mamba2 recipe (config/mamba2_sensitive.py: the sensitive recipe with two Mamba2 layers in
# place of its attention). Each run is one trunk at a constant learning rate after warmup to 10,000
# steps past its fit, with cooled snapshots at +1000 and +10,000 (1000 steps of decay to min_lr each,
# then the final eval). No dropout, Pre-Linear dropout and VPAD, paired by seed; seeds run one at a
# time across the arms, so a grid cut short still pairs them (8 seeds at least, 12 if time allows).
# Cut to seeds 1-10 for time, when seeds 1-8 were done or training and 9-10 not started: a trunk took
# 15-23 min, so the 12 seeds needed ~8 h on 2 cores, 10 of them ~6.5 h.
#   python ablate.py config/study_long_mamba2.py --workers=2   # a trunk took 15-23 min on one thread, its
#                                        # branches 3 more (~1.8x the transformer's step at this width, 64, and
#                                        # 1 thread; bench.py's wider models: 0.85-0.90x)
base_config = 'config/mamba2_sensitive.py'
common = {
    'steps_after_fit': 10000,              # the trunk: fit + 10,000 steps at the peak rate
    'snapshots_after_fit': '1000,10000',
    'cooldown_iters': 1000,                # each branch: 1000 steps of cosine decay to min_lr
    'eval_interval': 250,                  # the quick eval where the control sits mid-range (regime map:
    'eval_multiples': '1,4,8,16',          # 0.98 / 0.87 / 0.40 at 4x / 8x / 16x)
    'eval_samples': 128,
    'final_multiples': '1,4,8,16',         # the trainer's own last eval; the study's is below (1x..64x)
}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '1,2,3,4,5,6,7,8,9,10'      # cut from 12 for time (above)
grid_dir = 'out/study_long_mamba2'
results_dir = 'results/study_long_mamba2'   # summary (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'             # the final eval of every trunk and branch
eval_samples = 100                         # mqar asks 2 keys an example: 200 scored values per point

# The outcomes, fixed before the runs, as study_long's. Area: a run's mean accuracy over 1x..64x in the
# final eval. Labels from the interval, delta = 0.05: "higher" / "lower" (Holm p <= 0.05), "equivalent
# within +-0.05" (the 90% interval inside it), else "not resolved: [a, b]" (95% interval).
# - Claim 5, late: the cooled area at +10,000, pre_linear and vpad against none, paired by seed,
#   sign-flip test, Holm over the two.
# - Claim 1 on Mamba2: per run, its cooled area at +10,000 minus at +1000; the control's mean change
#   with its 95% interval; each arm's change against the control's, paired by seed (Holm over the two).
# - Secondary: the trunk's own area at +10,000 (uncooled) against the cooled one; the quick-eval area
#   against step; the old rule's counts (8x falls >= 0.2 below its running best at 2 quick evals in a
#   row); the mismatch of the cooled models at +1000 and +10,000 and its correlation with the change.
control = 'none'
families = {'sites': ['pre_linear', 'vpad']}
early_snapshot = 1000
late_snapshot = 10000
delta = 0.05
fit_accuracy = 0.95
extrap_multiple = 8                        # secondary, as study_sites_mamba2: >= 0.75 at 8x
extrap_threshold = 0.75
range_threshold = 0.5
deteriorate_multiple = 8                   # the old rule, secondary (on the trunk's quick evals)
deteriorate_drop = 0.2
deteriorate_evals = 2
