import os
import subprocess
import sys

import pytest
import torch

from core import bench
from model import GPTConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_bench_without_cuda_refuses_in_one_line():
    out = subprocess.run([sys.executable, '-m', 'core.bench', '--device=cuda'], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().count('\n') == 0 and 'no CUDA device here' in out.stderr


def test_gpu_sections_build_valid_configs_from_the_config_files():
    sites, long = bench.gpu_sites_variants(), bench.gpu_4k_variants()
    for cfg, batch, T, compile in (*sites.values(), *long.values()):
        GPTConfig(**cfg)
    assert [c['dropout_site'] for c, *_ in sites.values()] == ['none', 'none', 'pre_norm', 'pre_linear', 'vpad']
    assert sites['none, no RoPE'][0]['nope_every'] == 1 and sites['vpad'][0]['window'] == 0
    mamba = long['gpu_mamba2_4k'][0]
    assert (mamba['n_layer'], mamba['block_pattern'], mamba['chunk_size'], mamba['vocab_size']) == (24, 'M', 256, 4096)
    assert (long['gpu_vpad_4k'][0]['window'], long['gpu_vpad_4k'][0]['dropout_site']) == (1024, 'vpad')


def test_gpu_group_reports_every_variant_against_the_base(capsys, monkeypatch):
    """The GPU sections' measuring code, run eagerly on the CPU with tiny models: one line per
    variant with its ms per step, ratio to the base (1.00x for the base itself), tokens/s and MFU."""
    monkeypatch.setattr(bench.kernels, 'USE_COMPILE', False)  # core/kernels.py's kernels: no compile time here
    tiny = dict(vocab_size=64, n_layer=1, n_head=2, n_embd=32, d_state=8, headdim=16, chunk_size=8, dropout=0.1)
    variants = {'attention': (tiny | dict(dropout_site='vpad'), 2, 16, False),
                'mamba2': (tiny | dict(block_pattern='M'), 2, 16, False)}
    bench.bench_gpu_group("tiny", variants, 'attention', 'cpu', peak_flops=1e12, rounds=2, steps=1)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(('attention', 'mamba2'))]
    assert len(lines) == 2
    assert (' 1.00x attention [1.00-1.00]' in lines[0] and 'MFU' in lines[1] and 'tok/s' in lines[1]
            and '(eager' in lines[1])
