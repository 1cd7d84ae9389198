# The quick study: is VPAD above no dropout on the sensitive recipe (config/sensitive.py: global RoPE,
# rope_theta 1e4) after training past the fit, plain and with YaRN at inference? Two arms, 8 fresh seeds
# (41-48; no other study ran them), each an ordinary fit-gated run: warmup, the peak learning rate to
# 4000 steps past its fit, then 1000 steps of cosine decay to min_lr, the schedule of study_scaling's
# +4000 cooldown branch (a trunk cooled once, without the trunk). Every run evaluated at 1x..64x plain
# and under 'yarn' (eval_lengths.py --rope_scaling=yarn), paired by seed.
#   python ablate.py config/study_quick.py --workers=2      # under an hour on 2 cores (measured: its README)
base_config = 'config/sensitive.py'
common = {
    'steps_after_fit': 5000,               # fit + 5000, the last 1000 decaying:
    'cooldown_iters': 1000,                # study_scaling's +4000 branch
    'max_iters': 14000,                    # the cap on the search for the fit (fits came at 1000-3500)
    'eval_interval': 250,                  # the quick eval, which decides the fit, as in study_scaling
    'eval_multiples': '1,2,4,8',
    'eval_samples': 128,
    'final_multiples': '1,2,4,8',          # the trainer's own last eval; the study's is below
}
arms = {
    'none': {'dropout_site': 'none'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '41,42,43,44,45,46,47,48'
grid_dir = 'out/study_quick'
results_dir = 'results/study_quick'
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
eval_variants = 'yarn'                 # the practitioner's rescaling, fixed in advance (as study_scaling's)

# The outcome, fixed before the runs: primary, vpad's area (mean accuracy over 1x..64x) against none's,
# plain, paired by seed, sign-flip test; labels from the interval, delta = 0.05. Secondary: the same under
# yarn, and the interaction (vpad's gain under yarn minus its gain plain).
control = 'none'
comparisons = {'yarn': [['vpad@yarn', 'none@yarn'], ['vpad@yarn - none@yarn', 'vpad - none']]}
delta = 0.05
fit_accuracy = 0.95
extrap_multiple = 4                    # secondary, as in the other sensitive studies: >= 0.75 at 4x
extrap_threshold = 0.75
range_threshold = 0.5
