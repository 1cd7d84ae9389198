# The main run with a hybrid: global RoPE attention (window 0) and Mamba2 layers alternate, A M A M.
exec(open('config/vpad.py').read())
out_dir = 'out/hybrid_vpad'
block_pattern = 'AM'
nope_every = 0            # the Mamba2 layers carry information across the whole context
d_state = 32
