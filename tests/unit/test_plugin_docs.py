"""Every module's and lookup's documentation parses (ansible-doc reads it), so `ansible-doc` works for all of them.

A ': ' inside a plain YAML scalar once broke four of them without any test noticing."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def names(folder):
    return sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, folder)) if f.endswith(".py") and f != "__init__.py")


def ansible_doc(kind, plugins):
    doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    proc = subprocess.run([doc, "-t", kind, "--json", *plugins], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_every_module_has_its_documentation_examples_and_return():
    modules = names("library")
    found = ansible_doc("module", modules)
    assert sorted(found) == modules
    for name, entry in found.items():
        assert entry["doc"]["short_description"] and entry["examples"] and entry["return"] is not None, name


def test_every_lookup_is_documented():
    lookups = names("lookup_plugins")
    assert sorted(ansible_doc("lookup", lookups)) == lookups


def test_every_inventory_plugin_is_documented():
    plugins = names("inventory_plugins")
    found = ansible_doc("inventory", plugins)
    assert sorted(found) == plugins
    for name, entry in found.items():
        assert entry["doc"]["options"]["plugin"]["choices"] == [name] and entry["examples"], name
