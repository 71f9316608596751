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
    "verl": {"base"},
    "daemons": {"base"},
    "node": {"base", "daemons"},
    "jobspec": {"base", "verl"},
    "jobs": {"base", "verl", "jobspec"},
    "regression": {"base", "verl", "jobs"},
    "queue": {"base"},
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
