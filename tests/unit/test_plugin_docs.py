"""Every module's, lookup's and filter's documentation parses (ansible-doc reads it), so `ansible-doc` works for all
of them, each with its examples and what it returns.

A ': ' inside a plain YAML scalar once broke four of them without any test noticing."""

import importlib
import inspect
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


def test_every_lookup_is_documented_with_examples_and_return():
    lookups = names("lookup_plugins")
    found = ansible_doc("lookup", lookups)
    assert sorted(found) == lookups
    for name, entry in found.items():
        assert entry["doc"]["short_description"] and entry["examples"] and entry["return"], name


def filters():
    """Every filter filter_plugins/ defines, by name: its function."""
    found = {}
    for plugin in names("filter_plugins"):
        found.update(importlib.import_module(plugin).FilterModule().filters())
    return found


def test_every_filter_is_documented_with_examples_and_return():
    """A filter is documented by filter_plugins/<its name>.yml (a file defines several filters, so its docs cannot be
    in it): ansible-doc -t filter -l lists none as UNDOCUMENTED, and each shows its examples."""
    defined = filters()
    doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    listing = subprocess.run([doc, "-t", "filter", "-l", "--json"], cwd=ROOT, capture_output=True, text=True,
                             check=True, timeout=120)
    listed = json.loads(listing.stdout)
    undocumented = [name for name in defined if listed.get(f"ansible.legacy.{name}", "UNDOCUMENTED") == "UNDOCUMENTED"]
    assert not undocumented
    yml = sorted(f[:-4] for f in os.listdir(os.path.join(ROOT, "filter_plugins")) if f.endswith(".yml"))
    assert yml == sorted(defined), "a filter_plugins/<name>.yml for each filter, and none for a filter that is gone"
    found = ansible_doc("filter", sorted(defined))
    assert sorted(found) == sorted(defined)
    for name, entry in found.items():
        assert entry["doc"]["short_description"] and entry["examples"] and entry["return"], name
        # The documented arguments are the function's: the input is its first, the options the others by name.
        options = entry["doc"].get("options") or {}
        params = list(inspect.signature(defined[name]).parameters.values())
        assert "_input" in options, name
        assert set(options) - {"_input"} == {p.name for p in params[1:]}, name
        required = {p.name for p in params[1:] if p.default is inspect.Parameter.empty}
        assert required <= {k for k, v in options.items() if v.get("required")}, name


def test_every_inventory_plugin_is_documented():
    plugins = names("inventory_plugins")
    found = ansible_doc("inventory", plugins)
    assert sorted(found) == plugins
    for name, entry in found.items():
        assert entry["doc"]["options"]["plugin"]["choices"] == [name] and entry["examples"], name
