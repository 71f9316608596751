"""Each module's argument spec and its DOCUMENTATION options agree (issue 19, point 3: one home per fact).

The spec is the one the module really builds: main() runs until it constructs AnsibleModule, whose
__init__ is replaced to capture its arguments and stop. The documentation is read as ansible-doc reads
it (ansible.utils.plugin_docs.get_docstring), with the project's doc fragments (doc_fragments/) merged.
For every option both must have it, with the same type, default, choices, required, elements (lists),
aliases and suboptions (recursively); an option whose name looks secret (validate-modules' rule) sets
no_log explicitly. A failure lists one line per difference, naming the module and the option.

Every module also supports check mode, says so in its attributes, and its DOCUMENTATION, EXAMPLES and
RETURN parse as YAML.

A module whose file is only its documentation (verl_import, whose action plugin does all of its work, as Ansible's
debug does) has no main(): its documented options are compared with its action plugin's ARGUMENT_SPEC instead.
"""

import importlib
import importlib.util
import inspect
import json
import os
import re

import pytest
import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.parameters import DEFAULT_TYPE_VALIDATORS
from ansible.plugins.loader import fragment_loader
from ansible.utils.plugin_docs import get_docstring

from plugin_utils import PROJECT_ROOT

ROOT = PROJECT_ROOT
MODULES = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "library")) if f.endswith(".py"))

# Documented options the action plugin of the same name handles on the control host and never passes
# on: their description starts with this.
ACTION_ONLY = "(action)"
# (module, option): why the module takes an option its DOCUMENTATION does not list. Keep it small.
UNDOCUMENTED = {}
# validate-modules' rule: an option named like a secret says explicitly whether it is one.
SECRET_LOOKING = re.compile(r"(?:pass(?!ive)|secret|token|key)", re.IGNORECASE)

INIT = inspect.signature(AnsibleModule.__init__)


class Built(Exception):
    """Raised by the captured AnsibleModule.__init__, carrying its arguments."""

    def __init__(self, kwargs):
        super().__init__("AnsibleModule built")
        self.kwargs = kwargs


def doc_only(name):
    """Whether library/<name>.py is only documentation (no main()), its work all in action_plugins/<name>.py."""
    return not hasattr(importlib.import_module(name), "main")


def action_argument_spec(name):
    path = os.path.join(ROOT, "action_plugins", f"{name}.py")
    assert os.path.exists(path), f"{name}: a module of documentation only needs its action plugin, {path}"
    spec = importlib.util.spec_from_file_location(f"action_{name}", path)
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    return action.ARGUMENT_SPEC


def module_arguments(name, monkeypatch):
    """The keyword arguments main() gives AnsibleModule (argument_spec, supports_check_mode, ...)."""

    def capture(self, *args, **kwargs):
        bound = INIT.bind(self, *args, **kwargs)
        raise Built({k: v for k, v in bound.arguments.items() if k != "self"})

    monkeypatch.setattr(AnsibleModule, "__init__", capture)
    module = importlib.import_module(name)
    with pytest.raises(Built) as built:
        module.main()
    return built.value.kwargs


def documentation(name):
    """DOCUMENTATION with the doc fragments merged, as plain data (ansible's tagged types untagged)."""
    fragment_loader.add_directory(os.path.join(ROOT, "doc_fragments"))
    doc, _examples, _returns, _metadata = get_docstring(os.path.join(ROOT, "library", f"{name}.py"),
                                                        fragment_loader, is_module=True)
    return json.loads(json.dumps(doc))


def normal(kind, value):
    """A value as the module would see it after Ansible's type conversion (0 and 0.0 for a float agree)."""
    check = DEFAULT_TYPE_VALIDATORS.get(kind)
    if value is None or check is None:
        return value
    try:
        return check(value)
    except (TypeError, ValueError):
        return value


def differences(module, spec, docs, where=""):
    """One line per way the spec's options (`spec`) and the documented options (`docs`) differ."""
    found = []
    for option in sorted(set(spec) | set(docs)):
        name = f"{module}: option {where}{option}"
        if option not in docs:
            if (module, where + option) not in UNDOCUMENTED:
                found.append(f"{name}: in the argument spec, not in DOCUMENTATION")
            continue
        doc = docs[option]
        description = " ".join(doc.get("description") or []) if isinstance(doc.get("description"), list) \
            else str(doc.get("description") or "")
        action_only = not where and description.startswith(ACTION_ONLY)
        if option not in spec:
            if not action_only:
                found.append(f"{name}: in DOCUMENTATION, not in the argument spec (and not {ACTION_ONLY} only)")
            continue
        arg = spec[option]
        if action_only:
            found.append(f"{name}: documented as {ACTION_ONLY} only, yet in the argument spec")
        kind, doc_kind = arg.get("type", "str"), doc.get("type", "str")
        if kind != doc_kind:
            found.append(f"{name}: type {kind!r} in the argument spec, {doc_kind!r} in DOCUMENTATION")
        default, doc_default = normal(kind, arg.get("default")), normal(kind, doc.get("default"))
        if default != doc_default or type(default) is not type(doc_default):
            found.append(f"{name}: default {arg.get('default')!r} in the argument spec, "
                         f"{doc.get('default')!r} in DOCUMENTATION")
        if bool(arg.get("required")) != bool(doc.get("required")):
            found.append(f"{name}: required {bool(arg.get('required'))} in the argument spec, "
                         f"{bool(doc.get('required'))} in DOCUMENTATION")
        choices = sorted(str(normal(kind, c)) for c in arg.get("choices") or [])
        doc_choices = sorted(str(normal(kind, c)) for c in doc.get("choices") or [])
        if choices != doc_choices:
            found.append(f"{name}: choices {choices} in the argument spec, {doc_choices} in DOCUMENTATION")
        if arg.get("elements") != doc.get("elements"):
            found.append(f"{name}: elements {arg.get('elements')!r} in the argument spec, "
                         f"{doc.get('elements')!r} in DOCUMENTATION")
        if kind == "list" and not arg.get("elements"):
            found.append(f"{name}: a list without elements")
        if sorted(arg.get("aliases") or []) != sorted(doc.get("aliases") or []):
            found.append(f"{name}: aliases {sorted(arg.get('aliases') or [])} in the argument spec, "
                         f"{sorted(doc.get('aliases') or [])} in DOCUMENTATION")
        if SECRET_LOOKING.search(option) and "no_log" not in arg:
            found.append(f"{name}: named like a secret but the argument spec does not set no_log (True or False)")
        if arg.get("options") or doc.get("suboptions"):
            found += differences(module, arg.get("options") or {}, doc.get("suboptions") or {}, f"{where}{option}.")
    return found


@pytest.mark.parametrize("name", MODULES)
def test_argument_spec_matches_documentation(name, monkeypatch):
    spec = action_argument_spec(name) if doc_only(name) else module_arguments(name, monkeypatch)["argument_spec"]
    found = differences(name, spec, documentation(name).get("options") or {})
    if found:
        pytest.fail("\n".join(found), pytrace=False)


@pytest.mark.parametrize("name", MODULES)
def test_module_supports_check_mode_and_documents_it(name, monkeypatch):
    if not doc_only(name):  # an action plugin of its own reads the task's check mode itself
        assert module_arguments(name, monkeypatch).get("supports_check_mode") is True, name
    support = ((documentation(name).get("attributes") or {}).get("check_mode") or {}).get("support")
    assert support in ("full", "partial"), f"{name}: attributes.check_mode.support is {support!r}"


@pytest.mark.parametrize("name", MODULES)
def test_documentation_examples_and_return_are_yaml(name):
    module = importlib.import_module(name)
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert isinstance(doc, dict) and doc["module"] == name and doc["short_description"], name
    returns = yaml.safe_load(module.RETURN)
    assert isinstance(returns, dict) and all(isinstance(v, dict) and v.get("description") for v in returns.values()), \
        name
    examples = yaml.safe_load(module.EXAMPLES)
    assert isinstance(examples, list) and examples, name
    options = documentation(name).get("options") or {}
    used = [task for task in examples if name in task]
    assert used, f"{name}: no example uses the module"
    for task in used:
        unknown = sorted(set(task[name] or {}) - set(options))
        assert not unknown, f"{name}: example {task.get('name')!r} uses undocumented options {unknown}"
