# The tests' own base config: a 4-layer transformer with VPAD on niah_single at 128 tokens, RoPE
# layers on a 64-token window and every 2nd layer global NoPE (an earlier main run's recipe). The
# tests shrink it further with --key=value overrides; its values are what they assert against
# (min_lr 1e-4 at the end of a decay, steps_after_fit 0: a run trains to max_iters).
out_dir = 'out/tests'
data_dir = 'data/niah_single_128'
tasks = 'niah_single'
num_tokens = 10_000_000
block_size = 128
loss_on = 'answers'
min_doc_len = 0
n_layer = 4
n_head = 4
n_embd = 128
window = 64
nope_every = 2
short_conv = 0
dropout = 0.1
dropout_site = 'vpad'
# the readable path: the fast kernels' first compile costs a process ~15 s on a cold cache (a fresh clone), and
# test_model checks them against these definitions
fast_kernels = False
weight_decay = 0.0
batch_size = 32
learning_rate = 2e-3
max_iters = 2500
steps_after_fit = 0
warmup_iters = 100
min_lr = 1e-4
eval_interval = 250
log_interval = 50
eval_multiples = '1,4,16'
eval_samples = 32
