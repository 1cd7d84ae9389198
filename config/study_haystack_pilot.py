# The pilot that fixes mqar_haystack's share of distractor lines (`distractors`, q) for study_haystack:
# the sensitive recipe's control (config/sensitive.py, no dropout) trained on mqar_haystack, seeds 1-2,
# each a fit-gated run (the cap 14000 steps) decayed over the 1000 steps past its fit, evaluated plain
# at 1x..64x. Rule, fixed before the runs: take the first of q = 0.3, 0.2, 0.1 at which both seeds fit
# (arms run in that order, the next only if needed). A map, no test. Measured: at q = 0.3 both seeds
# fit (at steps 1250 and 2250), so q = 0.3; the arms q0.2 and q0.1 were never needed nor run.
#   python ablate.py config/study_haystack_pilot.py --workers=2
base_config = 'config/sensitive.py'
common = {
    'dropout_site': 'none',
    'tasks': 'mqar_haystack',
    'max_iters': 14000,                # the cap on the search for the fit
}
arms = {                               # a corpus per q: distractors is a corpus setting
    'q0.3': {'distractors': 0.3, 'data_dir': 'data/mqar_haystack_64_q0.3'},
    # 'q0.2' and 'q0.1' (data/mqar_haystack_64_q0.2, ..._q0.1): not run, q0.3 fit on both seeds
}
seeds = '1,2'
grid_dir = 'out/study_haystack_pilot'
results_dir = 'results/study_haystack_pilot'
multiples = '1,2,4,8,16,32,64'
eval_samples = 100
control = ''
fit_accuracy = 0.95
extrap_multiple = 4
extrap_threshold = 0.5
range_threshold = 0.5
