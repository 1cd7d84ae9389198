# The main run with a pure Mamba2 model in place of the transformer (the paper's claim 5: dropout
# before the projections helps an SSM extrapolate too). VPAD sits before in_proj and out_proj.
exec(open('config/vpad.py').read())
out_dir = 'out/mamba2_vpad'
block_pattern = 'M'
n_layer = 4
d_state = 32
expand = 2
headdim = 32
chunk_size = 64
