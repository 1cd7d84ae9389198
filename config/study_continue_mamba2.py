# study_continue on Mamba2: each no-dropout run of config/study_mamba2.py (fit, then 1000 steps; it
# holds to about 4x) continues for 1000 more steps with each dropout site, `none` again the control,
# paired by base run. The rule is study_mamba2's (>= 0.9 at 4x), fixed before these runs.
#   python ablate.py config/study_mamba2.py --arms=none --workers=2     # the bases, if not done yet
#   python ablate.py config/study_continue_mamba2.py --workers=2
exec(open('config/study_mamba2.py').read())
arms = {name: arms[name] for name in ('none', 'pre_linear', 'vpad', 'pre_norm')}
common = {
    'block_pattern': 'M',
    'init_from': 'out/study_mamba2/none/seed{seed}',   # weights only: fresh optimizer and schedule
    'max_iters': 1000,
    'steps_after_fit': 0,
    'warmup_iters': 50,
    'learning_rate': 1e-3,
}
out_dir = 'out/study_continue_mamba2'
results_dir = 'results/study_continue_mamba2'   # summary (committed); checkpoints stay in out_dir
