"""module_utils/ is layered: each package imports only the packages below it (LAYERS), so the folder tree says what
depends on what. A file that imports upwards (or a package not listed here) fails this test, naming the import."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3] / "module_utils"
# Each package and the project packages it may import (itself always). base is the floor: conventions, redaction,
# the share's files, the connection to Ray.
LAYERS = {
    "base": set(),
    "acceptance": {"base"},
    "verl": {"base"},
    "daemons": {"base"},
    "node": {"base", "daemons"},
    "jobspec": {"base", "verl", "queue"},
    "cordons": {"base"},
    "jobs": {"base", "verl", "jobspec", "cordons", "queue"},
    "regression": {"base", "verl", "jobs"},
    "queue": {"base"},
}
# A package's sub-packages are layered the same way: each imports only those below it (and the packages its parent
# may import); the parent's own files (jobs/runner.py) stand over all of them.
SUBLAYERS = {
    "jobs": {
        "record": set(),
        "evidence": {"record"},
        "submission": {"record", "evidence"},
        "life": {"record", "evidence", "submission"},
    },
}


def imports_of(path):
    """The project packages a file imports (ansible.module_utils.<pkg>...), with their line numbers."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ansible.module_utils"):
            parts = node.module.split(".")[2:]
            names = [parts[0]] if parts else [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[2] for a in node.names if a.name.startswith("ansible.module_utils.")]
        for name in names:
            if (ROOT / name).is_dir() or (ROOT / f"{name}.py").exists():
                yield name, node.lineno


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert packages == set(LAYERS), "module_utils/: a package without a layer, or a layer without its package"
    assert not [p.name for p in ROOT.glob("*.py")], "module_utils/: every file belongs to a package"


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_go_down(package):
    allowed = LAYERS[package] | {package}
    wrong = [f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for name, line in imports_of(path) if name not in allowed]
    assert not wrong, wrong


def sub_imports_of(path, package):
    """The sub-packages of `package` a file imports (ansible.module_utils.<package>.<sub>...), and any of the
    package's own top-level files (as "<package>/<name>.py"), with their line numbers."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ansible.module_utils."):
            parts = node.module.split(".")[2:]
            if parts[0] != package:
                continue
            names = parts[1:2] or [alias.name for alias in node.names]
            for name in names:
                if (ROOT / package / name).is_dir():
                    yield name, node.lineno
                elif (ROOT / package / f"{name}.py").exists():
                    yield f"{package}/{name}.py", node.lineno


@pytest.mark.parametrize("package", sorted(SUBLAYERS))
def test_every_sub_package_has_a_layer(package):
    found = {p.parent.name for p in (ROOT / package).glob("*/__init__.py")}
    assert found == set(SUBLAYERS[package]), f"module_utils/{package}/: a sub-package without a layer, or the reverse"


@pytest.mark.parametrize("package,sub", sorted((p, s) for p, subs in SUBLAYERS.items() for s in subs))
def test_sub_package_imports_go_down(package, sub):
    allowed = SUBLAYERS[package][sub] | {sub}
    wrong = [f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
             for path in sorted((ROOT / package / sub).rglob("*.py"))
             for name, line in sub_imports_of(path, package) if name not in allowed]
    assert not wrong, wrong


def test_sub_layers_catch_an_upward_import(tmp_path):
    """The check itself: a record/ file importing life/ is named (a test that could not fail would prove nothing)."""
    upward = tmp_path / "up.py"
    upward.write_text("from ansible.module_utils.jobs.life import chain\n"
                      "from ansible.module_utils.jobs import runner\n")
    assert sorted(sub_imports_of(upward, "jobs")) == [("jobs/runner.py", 2), ("life", 1)]


def _file_imports(path):
    """The files of module_utils a file imports (an import inside a function counts), as paths under ROOT."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ansible.module_utils."):
            base = node.module.split(".")[2:]
            for parts in (base, *[[*base, alias.name] for alias in node.names]):
                target = ROOT.joinpath(*parts).with_suffix(".py")
                if parts and target.is_file():
                    yield target


def test_no_file_imports_its_way_back_to_itself():
    """Within a package too, files depend one way: no import cycle, not even one broken by an import inside a
    function (jobspec's model and render once were)."""
    graph = {path: set(_file_imports(path)) - {path} for path in ROOT.rglob("*.py")}
    done, cycles = set(), []

    def visit(path, trail):
        if path in trail:
            cycles.append(" -> ".join(str(p.relative_to(ROOT)) for p in trail[trail.index(path):] + [path]))
            return
        if path in done:
            return
        for target in sorted(graph.get(path, ())):
            visit(target, trail + [path])
        done.add(path)

    for path in sorted(graph):
        visit(path, [])
    assert not cycles, cycles
