import pytest

from configurator import configure, settings_of

DEFAULTS = dict(batch_size=16, learning_rate=1e-3, dropout_site='none', compile=False, out_dir='out')


def fails(argv, *words, tmp=None):
    with pytest.raises(SystemExit) as e:
        configure(DEFAULTS, argv)
    msg = str(e.value)
    assert msg.startswith('config error:') and '\n' not in msg
    for w in words:
        assert w in msg, msg
    return msg


def test_overrides_and_config_files_apply_in_order(tmp_path):
    f = tmp_path / 'c.py'
    f.write_text("import math\nbatch_size = 4\nlearning_rate = 3 * math.pi / 1000\n")
    cfg = configure(DEFAULTS, [str(f), '--batch_size=8', '--dropout_site=vpad', '--compile=True', '--out_dir=out/x'])
    assert cfg == dict(batch_size=8, learning_rate=pytest.approx(0.00942478), dropout_site='vpad',
                       compile=True, out_dir='out/x')
    assert DEFAULTS['batch_size'] == 16          # the defaults are not touched


def test_the_log_names_every_config_file_read_also_one_a_config_runs(tmp_path, capsys):
    base, top = tmp_path / 'base.py', tmp_path / 'top.py'
    base.write_text("batch_size = 4\n")
    top.write_text(f"exec(open({str(base)!r}).read())\nout_dir = 'out/y'\n")
    assert configure(DEFAULTS, [str(top)])['batch_size'] == 4
    assert f"Overriding config with {top} (which reads {base}):" in capsys.readouterr().out
    chain = tmp_path / 'chain.py'                 # two hops: top runs base, chain runs top
    chain.write_text(f"exec(open({str(top)!r}).read())\n")
    assert configure(DEFAULTS, [str(chain)])['out_dir'] == 'out/y'
    assert f"Overriding config with {chain} (which reads {top}, {base}):" in capsys.readouterr().out
    # quiet: the same settings, nothing said (a study reads every run's settings)
    assert configure(DEFAULTS, [str(chain), '--batch_size=2'], quiet=True) == dict(DEFAULTS, batch_size=2, out_dir='out/y')
    assert capsys.readouterr().out == ''


def test_int_is_fine_where_float_expected():
    cfg = configure(DEFAULTS, ['--learning_rate=1'])
    assert cfg['learning_rate'] == 1.0 and isinstance(cfg['learning_rate'], float)


def test_unknown_key_names_the_closest_valid_keys(tmp_path):
    fails(['--batch_szie=3'], "'batch_szie'", 'batch_size')
    f = tmp_path / 'typo.py'
    f.write_text("learning_rat = 0.1\n")
    fails([str(f)], "'learning_rat'", 'learning_rate', str(f))
    fails(['--zzz=1'], "'zzz'", 'valid keys')


def test_a_config_of_the_other_kind_says_which_script_runs_it(tmp_path):
    """A study config given to train.py names ablate.py; a train.py config given to ablate.py (the
    settings that hold `arms`) says it needs a study config; neither suggests a near-miss key."""
    study, run = tmp_path / 'study_x.py', tmp_path / 'x.py'
    study.write_text("base_config = 'config/vpad.py'\narms = {'none': {}}\n")
    run.write_text("out_dir = 'out/x'\nn_layer = 4\n")
    msg = fails([str(study)], "unknown key 'base_config'", f'a study config, run by python ablate.py {study}')
    assert 'valid keys' not in msg
    with pytest.raises(SystemExit) as e:
        configure({'arms': {}, 'base_config': '', 'results_dir': '', 'batch_size': 1}, [str(run)])
    assert e.value.code.endswith(f"unknown key 'out_dir' (in {run}: a train.py config; ablate.py takes a study config, "
                                 "which sets base_config and arms)")
    typo = tmp_path / 'more.py'                    # one unknown key beside a study config is a typo
    typo.write_text("resuts_dir = 'r'\n")
    with pytest.raises(SystemExit) as e:
        configure({'arms': {}, 'base_config': '', 'results_dir': '', 'batch_size': 1}, [str(study), str(typo)])
    assert 'did you mean results_dir?' in e.value.code and 'train.py config' not in e.value.code


@pytest.mark.parametrize("arg,words", [
    ('--batch_size=0.5', ['batch_size', 'int', 'float', '0.5']),
    ('--batch_size=True', ['batch_size', 'int', 'bool']),
    ('--compile=1', ['compile', 'bool', 'int']),
    ('--compile=yes', ['compile', 'bool', "'yes'"]),
    ('--learning_rate=fast', ['learning_rate', 'float', "'fast'"]),
])
def test_wrong_type_names_key_expected_and_given(arg, words):
    fails([arg], *words)


def test_wrong_type_in_config_file(tmp_path):
    f = tmp_path / 'c.py'
    f.write_text("batch_size = '16'\n")
    fails([str(f)], 'batch_size', 'int', 'str', str(f))


def test_missing_file_and_malformed_arguments():
    fails(['config/nope.py'], 'config/nope.py', 'not found')
    fails(['--batch_size'], '--key=value')
    fails(['batch_size=3'], 'neither')
    fails(['--compil'], "unknown key 'compil'", 'compile')          # a mistyped bare flag
    assert configure(DEFAULTS, ['--compile'])['compile'] is True       # a bare flag is True


def test_a_config_file_that_does_not_run_names_file_and_line(tmp_path):
    f = tmp_path / 'c.py'
    f.write_text("batch_size = 4\nlearning_rate = lr * 2\n")
    fails([str(f)], 'c.py line 2', 'NameError')
    f.write_text("batch_size = (4\n")
    fails([str(f)], 'c.py', 'SyntaxError')
    fails(['--batch_size={[1]}'], 'batch_size', 'int')


def test_settings_of_takes_public_plain_globals():
    ns = dict(a=1, b='x', _c=2, d=[1], e=None, f=2.0, g=True, VERSION=2)
    assert settings_of(ns) == dict(a=1, b='x', f=2.0, g=True)


@pytest.mark.parametrize('script', ['train.py', 'eval_lengths.py', 'sample_data.py', 'ablate.py'])
def test_help_lists_every_key_with_its_default_and_comment(script, capsys, monkeypatch):
    """`python <script> --help`, run in this process (a subprocess costs ~4 s of imports); for
    sample_data.py, which imports no torch, as a process of its own too, so one case is end to end."""
    import importlib, os, runpy, subprocess, sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, 'argv', [script, '--help'])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(script, run_name='__main__')
    assert e.value.code in (0, None)
    out = capsys.readouterr()
    assert out.err == '', out.err
    if script == 'sample_data.py':
        ran = subprocess.run([sys.executable, script, '--help'], capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0 and ran.stderr == '' and ran.stdout == out.out, ran.stderr
    module = importlib.import_module(script[:-3])
    keys = settings_of(vars(module))
    lines = {line.split()[0][2:]: line for line in out.out.splitlines() if line.strip().startswith('--')}
    for key, default in keys.items():
        assert key in lines, key
        rest = lines[key].split(None, 1)[1]
        assert rest.startswith(repr(default)) and len(rest) > len(repr(default)) + 3, (key, lines[key])
    if script == 'sample_data.py':    # a comment continued on indented lines is shown whole, under its key
        text = out.out.split('  --reach ', 1)[1]
        assert 'farther than this from their' in text and text.rstrip().endswith("window layers' reach)"), text
