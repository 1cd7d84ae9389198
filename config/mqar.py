# The key-needing task: mqar (4 single-token key-value pairs open a document, 2 queries close it)
# on a small transformer, evaluated at 1x..64x = 64..4096 tokens. Not yet a recipe that fits
# reliably (README, "Toward an experiment that can tell the sites apart").
exec(open('config/vpad.py').read())
out_dir = 'out/mqar'
data_dir = 'data/mqar_64'
tasks = 'mqar'
num_tokens = 6_000_000
block_size = 64
# no window shortcut: each document fills more than half a row (one per row, so no two documents
# share a key), which leaves >= 23 noise tokens between the last pair and the first query; the two
# window layers reach 2 x (4 - 1) = 6 tokens back, so every training answer needs a global layer
min_doc_len = 40
window = 4
# NoPE layer first (N W N W): with the window layer first (W N W N) no trial got below ln(100), the
# loss of guessing among all values, in 800-3000 steps; N first learned to copy (README)
nope_first = True
n_embd = 64
n_head = 2
learning_rate = 3e-3
max_iters = 3000
