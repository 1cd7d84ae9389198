# The main run: a 2-layer transformer with VPAD, trained from scratch on mqar (4 key-value pairs open
# a document, 2 of the keys are asked at its end) at 64 tokens, evaluated at 1x..64x that length.
# It stops 1000 steps after it fits (1x >= 0.95 in the quick eval). A few minutes on a 2-core CPU,
# data generation included. The ablations are overrides of this file (README):
# --dropout_site=none|pre_norm|pre_linear, --weight_decay=0.1; config/mamba2.py and config/hybrid.py
# for the other architectures. config/niah_128.py is the earlier main run (niah_single at 128 tokens).
out_dir = 'out/vpad'
data_dir = 'data/mqar_64'
tasks = 'mqar'
num_tokens = 6_000_000
block_size = 64
loss_on = 'answers'       # loss on the asked values only, as Zoology's MQAR

# Both layers are global attention without position encoding (NoPE), so no layer meets a position
# or a distance at 64x that it never met in training. Each first mixes in its input's previous 3
# positions (short_conv): with that, one layer can match the asked key against "the token before
# this one" and copy the value behind it. Without it, this model stayed at 0.23 (copying any of the
# values) for 2000 steps, and layouts with a RoPE window layer first never learned (README).
n_layer = 2
n_head = 1
n_embd = 64
nope_every = 1
short_conv = 3
# no shortcut: each document fills more than half of its 64-token row, which leaves >= 23 noise
# tokens between the last pair and the first query; the two convolutions reach 2 x 3 = 6 tokens
# back, so every training answer needs global attention (train.py prints the share: 100%)
min_doc_len = 40

dropout = 0.1
dropout_site = 'vpad'
weight_decay = 0.0        # the paper: weight decay speeds up the loss of length generalization

batch_size = 32
learning_rate = 3e-3
max_iters = 4000          # the cap; a run that has not fit by then is reported as never fitting
steps_after_fit = 1000
warmup_iters = 100
min_lr = 1e-4
eval_interval = 250
log_interval = 50
eval_multiples = '1,4,16'
eval_samples = 32
