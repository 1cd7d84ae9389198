# The studies' Mamba2 recipe: the sensitive recipe (config/sensitive.py) with its two attention
# layers replaced by two Mamba2 layers of width 64 (d_state 64, SSD chunks of 64: train.py's Mamba2
# defaults); the RoPE settings it keeps touch no layer. Not config/mamba2.py, the main run's Mamba2
# (4 layers, d_state 32). Its no-dropout control fits, holds to 8x (0.87) and falls by 16x (0.40):
# mid-range, where a dropout site can move it either way (results/study_regime, 6 seeds). The site is
# the main run's (vpad, from config/vpad.py through sensitive.py); the control is --dropout_site=none:
#   python train.py config/mamba2_sensitive.py --dropout_site=none
exec(open('config/sensitive.py').read())
out_dir = 'out/mamba2_sensitive'
block_pattern = 'M'
max_iters = 6000          # the cap on the search for the fit: Mamba2 fits later than attention
                          # (the regime map: a median 2000 steps; study_sites_mamba2: 1250-5500)
