import os
import subprocess
import sys

import pytest
import torch

from tools import bench
import train_checks
from model import SITES, GPTConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_bench_without_cuda_refuses_in_one_line():
    out = subprocess.run([sys.executable, '-m', 'tools.bench', '--device=cuda'], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().count('\n') == 0 and 'no CUDA device here' in out.stderr


def test_gpu_sections_build_their_variants_from_the_config_files():
    """Each GPU variant is a valid model; the sites differ from the 'none' variant in dropout_site alone, the
    'no RoPE' one in nope_every alone; the 4K variants are the models config/gpu_*_4k.py train (vocab aside)."""
    sites, long = bench.gpu_sites_variants(), bench.gpu_4k_variants()
    for cfg, batch, T, compile in (*sites.values(), *long.values()):
        GPTConfig(**cfg)
    none = sites['none'][0]

    def differ(cfg):
        return {k for k in cfg | none if cfg.get(k) != none.get(k)}
    assert {site: differ(sites[site][0]) for site in SITES if site != 'none'} == dict.fromkeys(
        set(SITES) - {'none'}, {'dropout_site'})
    assert differ(sites['none, no RoPE'][0]) == {'nope_every'} and sites['none, no RoPE'][0]['nope_every'] == 1
    for name in ('gpu_vpad_4k', 'gpu_mamba2_4k'):
        cfg = bench.read_config(name)
        assert {k: v for k, v in long[name][0].items() if k != 'vocab_size'} == \
            {k: cfg[k] for k in train_checks.MODEL_KEYS}


def test_gpu_group_reports_every_variant_against_the_base(capsys, monkeypatch):
    """The GPU sections' measuring code, run eagerly on the CPU with tiny models: one line per
    variant with its ms per step, ratio to the base (1.00x for the base itself), tokens/s and MFU."""
    tiny = dict(vocab_size=64, n_layer=1, n_head=2, n_embd=32, d_state=8, headdim=16, chunk_size=8, dropout=0.1)
    variants = {'attention': (tiny | dict(dropout_site='vpad'), 2, 16, False),
                'mamba2': (tiny | dict(block_pattern='M'), 2, 16, False)}
    with bench.kernels.eager():         # base/kernels.py's kernels op by op: no compile time here
        bench.bench_gpu_group("tiny", variants, 'attention', 'cpu', peak_flops=1e12, rounds=2, steps=1)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(('attention', 'mamba2'))]
    assert len(lines) == 2
    assert (' 1.00x attention [1.00-1.00]' in lines[0] and 'MFU' in lines[1] and 'tok/s' in lines[1]
            and '(eager' in lines[1])
