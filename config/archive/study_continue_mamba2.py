# study_continue on Mamba2: each no-dropout run of config/study_mamba2.py (fit, then 1000 steps; it
# holds to about 4x) continues for 1000 more steps with each dropout site, `none` again the control,
# paired by base run. The rule is study_mamba2's (>= 0.9 at 4x), fixed before these runs.
#   python ablate.py config/study_mamba2.py --arms=none --workers=2     # the bases, if not done yet
#   python ablate.py config/study_continue_mamba2.py --workers=2
exec(open('config/study_continue.py').read())
_continuation = common                                # study_continue's schedule: 1000 steps, fresh optimizer
exec(open('config/study_mamba2.py').read())           # the Mamba2 model, its arms, seeds and rule
common = {**_continuation, 'block_pattern': 'M', 'init_from': 'out/study_mamba2/none/seed{seed}'}
grid_dir = 'out/study_continue_mamba2'
results_dir = 'results/study_continue_mamba2'   # summary (committed); checkpoints stay in grid_dir
