"""
nanoGPT's configuration interface, with its weak spots fixed:

    python train.py config/vpad.py --batch_size=32 --dropout_site=pre_linear

A script keeps its settings' defaults as plain globals at the top, and its main reads a run's
settings from

    cfg = configure(settings_of(globals()), argv)    # {key: value}; the globals stay the defaults

`configure` runs each config file (plain Python assigning some of the keys) and then each
--key=value (a Python literal, or a bare string for string keys). Unlike nanoGPT, a typo'd key is
an error naming the closest valid keys, a value of the wrong type is an error naming the key, the
expected type and what was given, and a missing config file (or one that does not run) says so.
Errors exit with one line, no stack trace. An int is accepted where a float is expected; booleans
take True / False only, and a bare --flag means --flag=True. `--help` prints every key with its
default and the comment written beside it in the calling script, then exits.

It also owns what every entry point does first (startup), and the one reading of a comma-separated
setting (items).
"""

import os
import signal
import sys

# ast, difflib, inspect and re are imported where they are used: a script imports this module first,
# and a Ctrl-C is one line only from startup() on


def _fail(msg):
    raise SystemExit(f"config error: {msg}")


def _short(value):
    """A value as an error quotes it: its repr, cut at 80 characters (a 100 KB value is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


def unknown_key(key, valid):
    import difflib
    close = difflib.get_close_matches(key[:200], valid, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; valid keys: {', '.join(sorted(valid))}"
    return f"unknown key {_short(key)}{hint}"


def _assigned(scope):
    """The settings a config file's scope holds: its public names of plain values (not its imports or helpers)."""
    return {k: v for k, v in scope.items()
            if not k.startswith('_') and k != '__builtins__' and type(v).__name__ not in ('module', 'function')}


def _kind_hint(scope, config, path):
    """A study config given to train.py, or a train.py config given to ablate.py (the one script whose
    settings hold `arms`): say which kind of file it is and what runs it. A file with one unknown key
    has a typo, not the wrong kind: '' (the near-miss suggestion says more)."""
    unknown = [k for k in _assigned(scope) if k not in config]
    study = 'arms' in unknown or 'base_config' in unknown or 'arms' in config and scope['arms'] is not config['arms']
    if len(unknown) < 2:
        return ''
    if study and 'arms' not in config:
        return f": a study config, run by python ablate.py {path}"
    if not study and 'arms' in config:
        return ": a train.py config; ablate.py takes a study config, which sets base_config and arms"
    return ''


def _check_type(key, value, default, source):
    """-> value converted to the type of `default`, or exit naming key, expected and given."""
    expected = type(default)
    if default is None or isinstance(value, expected) and not (isinstance(value, bool) and expected is not bool):
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    _fail(f"{key} expects {expected.__name__} (default {default!r}), got {type(value).__name__} {_short(value)} "
          f"from {source}")


def _parse(key, raw, default):
    if isinstance(default, str):
        return raw                                  # strings need no quotes: --out_dir=out/vpad
    try:
        import ast
        return ast.literal_eval(raw)
    except Exception:                               # ValueError, SyntaxError, TypeError ({[1]}), ...
        expected = type(default).__name__
        _fail(f"{key} expects {expected} (default {default!r}), got {_short(raw)}, which is not a Python literal")


def _reads(source, seen):
    """The config files a config runs (exec(open('config/vpad.py').read())), and those they run in
    turn, in order: the log names every file read."""
    import re
    out = []
    for path in re.findall(r"""exec\(open\(['"]([^'"]+)['"]\)\.read\(\)\)""", source):
        if path not in seen and path not in out:
            out.append(path)
            if os.path.isfile(path):
                with open(path) as f:
                    out += [p for p in _reads(f.read(), (*seen, *out)) if p not in out]
    return out


def configure(settings, argv, quiet=False):
    """settings: {key: default}; argv: config files and --key=value overrides, applied in order.
    -> a new dict with the same keys and the overridden values. quiet: without the lines that say what
    was read (a study reads every run's settings)."""
    config = dict(settings)
    if '--help' in argv or '-h' in argv:
        import inspect
        print_help(settings, inspect.stack()[1].filename)
        sys.exit(0)
    for arg in argv:
        if not arg.startswith('--'):
            if not arg.endswith('.py'):
                _fail(f"{_short(arg)} is neither a config file (*.py) nor a --key=value override")
            if not os.path.isfile(arg):
                _fail(f"config file '{arg}' not found (run from the repository root; configs live in config/)")
            with open(arg) as f:
                source = f.read()
            read = _reads(source, (arg,))
            if not quiet:
                print(f"Overriding config with {arg}" + (f" (which reads {', '.join(read)})" if read else '') + ":")
                print(source)
            scope = dict(config)
            try:
                exec(compile(source, arg, 'exec'), scope)
            except SystemExit:
                raise
            except BaseException as e:                # a syntax error, a NameError, ...: one line
                line = getattr(e, 'lineno', None) or _failing_line(e, arg)
                _fail(f"{arg}{f' line {line}' if line else ''} does not run: {type(e).__name__}: {e}")
            for key, value in _assigned(scope).items():
                if key not in config:
                    kind = _kind_hint(scope, config, arg)    # the wrong kind of file: no near-miss key to suggest
                    _fail((f"unknown key '{key}'" if kind else unknown_key(key, config)) + f" (in {arg}{kind})")
                config[key] = _check_type(key, value, settings[key], arg)
        else:
            if '=' not in arg and isinstance(config.get(arg[2:]), bool):
                arg += '=True'                      # --dry_run means --dry_run=True
            if '=' not in arg:
                _fail(unknown_key(arg[2:], config) if arg[2:] not in config
                      else f"{_short(arg)}: write overrides as --key=value")
            key, raw = arg[2:].split('=', 1)
            if key not in config:
                _fail(unknown_key(key, config))
            value = _parse(key, raw, settings[key])
            if not quiet:
                print(f"Overriding: {key} = {value!r}")
            config[key] = _check_type(key, value, settings[key], f"--{key}")
    return config


def _failing_line(e, filename):
    tb = e.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def print_help(settings, script):
    """Every key, its default and the comment beside its first assignment in `script`
    (`key = value  # comment`, or `'key': value,  # comment` in a dict of settings), with the
    indented comment-only lines that continue it."""
    import re
    comments, last = {}, None
    with open(script) as f:
        for line in f:
            more = re.match(r"\s+#\s*(.*)", line)
            if last and more:
                comments[last].append(more.group(1).strip())
                continue
            m = re.match(r"""\s*['"]?(\w+)['"]?\s*[=:][^#]*#\s*(.*)""", line)
            last = m.group(1) if m and m.group(1) in settings and m.group(1) not in comments else None
            if last:
                comments[last] = [m.group(2).strip()]
    rel = os.path.relpath(os.path.abspath(script), os.path.dirname(os.path.abspath(__file__)))
    command = (f"python -m {rel[:-len('.py')].replace(os.sep, '.')}" if os.sep in rel       # a module of a folder
               else f"python {os.path.basename(script)}")
    print(f"usage: {command} [config/file.py ...] [--key=value ...]\n")
    width = max(len(k) for k in settings) + 2
    for key, default in settings.items():
        note = comments.get(key, [''])
        print(f"  --{key:<{width}}{default!r:<22} {note[0]}".rstrip())
        for cont in note[1:]:
            print(f"{'':<{width + 4 + 22}} {cont}")


def settings_of(namespace):
    """The config keys of a script: its public globals of a plain type (nanoGPT's convention), less
    the UPPER_CASE ones, which are constants (sample_data.VERSION)."""
    return {k: v for k, v in namespace.items()
            if not k.startswith('_') and not k.isupper() and isinstance(v, (int, float, bool, str))}


# -----------------------------------------------------------------------------
# start-up: every entry point (train.py, eval_lengths.py, ablate.py, sample_data.py, `python -m tools.<x>`,
# each `python -m study.<x>` with a main, ablate.py's children among them) imports this module first, before
# torch. Imported by a script that is being run (its __main__), it installs the start-up handler at once (the
# end of this file): a Ctrl-C while the script's other imports load is one line. It loads only os, signal and
# sys (no torch, no numpy; its own other imports wait until used), so the window before it is the
# interpreter's own start. A test or a library that imports it installs nothing.

STOPPED_AT_STARTUP = "stopped at startup: nothing was written"


def _stopped_at_startup(*_):
    # os._exit, not sys.exit: the signal can land while torch's C++ calls back into Python, where a
    # raised SystemExit aborts with a C++ trace, or inside an import that catches it and goes on; and
    # nothing is written yet to clean up
    signal.signal(signal.SIGINT, lambda *_: None)   # a second Ctrl-C must not say it twice
    os.write(2, (STOPPED_AT_STARTUP + "\n").encode())
    os._exit(128 + signal.SIGINT)


def startup():
    """A Ctrl-C from now until start-up ends: one line on stderr, exit 130, nothing written, no
    traceback, never swallowed. Start-up ends where the script takes the signal itself
    (rundir.exit_on_signals, once its input is checked) or calls started()."""
    signal.signal(signal.SIGINT, _stopped_at_startup)


def _imported_by_a_script():
    """Whether the module importing this one is a script being run: its __name__ is '__main__'."""
    frame = sys._getframe(2)          # past this function and this module's own code
    while frame is not None and frame.f_code.co_filename.startswith('<frozen importlib'):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get('__name__') == '__main__'


def started():
    """The end of start-up for a script with no handler of its own: Ctrl-C raises KeyboardInterrupt again."""
    if signal.getsignal(signal.SIGINT) is _stopped_at_startup:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def items(key, text):
    """A comma-separated setting -> its items, stripped: 'a, b' -> ['a', 'b'], '' -> []. An empty or
    blank item ('1,,2', '1,2,', ' ') is a ValueError naming the key, not dropped: a typo must not
    silently change what runs. The one reading of every list key (multiples, seeds, tasks, ...)."""
    parts = [p.strip() for p in text.split(',')] if text else []
    if '' in parts:
        raise ValueError(f"{key}={_short(text)} has an empty item: separate items by single commas, none at either end")
    return parts


if __name__ == '__main__':
    sys.exit("configurator.py is used by train.py, eval_lengths.py, ablate.py and sample_data.py; see its docstring")
elif _imported_by_a_script():      # the first import of an entry point: its start-up begins here
    startup()
