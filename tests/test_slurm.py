"""ablate.py --launcher=slurm against a real one-node Slurm started by .ci/slurm_start.sh (root,
Debian's slurm-wlm). Marked `slurm`: the default `python -m pytest -q` leaves them out, `.ci/run`
starts the cluster and runs them with `-m slurm`; where the cluster cannot be had they skip with
one line that says why, except in CI (CI=true), where they fail. Each grid is a tiny run of
tests/base_config.py, one CPU per job. The one test not marked checks .ci/run's Slurm step with stubs."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(n_layer=2, n_head=2, n_embd=32, window=32, nope_every=2, batch_size=4, block_size=96, eval_iters=2,
            eval_samples=2, eval_batch_size=2, eval_multiples='1', final_multiples='1,2', log_interval=100,
            warmup_iters=2, learning_rate=3e-3, num_tokens=20000, dropout_site='none')
SLURM = ['--launcher=slurm', '--slurm_partition=debug', '--slurm_cpus_per_run=1']


def start_cluster(*flags):
    # CI must run these tests: there a cluster that cannot be had fails them, elsewhere it skips them
    give_up = pytest.fail if os.environ.get('CI') == 'true' else pytest.skip
    if os.geteuid() != 0:
        give_up("a one-node Slurm needs root (.ci/slurm_start.sh installs packages and starts daemons)")
    out = subprocess.run(['bash', os.path.join(ROOT, '.ci', 'slurm_start.sh'), *flags], capture_output=True,
                         text=True, timeout=600)
    if out.returncode:
        give_up(f"no Slurm cluster here: {(out.stderr.strip().splitlines() or ['slurm_start.sh failed'])[-1]}")


@pytest.fixture(scope='module')
def cluster():
    start_cluster()
    yield
    start_cluster()                       # accounting on again, as the tests found it


def study(tmp_path, name, arms=None, seeds='1', **common):
    path = tmp_path / f'{name}.py'
    path.write_text(f"base_config = 'tests/base_config.py'\n"
                    f"arms = {arms or {'none': {}}!r}\n"
                    f"common = {dict(TINY, data_dir=str(tmp_path / 'data'), **common)!r}\n"
                    f"seeds = {seeds!r}\n"
                    f"grid_dir = {str(tmp_path / name)!r}\n"
                    f"multiples = '1,2'\nextrap_multiple = 2\neval_samples = 3\n")
    return str(path)


def ablate(*args, check=True, timeout=900):
    out = subprocess.run([sys.executable, 'ablate.py', *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    if check:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + out.stderr


def job_id(run_dir):
    with open(os.path.join(run_dir, 'job.json')) as f:
        return json.load(f)['job_id']


def wait_for(cond, what, limit=300):
    deadline = time.time() + limit
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def records(run_dir):
    path = os.path.join(run_dir, 'log.jsonl')
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def gone(job):
    return not subprocess.run(['squeue', '-h', '-j', job], capture_output=True, text=True).stdout.strip()


@pytest.mark.slurm
def test_a_grid_trains_as_jobs_and_is_summarized_then_a_rerun_submits_nothing(cluster, tmp_path):
    cfg = study(tmp_path, 'grid', seeds='1,2', max_iters=40, eval_interval=20)
    out = ablate(cfg, *SLURM, '--wait')
    assert out.count('submitted job') == 2 and 'waiting for 2 job(s)' in out, out
    res = json.load(open(tmp_path / 'grid' / 'results.json'))
    assert res['arms']['none']['seeds'] == [1, 2] and res['arms']['none']['pending_seeds'] == []
    table = (tmp_path / 'grid' / 'results.md').read_text()
    out = ablate(cfg, *SLURM, '--wait')
    assert '2 finished, 0 to train' in out and 'submitted' not in out, out
    # the final evals in the jobs (here, finished runs: a job of each one's eval): the same caches, the same summary
    for seed in (1, 2):
        for name in ('ablate_eval.json', 'ablate_mismatch.json'):
            os.remove(tmp_path / 'grid' / 'none' / f'seed{seed}' / name)
    out = ablate(cfg, *SLURM, '--eval_on=slurm', '--wait')
    assert out.count('submitted job') == 2, out
    assert (tmp_path / 'grid' / 'results.md').read_text() == table


@pytest.mark.slurm
def test_a_cancelled_job_is_resubmitted_and_its_run_resumes(cluster, tmp_path):
    cfg = study(tmp_path, 'cancel', max_iters=3000, eval_interval=50)
    run_dir = str(tmp_path / 'cancel' / 'none' / 'seed1')
    ablate(cfg, *SLURM)                                          # submitted; the command returns
    wait_for(lambda: len(records(run_dir)) >= 2, 'the job to checkpoint')
    job = job_id(run_dir)
    subprocess.run(['scancel', job], check=True)
    wait_for(lambda: gone(job), 'the cancelled job to end')
    out = ablate(cfg, *SLURM, '--wait')
    assert f'job {job} ended (CANCELLED)' in out and 'resumes from its checkpoint' in out, out
    iters = [r['iter'] for r in records(run_dir)]
    assert iters == sorted(set(iters)) and iters[-1] == 3000        # every eval once, to the end


@pytest.mark.slurm
def test_a_job_past_its_time_limit_is_resubmitted_and_its_run_resumes(cluster, tmp_path):
    # 2 minutes: the warning signal, 30 s before the limit, may come up to 60 s early, so after 30 s at least
    cfg = study(tmp_path, 'timeout', max_iters=25000, eval_interval=500)
    run_dir = str(tmp_path / 'timeout' / 'none' / 'seed1')
    ablate(cfg, *SLURM, '--slurm_time_min=2')
    job = job_id(run_dir)
    wait_for(lambda: gone(job), 'the job to reach its time limit', limit=300)
    assert records(run_dir), "the job was stopped before its first checkpoint"
    assert records(run_dir)[-1]['iter'] < 25000, "the run finished within its time limit: make it longer"
    out = ablate(cfg, *SLURM, '--slurm_time_min=10', '--wait')
    assert f'job {job} ended (TIMEOUT)' in out and 'resumes from its checkpoint' in out, out
    assert records(run_dir)[-1]['iter'] == 25000


@pytest.mark.slurm
def test_without_accounting_a_launch_is_refused_in_one_line(cluster, tmp_path):
    """sacct off: no job's state can be read from Slurm, so none is submitted or resubmitted; the refusal says
    why and what to do, in one line."""
    start_cluster('--no-accounting')
    cfg = study(tmp_path, 'noacct', max_iters=40, eval_interval=20)
    out = ablate(cfg, *SLURM, check=False)
    assert "sacct does not answer here" in out and 'turn accounting on' in out, out
    assert not (tmp_path / 'noacct').exists()


# .ci/run's python3 and python: a venv is an empty folder, pip and the default test run do nothing, and
# `-m pytest ... -m slurm` is a real pytest run of stub_test.py, whose one test passes or skips
STUB_PYTHON = """#!/bin/bash
if [ "$1 $2" = '-m venv' ]; then mkdir -p "$3/bin" && touch "$3/bin/activate"
elif [ "$1 $2" = '-m pytest' ] && [[ " $* " == *' -m slurm '* ]]; then \
exec "$REAL_PYTHON" "$@" -p no:cacheprovider stub_test.py
fi
"""
STUB_TEST = """import os, pytest
@pytest.mark.slurm
def test_on_the_cluster():
    if os.environ.get('STUB_SKIP'):
        pytest.skip('no Slurm cluster here: stub')
"""


@pytest.mark.parametrize('ci, start_fails, skips, ok, says', [
    (True, True, False, False, 'CI=true: no Slurm cluster started'),
    (False, True, True, True, 'the slurm tests will skip'),
    (True, False, True, False, 'CI=true: slurm tests skipped'),
    (True, False, False, True, '1 passed'),
], ids=['ci-no-cluster', 'no-cluster', 'ci-a-test-skips', 'ci-tests-pass'])
def test_ci_run_fails_in_ci_when_the_cluster_does_not_start_or_a_slurm_test_skips(tmp_path, ci, start_fails, skips,
                                                                                 ok, says):
    """.ci/run in a copy of the repo whose .ci/slurm_start.sh, python3 and python are stubs: elsewhere a
    cluster that does not start leaves the Slurm tests to skip, in CI it fails the run, as a skip does."""
    (tmp_path / '.ci').mkdir()
    shutil.copy(os.path.join(ROOT, '.ci', 'run'), tmp_path / '.ci' / 'run')
    (tmp_path / '.ci' / 'slurm_start.sh').write_text(
        'echo "slurm_start: slurmdbd does not answer (stub)" >&2; exit 1\n' if start_fails else 'exit 0\n')
    (tmp_path / 'stub_test.py').write_text(STUB_TEST)
    (tmp_path / 'pytest.ini').write_text('[pytest]\nmarkers = slurm: stub\n')
    (tmp_path / 'bin').mkdir()
    for name in ('python3', 'python'):
        (tmp_path / 'bin' / name).write_text(STUB_PYTHON)
        (tmp_path / 'bin' / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ('CI', 'STUB_SKIP', 'PYTEST_ADDOPTS')}
    env.update(PATH=f"{tmp_path / 'bin'}:{env['PATH']}", REAL_PYTHON=sys.executable, **({'CI': 'true'} if ci else {}),
               **({'STUB_SKIP': '1'} if skips else {}))
    out = subprocess.run(['bash', str(tmp_path / '.ci' / 'run')], env=env, capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    assert (out.returncode == 0) == ok and says in text, text
    assert ('will skip' in text) == (not ci and start_fails), text
    # the Slurm tests ran
    assert bool(re.search(r'\d+ (passed|skipped) in ', text)) == (not (ci and start_fails)), text
