"""Filters for regression suites (suites/<name>.yaml)."""

import os
import re

from ansible.errors import AnsibleFilterError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SuiteError(Exception):
    """A bad suite file; str() is one line naming the suite and what is wrong."""


def load_suite(name, suites_dir):
    """The entries of suites/<name>.yaml, checked: [{name, spec, overrides}]."""
    import yaml

    if not _NAME.match(str(name)):
        raise SuiteError(f"suite {name!r}: a suite name is letters, digits and ._-")
    path = os.path.join(suites_dir, f"{name}.yaml")
    if not os.path.isfile(path):
        have = sorted(f[:-5] for f in os.listdir(suites_dir) if f.endswith(".yaml")) if os.path.isdir(suites_dir) else []
        raise SuiteError(f"suite {name!r}: no {path} (suites: {', '.join(have) or 'none'})")
    with open(path, encoding="utf-8") as handle:
        try:
            data = yaml.safe_load(handle)
        except yaml.YAMLError as exc:
            raise SuiteError(f"suite {name!r}: invalid YAML in {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or set(data) != {"entries"} or not isinstance(data["entries"], list):
        raise SuiteError(f"suite {name!r}: {path} must hold exactly one key, `entries`, a list")
    entries, seen = [], set()
    for i, entry in enumerate(data["entries"]):
        where = f"suite {name!r} entry {i + 1}"
        if not isinstance(entry, dict) or not {"name", "spec"} <= set(entry) or set(entry) - {"name", "spec", "overrides"}:
            raise SuiteError(f"{where}: needs name and spec (and optional overrides), got {entry!r}")
        if not _NAME.match(str(entry["name"])) or entry["name"] in seen:
            raise SuiteError(f"{where}: name {entry['name']!r} must be unique, letters, digits and ._-")
        if not isinstance(entry.get("overrides", {}), dict):
            raise SuiteError(f"{where}: overrides must be a mapping of field: value")
        seen.add(entry["name"])
        entries.append({"name": str(entry["name"]), "spec": str(entry["spec"]),
                        "overrides": {str(k): v for k, v in (entry.get("overrides") or {}).items()}})
    if not entries:
        raise SuiteError(f"suite {name!r}: no entries")
    return entries


def regression_suite(name, suites_dir):
    try:
        return load_suite(name, suites_dir)
    except SuiteError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"regression_suite": regression_suite}
