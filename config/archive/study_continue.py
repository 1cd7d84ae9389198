# The decisive study, part 2 (the paper's headline experiment in miniature): each no-dropout run of
# config/study_sites.py (trained to fit and 1000 steps beyond) continues for 1000 more steps with
# each dropout site, `none` again the control. Runs of one seed share their base and their batches,
# so each site is tested against the control by a paired sign-flip test over seeds.
#   python ablate.py config/study_sites.py --arms=none --workers=2     # the bases, if not done yet
#   python ablate.py config/study_continue.py --workers=2
exec(open('config/study_sites.py').read())
common = {
    'init_from': 'out/study_sites/none/seed{seed}',   # weights only: fresh optimizer and schedule
    'max_iters': 1000,
    'steps_after_fit': 0,
    'warmup_iters': 50,
    'learning_rate': 1e-3,
}
grid_dir = 'out/study_continue'
results_dir = 'results/study_continue'   # summary (committed); checkpoints stay in grid_dir
