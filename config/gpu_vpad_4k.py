# GPU scale (not for a CPU): the paper's setting of a 4K training length, here with a 12-layer,
# width-768 transformer (sliding-window RoPE layers, every 4th layer global NoPE: the pattern of Command A
# and Llama 4's iRoPE; SmolLM3 has NoPE every 4th layer but full-attention RoPE, no window),
# all RULER-style tasks mixed, evaluated up to 64x = 256K tokens. Needs one 80 GB GPU or several:
#   torchrun --standalone --nproc_per_node=8 train.py config/gpu_vpad_4k.py
out_dir = 'out/gpu_vpad_4k'
data_dir = 'data/mix_4096'
tasks = 'niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt,json_kv'
num_tokens = 500_000_000
block_size = 4096
loss_on = 'answers'
min_doc_len = 0
n_layer = 12
n_head = 12
n_embd = 768
window = 1024
nope_every = 4
short_conv = 0                    # no short convolution: the window layers do the local mixing
dropout = 0.1
dropout_site = 'vpad'
weight_decay = 0.0
batch_size = 8                    # tools.bench --only=saved: ~0.19 GiB per layer per 4096-token row in bf16, 12 x 8 rows ~20 GB
gradient_accumulation_steps = 8   # 8 x 8 x 4096 = 262K tokens per step, whatever the GPU count
learning_rate = 6e-4
max_iters = 20000
steps_after_fit = 0
lr_decay_iters = 20000
warmup_iters = 500
min_lr = 6e-5
eval_interval = 1000
log_interval = 20
eval_multiples = '1,4,16'           # the quick eval every eval_interval
final_multiples = '1,2,4,8,16,32,64'
eval_samples = 50
eval_batch_size = 1                 # 64x is 262K tokens: one sequence at a time
compile = True
