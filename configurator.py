"""
nanoGPT's configuration interface, with its weak spots fixed:

    python train.py config/vpad.py --batch_size=32 --dropout_site=pre_linear

A script keeps its settings as plain globals at the top, then calls

    globals().update(configure(settings, sys.argv[1:]))

`configure` runs each config file (plain Python assigning some of the keys) and then each
--key=value (a Python literal, or a bare string for string keys). Unlike nanoGPT, a typo'd key is
an error naming the closest valid keys, a value of the wrong type is an error naming the key, the
expected type and what was given, and a missing config file says so. Errors exit with one line,
no stack trace. An int is accepted where a float is expected; booleans take True / False only.
"""

import ast
import difflib
import os
import sys


def _fail(msg):
    raise SystemExit(f"config error: {msg}")


def _unknown(key, valid):
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; valid keys: {', '.join(sorted(valid))}"
    return f"unknown key '{key}'{hint}"


def _check_type(key, value, default, source):
    """-> value converted to the type of `default`, or exit naming key, expected and given."""
    expected = type(default)
    if default is None or isinstance(value, expected) and not (isinstance(value, bool) and expected is not bool):
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    _fail(f"{key} expects {expected.__name__} (default {default!r}), got {type(value).__name__} {value!r} from {source}")


def _parse(key, raw, default):
    if isinstance(default, str):
        return raw                                  # strings need no quotes: --out_dir=out/vpad
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        expected = type(default).__name__
        _fail(f"{key} expects {expected} (default {default!r}), got {raw!r} which is not a {expected} literal")


def configure(settings, argv):
    """settings: {key: default}; argv: config files and --key=value overrides, applied in order.
    -> a new dict with the same keys and the overridden values."""
    config = dict(settings)
    for arg in argv:
        if not arg.startswith('--'):
            if not arg.endswith('.py'):
                _fail(f"'{arg}' is neither a config file (*.py) nor a --key=value override")
            if not os.path.isfile(arg):
                _fail(f"config file '{arg}' not found (run from the repository root; configs live in config/)")
            print(f"Overriding config with {arg}:")
            with open(arg) as f:
                source = f.read()
            print(source)
            scope = dict(config)
            exec(compile(source, arg, 'exec'), scope)
            for key, value in scope.items():
                if key.startswith('_') or key == '__builtins__' or type(value).__name__ in ('module', 'function'):
                    continue
                if key not in config:
                    _fail(_unknown(key, config) + f" (in {arg})")
                config[key] = _check_type(key, value, settings[key], arg)
        else:
            if '=' not in arg:
                _fail(f"'{arg}': write overrides as --key=value")
            key, raw = arg[2:].split('=', 1)
            if key not in config:
                _fail(_unknown(key, config))
            value = _parse(key, raw, settings[key])
            print(f"Overriding: {key} = {value!r}")
            config[key] = _check_type(key, value, settings[key], f"--{key}")
    return config


def settings_of(namespace):
    """The config keys of a script: its public globals of a plain type (nanoGPT's convention)."""
    return {k: v for k, v in namespace.items()
            if not k.startswith('_') and isinstance(v, (int, float, bool, str))}


if __name__ == '__main__':
    sys.exit("configurator.py is used by train.py and eval_lengths.py; see its docstring")
