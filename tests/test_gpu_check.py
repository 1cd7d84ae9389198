"""tools/gpu_check.py: its dry run on the CPU goes through every part of the GPU check, at tiny shapes."""

import os
import subprocess
import sys

import pytest

from tools import gpu_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dry_run(out, *args):
    return subprocess.run([sys.executable, '-m', 'tools.gpu_check', '--dry=True', f'--out={out}', *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS='1'))


def test_a_dry_part_writes_its_line_under_the_header(tmp_path):
    """One part of the dry run (the main config end to end, ~15 s): the header names the CPU dry run and the
    command, the part's line its seconds, what it ran and its CPU stand-in, nothing failed."""
    out = tmp_path / 'check.md'
    proc = dry_run(out, '--only=main')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text().splitlines()
    assert 'CPU dry run' in text[0] and '`python -m tools.gpu_check --dry=True`' in text
    line, = [line for line in text if line.startswith('- ')]
    assert line.startswith('- main (') and 'FAILED' not in line and line.endswith(f"[dry: {gpu_check.CPU_ONLY['main']}]")


@pytest.mark.slow    # every part at tiny shapes: 2-4 minutes on 2 cores
def test_the_dry_run_goes_through_every_part_and_writes_one_line_each(tmp_path):
    """`python -m tools.gpu_check --dry=True`: the bench's GPU sections, the 4K configs (the transformer
    compiled) with a 64x eval plain and under yarn, the main config, torchrun, a Ctrl-C, a study at 1 and 2
    workers; each part one line, none failed, each CPU stand-in named; nothing under results/."""
    out = tmp_path / 'check.md'
    before = subprocess.run(['git', 'status', '--porcelain', 'results'], cwd=ROOT, capture_output=True, text=True).stdout
    proc = dry_run(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in out.read_text().splitlines() if line.startswith('- ')]
    assert [line.split()[1] for line in lines] == list(gpu_check.PARTS)
    assert not [line for line in lines if 'FAILED' in line], lines
    by_part = dict(zip(gpu_check.PARTS, lines))
    assert 'gpu_vpad_4k: compiled' in by_part['configs'] and 'gpu_mamba2_4k: eager' in by_part['configs']
    assert 'yarn' in by_part['configs'] and 'exit 130, 1 line(s)' in by_part['ctrl_c'] and 'ok' in by_part['ctrl_c']
    assert all('[dry: ' in by_part[name] for name in gpu_check.CPU_ONLY)
    assert 'CPU dry run' in out.read_text().splitlines()[0]
    after = subprocess.run(['git', 'status', '--porcelain', 'results'], cwd=ROOT, capture_output=True, text=True).stdout
    assert after == before


def test_a_part_that_fails_says_why_in_its_line_and_the_next_part_runs(tmp_path, monkeypatch, capsys):
    def broken(check):
        raise RuntimeError("train.py exited 1: config error: something")
    monkeypatch.setattr(gpu_check, 'PARTS', {'bench': broken, 'main': lambda check: 'ran'})
    gpu_check.main(['--dry=True', f'--out={tmp_path / "check.md"}'])
    lines = (tmp_path / 'check.md').read_text().splitlines()[-2:]
    assert lines[0].startswith('- bench (') and 'FAILED: train.py exited 1: config error: something' in lines[0]
    assert lines[1].startswith('- main (') and lines[1].endswith(f": ran [dry: {gpu_check.CPU_ONLY['main']}]")


def test_a_dry_run_never_writes_into_results_and_without_out_writes_to_the_temporary_folder(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match='a dry run writes no results/'):
        gpu_check.main(['--dry=True', '--out=results/bench/gpu_check.md'])
    monkeypatch.setattr(gpu_check, 'PARTS', {'main': lambda check: 'ran'})
    monkeypatch.setattr(gpu_check.tempfile, 'gettempdir', lambda: str(tmp_path))
    gpu_check.main(['--dry=True'])                          # as the no-GPU line and results/bench/README.md say
    assert (tmp_path / 'gpu_check_dry.md').read_text().splitlines()[-1].startswith('- main (')


def test_help_names_the_command_it_is_run_with():
    out = subprocess.run([sys.executable, '-m', 'tools.gpu_check', '--help'], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.startswith('usage: python -m tools.gpu_check '), out.stdout
