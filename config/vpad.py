# The main run: train.py's defaults, which are its settings (each with its reason beside it there).
# A 2-layer transformer with VPAD, trained from scratch on mqar (4 key-value pairs open a document,
# 2 of the keys are asked at its end) at 64 tokens, evaluated at 1x..64x that length. It stops 1000
# steps after it fits (1x >= 0.95 in the quick eval). A few minutes on a 2-core CPU, data generation
# included. This file names the run for the studies' base_config and the README; the ablations are
# overrides of it: --dropout_site=none|pre_norm|pre_linear, --weight_decay=0.1; config/mamba2.py and
# config/hybrid.py for the other architectures. config/niah_128.py is the earlier main run.
# Without RoPE or a window, its layout alone never learned: with a RoPE window layer first no mqar
# trial learned to copy (README).
