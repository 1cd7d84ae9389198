"""tools/states.py: the recurrence it runs in place of the mixer's scan, and what it reads of the states."""

import pytest
import torch

import model as M
from base import kernels
import sample_data
from model import GPT, GPTConfig
from tools import states


def tiny_mamba(tok, **kw):
    torch.manual_seed(0)
    return GPT(GPTConfig(**dict(vocab_size=tok.vocab_size, block_size=16, n_layer=2, n_embd=32, block_pattern='M',
                                d_state=8, headdim=16, chunk_size=16, dropout=0.0, dropout_site='none') | kw)).eval()


def test_the_recorder_computes_what_the_mixer_computes():
    """In place of ssd_scan, the step-by-step recurrence gives the model's logits (to float rounding)."""
    tok = sample_data.build_tokenizer()
    model = tiny_mamba(tok)
    idx = torch.randint(0, tok.vocab_size, (3, 40))
    with torch.no_grad(), kernels.eager():         # the kernels op by op: no compile time here
        ref, _, _ = model(idx)
        scan, M.ssd_scan = M.ssd_scan, states.Recorder(16)
        try:
            got, _, _ = model(idx)
        finally:
            M.ssd_scan = scan
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_states_past_the_training_length_are_measured_against_the_1x_range():
    """Every stretch of positions is read; a 1x example's own positions lie inside the 1x range; with no
    decay (A near 0, dt large) a state only grows, so past 1x its norm rises and it leaves that range."""
    tok = sample_data.build_tokenizer()
    model = tiny_mamba(tok)
    with torch.no_grad():
        for block in model.blocks:
            block.mixer.A_log.fill_(-20.0)                 # A = -exp(-20): nothing decays
            block.mixer.dt_bias.fill_(2.0)
    with kernels.eager():
        out = states.measure(model, tok, 'mqar', [1, 8], 4)
    assert set(out) == {0, 1}
    for layer in out.values():
        assert list(layer[8]) == ['0-1T', '1-2T', '2-4T', '4-8T']
        assert layer[1]['0-1T'][2] == 0.0
        mean = [v[0] for v in layer[8].values()]
        assert mean == sorted(mean) and layer[8]['4-8T'][2] > 0.5


def test_a_missing_run_dir_is_one_line_that_advises_a_mamba2_run(tmp_path):
    with pytest.raises(SystemExit, match="train a Mamba2 run first, e.g. python train.py config/mamba2_sensitive.py"):
        states.main([f'--out_dirs={tmp_path / "none"}'])
