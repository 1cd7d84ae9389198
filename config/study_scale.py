# The same question on a larger model: does a site's late gain, and its sum with RoPE scaling at inference,
# survive four layers of width 128? study_scaling's design at +4000 on config/sensitive_4x128.py (4 layers,
# width 128, 2 heads of dimension 64: 0.97M parameters against the small model's 0.19M; the same task,
# length and data; learning rate 1e-3, as its control never fit at the small model's 3e-3; rope_theta 1e4
# from its control's pilot, config/study_scale_pilot.py), fresh seeds 21-30: each run a trunk at the peak
# learning rate to fit + 4000, cooled for 1000 steps from its snapshots at +1000 and +4000; every cooled
# model evaluated plain and under yarn, paired by seed.
#   python ablate.py config/study_scale.py --workers=2
# Budget, measured in the pilot: 180 ms a step (median, 2 runs on 2 cores; ~200 ms with the quick evals),
# fits at 2250-3750, so a run (fit + 4000, two 1000-step cooldowns) ~29 min and 30 runs ~7.3 h at
# --workers=2, plus the final evals in the workers' slots (30 trunks plain, 60 cooled models plain and
# under yarn): ~8-9 h in all, under the 10 h that would have cut it to 8 seeds.
# Rerunning the command continues it; runs go seed by seed across the arms.
base_config = 'config/sensitive_4x128.py'
common = {
    'steps_after_fit': 4000,               # the trunk: fit + 4000 steps at the peak rate
    'snapshots_after_fit': '1000,4000',
    'cooldown_iters': 1000,                # each branch: 1000 steps of cosine decay to min_lr
    'max_iters': 14000,                    # the cap on the search for the fit
    'eval_interval': 250,                  # the quick eval, which decides the fit, as in study_scaling
    'eval_multiples': '1,2,4,8',
    'eval_samples': 128,
    'final_multiples': '1,2,4,8',          # the trainer's own last eval; the study's is below (1x..64x)
}
arms = {
    'none': {'dropout_site': 'none'},
    'pre_linear': {'dropout_site': 'pre_linear'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '21,22,23,24,25,26,27,28,29,30'
grid_dir = 'out/study_scale'
results_dir = 'results/study_scale'    # summary and run records (committed); checkpoints stay in grid_dir
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
eval_variants = 'yarn'                 # the practitioner's rescaling, as study_scaling's primary one

# The outcomes, fixed before the runs (study_scaling's rule). Area: a run's mean accuracy over 1x..64x in the
# final eval. Paired sign-flip tests over the seeds; labels from the interval, delta = 0.05: "higher" /
# "lower" (Holm p <= 0.05), "equivalent within +-0.05" (the 90% interval inside it), else "not resolved".
# Primary, at +4000 (cooled): family "sites" (Holm over 2), plain: pre_linear and vpad against none;
# family "yarn" (Holm over 2): pre_linear and vpad against none, both under yarn.
# Secondary: the +1000 point; never-fit runs counted as area 0 beside each test.
control = 'none'
families = {'sites': ['pre_linear', 'vpad']}
comparisons = {'yarn': [['pre_linear@yarn', 'none@yarn'], ['vpad@yarn', 'none@yarn']]}
early_snapshot = 1000
late_snapshot = 4000
delta = 0.05
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.75
range_threshold = 0.5
