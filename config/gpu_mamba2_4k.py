# GPU scale (not for a CPU): a 24-layer, width-768 Mamba2 at a 4K training length (claim 5).
exec(open('config/gpu_vpad_4k.py').read())
out_dir = 'out/gpu_mamba2_4k'
block_pattern = 'M'
n_layer = 24
d_state = 128
headdim = 64
chunk_size = 256
# python -m tools.bench --only=saved: one Mamba2 layer keeps ~0.23 GiB per 4096-token row for backward under bf16
# autocast, so 24 layers x 8 rows would hold ~48 GB of activations; 4 rows x 16 micro-steps keep
# the 262K tokens per step with ~24 GB, headroom for the scan's transient (chunk x chunk) matrices.
batch_size = 4
gradient_accumulation_steps = 16
