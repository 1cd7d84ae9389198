# The main run: a 2-layer transformer with VPAD, trained from scratch on mqar at 64 tokens and
# evaluated at 1x..64x that length; a few minutes on a 2-core CPU, data generation included.
#   python train.py config/vpad.py
# These are train.py's defaults, stated here with their reasons (as nanoGPT's config/train_gpt2.py
# states its run); the ablations are overrides of this file: --dropout_site=none|pre_norm|pre_linear,
# --weight_decay=0.1, config/mamba2.py and config/hybrid.py for the other architectures,
# config/sensitive.py for the recipe whose control stops extrapolating.
out_dir = 'out/vpad'

# data: mqar (4 single-token key-value pairs open a document, 2 of the keys are asked at its end):
# the key is needed (with the asked key absent, accuracy falls to chance: results/archive/ablate_pilot)
data_dir = 'data/mqar_64'
tasks = 'mqar'
num_tokens = 6_000_000     # about what a run reads (2500 steps x 32 rows x 64 tokens = 5.1M, rows drawn at random)
block_size = 64            # the training length: short enough to learn retrieval in minutes on a CPU
min_doc_len = 40           # >= 23 noise tokens before the first query, beyond the short convolutions'
                           # 2 x 3 tokens: every training answer needs global attention (the share is printed)
loss_on = 'answers'        # loss on the value tokens only, as Zoology's MQAR

# model: both layers global attention without position encoding (NoPE), so no layer meets a position
# or distance at 64x that it never met in training
n_layer = 2
n_head = 1
n_embd = 64
window = 0
nope_every = 1
short_conv = 3             # each attention layer first mixes in the previous 3 positions: one layer can then
                           # match the asked key against "the token before"; without it the model stayed at
                           # 0.23 (any of the values) for 2000 steps
block_pattern = 'A'

# the regularization under study
dropout = 0.1
dropout_site = 'vpad'
weight_decay = 0.0         # the paper: weight decay speeds up the loss of length generalization

# schedule: fit-gated, so runs compare after the same training past the fit
batch_size = 32
learning_rate = 3e-3       # the rate the recipe was found and piloted at: all 16 pilot runs
                           # fit, in 1000-1500 steps (results/archive/ablate_pilot)
warmup_iters = 100
max_iters = 4000           # the cap on the search for the fit: a run not fit by then never fit
fit_accuracy = 0.95        # the run has fit at the first quick eval with 1x accuracy >= 0.95
steps_after_fit = 1000     # then the learning rate decays to min_lr over 1000 steps and the run stops
min_lr = 1e-4
eval_interval = 250
eval_multiples = '1,4,16'  # the quick eval; the last step evaluates 1x..64x
