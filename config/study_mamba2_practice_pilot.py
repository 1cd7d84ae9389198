# The pilot of Mamba2's inference-time fix: rescale the SSM at the eval length, one factor s calibrated per length
# on examples the evaluation never sees (eval_lengths.py --ssm_scaling): 'dt' multiplies the time step by s
# (MambaExtend), 'decay' makes A = -exp(s A_log) (Mamba Modulation). On the studies' Mamba2 recipe
# (config/mamba2_sensitive.py, no dropout), the committed pilot's recipe and seeds: the control ('none') and the
# control trained from carried states ('none_carry', study_mamba2_states_pilot's 'carry'), seeds 1-2, each
# fit-gated and decayed over the 1000 steps past its fit; evaluated plain and under both fixes at 1x and 16x..1024x
# (65,536 tokens, streamed through the layers in segments). A map, no test. The question, fixed before the runs:
# which fix moves the control's range (the largest multiple with accuracy >= 0.5 there and at every shorter one)
# further, and does either move it past 16x? If one s for every layer moves neither control past 16x, the
# per-layer fits ('dt_layers', 'decay_layers': each layer's own s, one layer at a time) are run once, seeds 1-2.
# It also gives the steps at which the carried runs fit, beside the committed records', to set the study's budget.
#   python ablate.py config/study_mamba2_practice_pilot.py --workers=2
base_config = 'config/mamba2_sensitive.py'
common = {'dropout_site': 'none'}
arms = {
    'none': {},
    'none_carry': {'state_passing': 'carry'},
}
seeds = '1,2'
grid_dir = 'out/study_mamba2_practice_pilot'
results_dir = 'results/study_mamba2_practice_pilot'
multiples = '1,16,32,64,128,256,512,1024'
eval_samples = 100         # mqar asks 2 keys an example: 200 scored values per point
eval_samples_long = 32     # past 64x: a 1024x example costs 16x a 64x one
eval_variants = 'dt,decay'
control = ''
fit_accuracy = 0.95
extrap_multiple = 16
extrap_threshold = 0.5
range_threshold = 0.5
