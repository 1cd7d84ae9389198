# The haystack study: does rescaling RoPE at inference still take the control to the ceiling when the
# distractors grow with the length, and does a site then add to it? study_scaling and study_quick ask it
# on mqar, whose 4 pairs open every document in a haystack of one repeated sentence, and there YaRN takes
# every arm to area 0.99-1.00. Here the task is mqar_haystack (sample_data.py): the same pairs at random
# depths, each haystack line a distractor pair of another key with probability q = 0.3 (fixed by
# results/study_haystack_pilot: the first of 0.3, 0.2, 0.1 at which both of the control's seeds fit), so
# a document 64x as long holds about 64x as many distractors. The sensitive recipe (config/sensitive.py:
# global RoPE, rope_theta 1e4), arms none and vpad, fresh seeds 61-68 (no other study ran them),
# study_quick's schedule: fit-gated, the peak rate to 4000 steps past the fit, then 1000 steps of decay.
# Every run evaluated at 1x..64x plain and under pi, ntk and yarn (eval_lengths.py --rope_scaling=...),
# paired by seed.
#   python ablate.py config/study_haystack.py --workers=2
base_config = 'config/sensitive.py'
common = {
    'tasks': 'mqar_haystack',
    'distractors': 0.3,
    'data_dir': 'data/mqar_haystack_64_q0.3',
    'steps_after_fit': 5000,               # fit + 5000, the last 1000 decaying: study_quick's schedule
    'cooldown_iters': 1000,
    'max_iters': 14000,                    # the cap on the search for the fit
    'eval_interval': 250,                  # the quick eval, which decides the fit
    'eval_multiples': '1,2,4,8',
    'eval_samples': 128,
    'final_multiples': '1,2,4,8',          # the trainer's own last eval; the study's is below
}
arms = {
    'none': {'dropout_site': 'none'},
    'vpad': {'dropout_site': 'vpad'},
}
seeds = '61,62,63,64,65,66,67,68'
grid_dir = 'out/study_haystack'
results_dir = 'results/study_haystack'
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
eval_variants = 'pi,ntk,yarn'

# The outcome, fixed before the runs. Area: a run's mean accuracy over 1x..64x. Primary, one family of
# two (Holm over 2), paired by seed, sign-flip test, labels from the interval with delta = 0.05: vpad
# against none plain, and vpad under yarn against none under yarn. (Written as the study's own
# comparisons, one family, so that both are corrected together; the vs-control table repeats the plain
# one uncorrected.) Secondary: each arm under pi and ntk against none under it; none under yarn against
# none plain (what rescaling gives the control); the interaction, vpad's gain under yarn minus its
# gain plain; never-fit runs counted as area 0 beside each test.
control = 'none'
comparisons = {
    'primary': [['vpad', 'none'], ['vpad@yarn', 'none@yarn']],
    'rescaling': [['none@yarn', 'none'], ['vpad@yarn - none@yarn', 'vpad - none']],
}
delta = 0.05
fit_accuracy = 0.95
extrap_multiple = 4                    # secondary, as in the other sensitive studies: >= 0.75 at 4x
extrap_threshold = 0.75
range_threshold = 0.5
