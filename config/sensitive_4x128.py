# The sensitive recipe at a second scale: config/sensitive.py (global RoPE, mqar at 64 tokens, the same
# corpus and learning rate) with 4 layers of width 128 and 2 heads (head dimension 64, as the 2 x 64
# model's; 0.97M parameters, 0.81M without the embedding, against 0.19M and 0.11M). Its rope_theta comes
# from the pilot of its control (config/study_scale_pilot.py): the theta whose no-dropout runs' range lies
# in 2x..8x, as the small model's does at 1e4 (results/study_regime).
#   python train.py config/sensitive_4x128.py --dropout_site=none
exec(open('config/sensitive.py').read())
out_dir = 'out/sensitive_4x128'
n_layer = 4
n_embd = 128
n_head = 2
