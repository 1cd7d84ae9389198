# GPU scale (not for a CPU): a 24-layer, width-768 Mamba2 at a 4K training length (claim 5).
exec(open('config/gpu_vpad_4k.py').read())
out_dir = 'out/gpu_mamba2_4k'
block_pattern = 'M'
n_layer = 24
d_state = 128
headdim = 64
chunk_size = 256
