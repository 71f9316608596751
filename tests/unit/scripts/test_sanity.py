"""scripts/sanity.py (make sanity): the collection-shaped copy it gives ansible-test, and its ignore file's rules.

The helper names below are made up (alpha, beta.gamma), so that no rename of module_utils/ ever touches them."""

import ast
import os
import re

import pytest
import sanity

from plugin_utils import PROJECT_ROOT

HELPERS = {"alpha", "beta", "beta.gamma", "basic_x"}
PKG = sanity.MODULE_UTILS_PKG


@pytest.mark.parametrize("line, want", [
    ("from ansible.module_utils.alpha import A, b", f"from {PKG}.alpha import A, b"),
    ("from ansible.module_utils.beta.gamma import G  # why", f"from {PKG}.beta.gamma import G  # why"),
    ("    from ansible.module_utils.beta import gamma as g", f"    from {PKG}.beta import gamma as g"),
    ("from ansible.module_utils import alpha", f"from {PKG} import alpha"),
    ("from ansible.module_utils import alpha, basic",
     f"from {PKG} import alpha; from ansible.module_utils import basic"),
    ("import ansible.module_utils.beta.gamma as g", f"import {PKG}.beta.gamma as g"),
    # Ansible's own helpers stay, even under a name that starts like one of the project's
    ("from ansible.module_utils.basic import AnsibleModule", None),
    ("from ansible.module_utils.common.text.converters import to_text", None),
    ("from ansible.module_utils.beta.delta import D", None),
    ("from ansible.module_utils import basic", None),
    ("import ansible.module_utils", None),
])
def test_an_import_of_a_project_helper_becomes_one_from_the_collection(line, want):
    assert sanity.rewrite_imports(line + "\n", HELPERS) == (want or line) + "\n"


def test_a_parenthesised_import_is_rewritten_whole():
    text = "from ansible.module_utils.alpha import (\n    A,\n    B,\n)\nx = 1\n"
    assert sanity.rewrite_imports(text, HELPERS) == text.replace("ansible.module_utils", PKG)
    mixed = "from ansible.module_utils import (\n    alpha,\n    basic,\n)\n"
    assert sanity.rewrite_imports(mixed, HELPERS) == (f"from {PKG} import alpha\n"
                                                      "from ansible.module_utils import basic\n")


def test_the_helpers_are_found_by_their_files(tmp_path):
    for rel in ("alpha.py", "beta/__init__.py", "beta/gamma.py", "__pycache__/x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert sanity.project_helpers(str(tmp_path)) == {"alpha", "beta", "beta.gamma"}


def test_doc_fragments_and_references_get_the_collections_name():
    doc = ("description: See M(node) and O(job#module:suite); M(other) is not ours.\n"
           "extends_documentation_fragment:\n  - conn\n  - conn.extra\n  - ansible.builtin.action_common_attributes\n"
           "options: {}\nauthor: ray-verl maintainers\n")
    out = sanity.rewrite_fragments(doc, {"conn"})
    out = sanity.rewrite_author(sanity.rewrite_references(out, {"module": {"node", "job"}}))
    fq = sanity.FQ
    assert out == (f"description: See M({fq}.node) and O({fq}.job#module:suite); M(other) is not ours.\n"
                   f"extends_documentation_fragment:\n  - {fq}.conn\n  - {fq}.conn.extra\n"
                   "  - ansible.builtin.action_common_attributes\n"
                   "options: {}\nauthor: ray-verl maintainers (!UNKNOWN)\n")
    assert sanity.rewrite_fragments("extends_documentation_fragment: conn\n", {"conn"}) == \
        f"extends_documentation_fragment: {fq}.conn\n"
    assert sanity.rewrite_author("author: Jo (@jo)\n") == "author: Jo (@jo)\n"
    assert sanity.rewrite_references("See P(f#filter), P(g#filter).", {"filter": {"f"}}) == \
        f"See P({fq}.f#filter), P(g#filter)."


def test_every_ignore_line_says_why(tmp_path):
    ignore = tmp_path / "ignore.txt"
    ignore.write_text("# a comment\n\nplugins/modules/a.py validate-modules:x # because\n")
    assert sanity.ignore_lines(str(ignore)) == ["plugins/modules/a.py validate-modules:x # because"]
    ignore.write_text("plugins/modules/a.py validate-modules:x\n")
    with pytest.raises(sanity.IgnoreFileError, match=":1: an ignore line needs a comment"):
        sanity.ignore_lines(str(ignore))
    assert sanity.ignore_lines(os.path.join(PROJECT_ROOT, sanity.IGNORE))


def test_the_copy_of_the_project_is_a_collection_that_imports_only_through_it(tmp_path):
    coll = sanity.build(PROJECT_ROOT, str(tmp_path))
    assert coll == str(tmp_path / "ansible_collections" / sanity.NAMESPACE / sanity.COLLECTION)
    modules = sorted(os.listdir(os.path.join(coll, "plugins", "modules")))
    assert modules == sorted(f for f in os.listdir(os.path.join(PROJECT_ROOT, "library")) if f.endswith(".py"))
    helpers = sanity.project_helpers(os.path.join(PROJECT_ROOT, "module_utils"))
    left = []
    for folder, _, files in os.walk(os.path.join(coll, "plugins")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)  # the rewrite leaves valid Python
            for node in ast.walk(tree):
                mods = ([node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                        if isinstance(node, ast.ImportFrom) else
                        [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                left += [f"{path}: {m}" for m in mods
                         if m.startswith("ansible.module_utils.") and m[len("ansible.module_utils."):] in helpers]
    assert not left
    ignore = os.path.join(coll, "tests", "sanity", f"ignore-{sanity.ansible_version()}.txt")
    with open(ignore, encoding="utf-8") as f:
        entries = f.read().splitlines()
    assert entries and all(re.match(r"^plugins/\S+ validate-modules:[\w-]+ # \S", e) for e in entries)
    for entry in entries:
        assert os.path.exists(os.path.join(coll, entry.split()[0])), entry
