"""tools/mismatch.py: the train-vs-eval mismatch diagnostic on planted shifts and on the dropout sites, and
its command's one-line errors."""
import math

import pytest
import torch
import torch.nn as nn

from tools import mismatch
from tools.mismatch import dropout_mismatch
from model import GPT, SITES, Dropout, GPTConfig


class TrainOffset(nn.Module):
    """Adds a constant in training mode only: a planted shift of every token's and the batch's mean."""
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, x):
        return x + self.c if self.training else x


def planted(layer):
    torch.manual_seed(0)
    net = nn.Sequential(layer, nn.Linear(16, 8, bias=False))
    x = 0.7 + torch.randn(64, 64, 16)                          # coordinates with a non-zero mean, sd 1
    return dropout_mismatch(net, x, n_masks=64)[0]


def test_mismatch_measures_planted_shifts_and_subtracts_the_mask_noise_floor():
    """Known cases through the same measurement: a constant offset c in training shifts every token
    and the batch by c / sd; VPAD keeps the batch mean and shrinks each token toward it,
    E[y | x] = mu + sqrt(1 - p) (x - mu), a per-token shift of 1 - sqrt(1 - p); inverted dropout keeps
    each token's mean, so once the measured mask-noise floor is subtracted its shift is ~0 although
    the raw mean over 64 masks still differs; the identity changes nothing and is not reached."""
    off = planted(TrainOffset(0.3))
    assert off['token_shift'] == pytest.approx(0.3, rel=0.03) and off['mean_shift'] == pytest.approx(0.3, rel=0.03)
    assert off['token_floor'] == 0 and off['var_ratio'] == pytest.approx(1, abs=1e-6) and off['reached']
    p = 0.1
    shrink = planted(Dropout(p, affine=True))
    assert shrink['token_shift'] == pytest.approx(1 - math.sqrt(1 - p), abs=0.004)   # 0.051
    assert shrink['mean_shift'] < 0.003 and shrink['var_ratio'] == pytest.approx(1, abs=0.01)
    assert shrink['pre_act_var_ratio'] == pytest.approx(1, abs=0.02)
    inv = planted(Dropout(p, affine=False))
    assert inv['token_floor'] > 0.03 and inv['token_shift'] < 0.01 and inv['mean_shift'] < 0.003
    inflated = 1 + p / (1 - p) * (0.7 ** 2 + 1)     # independent coordinates: p/(1-p) E[x_i^2] / var x_i, in and out
    assert (inv['var_ratio'] == pytest.approx(inflated, rel=0.02)
            and inv['pre_act_var_ratio'] == pytest.approx(inflated, rel=0.03))
    same = planted(nn.Identity())
    assert not same['reached'] and same['token_shift'] == same['mean_shift'] == 0 and same['var_ratio'] == 1


def test_mismatch_diagnostic_separates_the_sites():
    torch.manual_seed(0)
    cfg = dict(vocab_size=256, n_layer=3, n_head=4, n_embd=64, dropout=0.1, window=32, nope_every=0, short_conv=0,
               fast_kernels=False)     # the readable sites: the same masks and math as the kernels, no compile
    base = GPT(GPTConfig(**cfg))
    with torch.no_grad():
        # as in trained models: coordinates with non-zero means, residual branches that matter
        base.wte.weight += 0.05 * torch.randn(64)
        for b in base.blocks:
            b.mixer.c_proj.weight.mul_(4)
            b.mlp.c_proj.weight.mul_(4)
    idx = torch.randint(0, 256, (8, 128))
    res = {}
    for site in SITES:
        m = GPT(GPTConfig(**cfg, dropout_site=site))
        m.load_state_dict(base.state_dict())
        res[site] = [r for r in dropout_mismatch(m, idx, n_masks=16) if r['proj'] in ('mixer.c_attn', 'mlp.c_fc')]
    first = 0   # the first c_attn sees no noise from any site's residual dropout
    assert all(not r['reached'] and r['token_shift'] == 0 and r['var_ratio'] == pytest.approx(1) for r in res['none'])
    assert not res['pre_norm'][first]['reached'] and res['pre_norm'][first]['mean_shift'] < 1e-6
    later = range(1, len(res['none']))
    for i in later:   # residual dropout moves the mean the next projections see; inverted dropout at the input does not
        assert res['pre_norm'][i]['reached'] and res['pre_norm'][i]['mean_shift'] > 0.03
        assert res['pre_linear'][i]['token_shift'] < res['pre_norm'][i]['token_shift'] / 2
    for r in res['pre_linear']:
        assert r['reached'] and r['var_ratio'] > 1.3
    for r in res['vpad']:   # VPAD: the batch mean and variance kept, each token shrunk toward the mean
        assert r['mean_shift'] < 0.01 and abs(r['var_ratio'] - 1) < 0.02
        assert r['token_shift'] == pytest.approx(1 - math.sqrt(0.9), abs=0.01)
    # at the output of the first c_attn (the pre-activations): inverted dropout inflates the variance
    # by p/(1-p) sum_i W_ji^2 E[x_i^2], large where the coordinate means are not zero; VPAD keeps it
    pre = {site: res[site][first]['pre_act_var_ratio'] for site in SITES}
    assert pre['none'] == pytest.approx(1)
    assert pre['pre_linear'] > 1.3
    assert abs(pre['vpad'] - 1) < (pre['pre_linear'] - 1) / 20




def test_the_diagnostic_on_a_dir_without_a_usable_run_is_one_line(tmp_path, capsys):
    """`python -m tools.mismatch RUN_DIR`: no checkpoint, another project's checkpoint, or a run whose data
    is gone each end in one line that names the path, never a traceback."""

    def diagnose(*args):            # in this process: a SystemExit with a message is all Python prints
        rng = torch.get_rng_state()     # the script seeds torch's generator; later tests keep theirs
        try:
            mismatch.main(list(map(str, args)))
            code = 0
        except SystemExit as e:
            code = e.code
        torch.set_rng_state(rng)
        assert code == 0 or isinstance(code, str) and len(code.splitlines()) == 1, code
        return code
    assert diagnose('--help') == 0 and capsys.readouterr().out.startswith('python -m tools.mismatch [RUN_DIR')
    assert diagnose(tmp_path, 'extra').startswith('unknown argument(s)')        # not a second run, silently ignored
    assert diagnose(tmp_path).startswith(f"no checkpoint at {tmp_path / 'ckpt.pt'}: give the run dir")
    assert diagnose(tmp_path / 'gone').startswith(f"no checkpoint at {tmp_path / 'gone'}:")       # no such dir or file
    assert diagnose('--chek').startswith('unknown argument(s) --chek: python -m tools.mismatch [RUN_DIR')
    # a ckpt path is taken as one
    assert diagnose(tmp_path / 'other.pt').startswith(f"no checkpoint at {tmp_path / 'other.pt'}")
    (tmp_path / 'ckpt.pt').write_bytes(b'\x00' * 64)
    assert 'is not a readable checkpoint' in diagnose(tmp_path)      # there, and not a checkpoint at all
    torch.save({'state_dict': {}}, tmp_path / 'ckpt.pt')
    assert 'is not a checkpoint train.py wrote' in diagnose(tmp_path)
    data = tmp_path / 'data'                       # a corpus whose meta.json is there but val.bin is not
    data.mkdir()
    (data / 'meta.json').write_text('{}')
    torch.save({'model': None, 'model_args': {'block_size': 64}, 'config': {'data_dir': str(data)}},
               tmp_path / 'ckpt.pt')
    assert f'{data}/val.bin is missing though' in diagnose(tmp_path) and 'delete' in diagnose(tmp_path)
