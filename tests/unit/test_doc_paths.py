"""Every repository path the documentation names exists: a page that names a moved or removed file fails here.

Read from README.md, docs/*.md and the other folders' READMEs: a Markdown link (relative to its page), a backticked
path under one of the project's folders (`module_utils/jobs/life/step.py`), a playbook after `ansible-playbook`, the
first column of README.md's layout table, and the files named in that table beside their folder. Not checked: a
path with a placeholder (`inventory/<site>/`), one on a node (`/private/...`), a file .gitignore names (written by
the lab, `inventory/lab/hosts.yml`), and what a fenced block quotes (a report's links are relative to the report).
A glob (`lab/bench_*.py`) must match at least one file.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The folders' READMEs, not the tests' data nor what a hidden folder holds (.venv/, the lab's .lab/)
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                *(p for folder in ROOT.iterdir() if folder.is_dir() and folder.name not in (".git", "tests")
                  and not folder.name.startswith(".") for p in folder.rglob("README.md")
                  if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))])
# The folders a backticked path is taken to start from. group_vars/ is not one: it is also Ansible's name for any
# inventory's or playbook's folder (`group_vars/all.yml` of a site), and the project's holds only a README.
FOLDERS = ("action_plugins", "doc_fragments", "docs", "filter_plugins", "inventory", "inventory_plugins", "jobspecs",
           "lab", "library", "lookup_plugins", "module_utils", "molecule", "playbooks", "plugin_utils", "roles",
           "scripts", "suites", "tests")

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
TICKED = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLAYBOOK = re.compile(r"\bansible-playbook\b[^\n`]*?\s([\w./-]+\.ya?ml)\b")


def generated():
    """The plain paths .gitignore names (no glob): files the lab writes, never in the repository."""
    lines = (line.strip() for line in (ROOT / ".gitignore").read_text().splitlines())
    return {line.strip("/") for line in lines if line and not line.startswith("#") and not set("*?[!") & set(line)}


def placeholder(path):
    return "<" in path or path.startswith(("/", "~", "$"))


def exists(path):
    """Whether a repository path (relative to ROOT, maybe a glob) names at least one file or folder."""
    path = path.split("#")[0].rstrip("/")
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists() or path in generated()


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def named_paths(page):
    """(line, path relative to ROOT) for each path the page names."""
    text = page.read_text(encoding="utf-8")
    # blank out fenced blocks, keeping the line numbers; a playbook run in one is still read from the full text
    prose = FENCE.sub(lambda m: "\n" * m[0].count("\n"), text)
    for m in TICKED.finditer(prose):
        token = m[1].strip()
        if " " in token or placeholder(token) or token.split("/")[0] not in FOLDERS or "/" not in token:
            continue
        yield line_of(prose, m.start()), token
    for m in LINK.finditer(prose):
        target = m[1]
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#") or placeholder(target):
            continue
        resolved = (page.parent / target.split("#")[0]).resolve()
        try:
            yield line_of(prose, m.start()), str(resolved.relative_to(ROOT)) + ("/" if target.endswith("/") else "")
        except ValueError:
            yield line_of(prose, m.start()), target  # a link out of the repository never exists in it
    for m in PLAYBOOK.finditer(text):
        if not placeholder(m[1]):
            yield line_of(text, m.start(1)), m[1]


def layout_rows():
    """(line, first cell's paths, second cell) of each row of README.md's layout table."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("## Layout")
    for number, line in enumerate(lines[start:], start=start + 1):
        if line.startswith("## ") and number > start + 1:
            break
        cells = line.split("|")
        if len(cells) < 4 or set(cells[1].strip()) <= set("-"):
            continue
        yield number, TICKED.findall(cells[1]), cells[2]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_exist(page):
    missing = [f"{page.relative_to(ROOT)}:{line}: {path}" for line, path in named_paths(page) if not exists(path)]
    assert not missing, "paths the page names that the repository lacks: " + "; ".join(missing)


def test_the_checks_read_paths():
    """The reader finds what the pages hold (a regression in the regexes would pass every page vacuously)."""
    found = {path for page in PAGES for _, path in named_paths(page)}
    assert {"module_utils/jobs/life/step.py", "docs/site.md", "up.yml", "jobspecs/README.md"} <= found
    assert "inventory/lab/hosts.yml" in generated()


def test_layout_table_paths_exist():
    rows = list(layout_rows())
    assert len(rows) > 20, "README.md's layout table was not found"
    missing = [f"README.md:{line}: {path}" for line, paths, _ in rows for path in paths
               if not placeholder(path) and not path.endswith("'s") and not exists(path)]
    assert not missing, "the layout table names paths the repository lacks: " + "; ".join(missing)


def test_layout_table_files_exist_in_their_folder():
    """A row for one folder names its files by their bare names (`step.py`): each is somewhere under that folder."""
    missing = []
    for line, paths, what in layout_rows():
        if len(paths) != 1 or not paths[0].endswith("/") or not (ROOT / paths[0]).is_dir():
            continue
        for name in TICKED.findall(what):
            if re.fullmatch(r"[\w.-]+\.(py|sh)", name) and not any((ROOT / paths[0]).rglob(name)):
                missing.append(f"README.md:{line}: {paths[0]}{name}")
    assert not missing, "the layout table names files their folder lacks: " + "; ".join(missing)
