"""Each module_utils package's __init__.py names its files: every .py file of its folder by its bare name
(`step.py`) in the docstring, and no bare name of a file the folder lacks (a moved or removed file), so the list a
reader starts from cannot drift. A sub-package is named as `name/`. Path-qualified names
(module_utils/verl/probe.py, library/ray_job.py) point elsewhere and are not compared.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3] / "module_utils"
PACKAGES = sorted(p.parent for p in ROOT.rglob("__init__.py") if "__pycache__" not in p.parts)
# a file name standing alone: not the end of a path (probe.py in verl/probe.py) nor of a dotted name
BARE_FILE = re.compile(r"(?<![\w./-])(\w+\.py)\b")


def docstring(package):
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text(), str(package / "__init__.py"))) or ""


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_init_names_the_folders_files(package):
    text = docstring(package)
    named = set(BARE_FILE.findall(text)) - {"__init__.py"}
    files = {p.name for p in package.glob("*.py")} - {"__init__.py"}
    where = f"{package.relative_to(ROOT.parent)}/__init__.py"
    assert not files - named, f"{where} does not name {sorted(files - named)}"
    assert not named - files, f"{where} names {sorted(named - files)}, which the folder lacks"
    subpackages = {p.parent.name for p in package.glob("*/__init__.py")}
    unnamed = sorted(name for name in subpackages if not re.search(rf"(?<![\w./-]){name}/", text))
    assert not unnamed, f"{where} does not name its sub-packages {unnamed} (as name/)"


def test_the_packages_are_found():
    found = {str(p.relative_to(ROOT)) for p in PACKAGES}
    assert {"base", "jobs", "jobs/life", "jobs/record", "jobspec", "verl"} <= found  # sub-packages too
    assert {"step.py", "chain.py"} <= set(BARE_FILE.findall(docstring(ROOT / "jobs" / "life")))
