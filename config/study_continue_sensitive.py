# The paper's headline experiment on the sensitive recipe: each of the 12 no-dropout runs of
# config/study_positive.py (global RoPE, rope_theta 1e4; fit, then 1000 steps of decay) continues
# for 1000 more steps with each dropout site, and with no dropout as the control continuation; the
# runs of one seed share their base and their batches, so each site is tested against the control
# paired by base. Does dropout added late move the curve where the control fails (its range: 4x)?
#   python ablate.py config/study_positive.py --arms=none --workers=2     # the bases, if not done yet
#   python ablate.py config/study_continue_sensitive.py --workers=2
exec(open('config/study_sites_sensitive.py').read())   # the recipe, arms, seeds, eval and rule
common = {
    'init_from': 'out/study_positive/none/seed{seed}',   # weights only: fresh optimizer and schedule
    'max_iters': 1000,
    'steps_after_fit': 0,      # the same 1000 steps for every continuation, fit or not
    'warmup_iters': 50,
    'learning_rate': 1e-3,
}
grid_dir = 'out/study_continue_sensitive'
results_dir = 'results/study_continue_sensitive'   # summary (committed); checkpoints stay in grid_dir
# primary: the area paired by base against the none continuation, Holm over the three sites
