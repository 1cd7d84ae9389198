# The sensitive recipe: the main run (config/vpad.py) with global RoPE attention in place of NoPE, so
# that extrapolation fails somewhere inside the evaluated lengths and a dropout site can move it. With
# NoPE every site, no dropout included, holds to 64x (results/archive/study_sites): a control at ceiling can
# show harm, never help. In the pilot (seeds 1-2, no dropout) RoPE fit in 1250-1500 steps and fell
# gradually, 0.83-0.84 at 2x, 0.58-0.69 at 4x, 0.14 or less at 16x; results/study_regime maps the
# control along rope_theta, the dial that moves it from collapse beyond 1x to a hold near 32x.
#   python train.py config/sensitive.py --dropout_site=none
exec(open('config/vpad.py').read())
out_dir = 'out/sensitive'
nope_every = 0            # no NoPE layer: both layers are global causal attention with RoPE
rope_theta = 10000.0      # the dial (config/study_regime.py); RoPE's usual base
