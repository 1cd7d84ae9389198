"""
The repository's floors, read off its own imports (with ast, nothing is run): each file stands on the floor
its folder names, and imports only from its own floor or below; no import runs back up, and no circle
closes, inside a folder either. The ground folder (base/) imports only torch, the standard library and
configurator.py; the core never imports tools/ or study/; the engine (study/) names no study of this repository,
which only publish/, above it, lists.
"""

import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bottom to top: a file imports only from its own floor or a lower one
FLOORS = ['configurator', 'base', 'model', 'sample_data', 'eval_lengths', 'train_checks', 'train', 'tools', 'study',
          'publish', 'ablate']
CORE = FLOORS[:FLOORS.index('train') + 1]
OUTSIDE = ('tests', 'config', 'results', '.ci', '.git')      # not modules of the code: left out


def modules():
    """{module name: path} of every Python file of the code."""
    out = {}
    for folder, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(folder, ROOT)
        if rel.split(os.sep)[0] in OUTSIDE or '__pycache__' in rel:
            dirs[:] = []
            continue
        for f in files:
            if f.endswith('.py'):
                name = os.path.normpath(os.path.join(rel, f[:-3])).replace(os.sep, '.').removesuffix('.__init__')
                out[name] = os.path.join(folder, f)
    return out


def floor(module):
    return FLOORS.index(module.split('.')[0])


def imports(path):
    """The names a file imports, wherever in it (a function's own imports too): 'x.y' for `import x.y` and
    `from x import y` alike, so that a name of a package's module reads as that module."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def graph():
    """{module: the repo's modules it imports}"""
    mods = modules()
    return {m: {i for i in imports(p) if i in mods and i != m} for m, p in mods.items()}


def test_every_module_stands_on_a_declared_floor():
    unplaced = [m for m in modules() if m.split('.')[0] not in FLOORS]
    assert not unplaced, f"{unplaced}: put each in the folder of its floor, or declare a floor in FLOORS"


def test_no_import_runs_back_up_and_the_core_never_imports_tools_or_study():
    up = sorted((m, i) for m, deps in graph().items() for i in deps if floor(i) > floor(m))
    assert not up, f"imports that run back up a floor: {up}"
    core = sorted((m, i) for m, deps in graph().items() for i in deps
                  if m.split('.')[0] in CORE and i.split('.')[0] not in CORE)
    assert not core, core


def test_no_circle_of_imports():
    g, done, path = graph(), set(), []

    def visit(m):
        if m in path:
            raise AssertionError(f"a circle of imports: {' -> '.join(path[path.index(m):] + [m])}")
        if m in done:
            return
        path.append(m)
        for i in sorted(g[m]):
            visit(i)
        path.pop()
        done.add(m)
    for m in sorted(g):
        visit(m)


def test_the_ground_floor_imports_only_torch_the_standard_library_and_configurator():
    allowed = set(sys.stdlib_module_names) | {'torch', 'configurator', 'base'}
    for m, path in modules().items():
        if m.split('.')[0] == 'base':
            other = sorted(i for i in imports(path) if i.split('.')[0] not in allowed)
            assert not other, (m, other)


def test_the_engine_names_no_study_of_this_repository():
    """The list of this repository's studies and the claims they test live in publish/: no file of study/ names a
    study config of config/ (grep for study_long, study_scale, ...)."""
    studies = [f[:-3] for f in os.listdir(os.path.join(ROOT, 'config')) if f.startswith('study_') and f.endswith('.py')]
    assert len(studies) > 10
    for m, path in modules().items():
        if m.split('.')[0] == 'study':
            text = open(path).read()
            named = sorted(s for s in studies if s in text)
            assert not named, (m, named)


def test_the_floor_test_sees_an_import_that_runs_back_up(tmp_path, monkeypatch):
    """The check itself: a planted base/ module that imports model.py is caught, as a circle through it is."""
    (tmp_path / 'base').mkdir()
    (tmp_path / 'base' / 'kernels.py').write_text("import model\n")
    (tmp_path / 'model.py').write_text("from base import kernels\n")
    monkeypatch.setattr(sys.modules[__name__], 'ROOT', str(tmp_path))
    assert graph() == {'base.kernels': {'model'}, 'model': {'base.kernels'}}
    for check in (test_no_import_runs_back_up_and_the_core_never_imports_tools_or_study, test_no_circle_of_imports):
        try:
            check()
        except AssertionError:
            continue
        raise AssertionError(f"{check.__name__} passed on a planted import of model from base/")
