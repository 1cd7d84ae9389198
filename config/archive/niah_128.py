# The main run until the mqar recipe replaced it (config/vpad.py): a 4-layer transformer with VPAD,
# trained from scratch on niah_single at 128 tokens and evaluated at 1x..64x that length. The
# committed studies ablate_sites, ablate_long, ablate_continue and ablate_mamba2 ran on it, so they
# keep it as their base. About 12 minutes on an idle 2-core CPU, data generation included.
out_dir = 'out/niah_128'
data_dir = 'data/niah_single_128'
tasks = 'niah_single'
num_tokens = 10_000_000   # about what the run reads (2500 x 32 x 128 = 10.2M tokens, rows drawn at random)
block_size = 128          # short enough to learn retrieval in minutes on a CPU; evaluated up to 64x = 8192
loss_on = 'answers'       # loss on the value tokens only, as Zoology's MQAR: every step is ~32 retrievals
min_doc_len = 0

# RoPE layers see a sliding window, every 2nd layer is global and has no position encoding (NoPE),
# so no layer meets a position or distance at 64x that it never met in training: the pattern of
# Command A, SWAN-GPT and Llama 4's iRoPE (SmolLM3 has NoPE every 4th layer but full-attention RoPE).
# Every training answer here is within reach of the two window layers (2 x 63 tokens): the window
# plateau in the README; config/ablate_pilot.py tries window 16, which leaves none within reach
n_layer = 4
n_head = 4
n_embd = 128
window = 64
nope_every = 2
short_conv = 0            # no short convolution: the window layers do the local mixing

dropout = 0.1
dropout_site = 'vpad'
weight_decay = 0.0        # the paper: weight decay speeds up the loss of length generalization

batch_size = 32
learning_rate = 2e-3      # in 1000-step trials 2e-3 learned retrieval sooner than 1e-3
max_iters = 2500
steps_after_fit = 0       # always the full 2500 steps
warmup_iters = 100
min_lr = 1e-4
eval_interval = 250
log_interval = 50
eval_multiples = '1,4,16'
eval_samples = 32
