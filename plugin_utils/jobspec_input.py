"""Input of a job, read on the control host: spec files, suites, site defaults and -e values.

The ray_job action plugin is the only code that reads this run's extra vars; it hands them here
as data (never templated) and gets back a validated JobSpec for the module on the head.
"""

import difflib
import json
import os
import re

from ansible.module_utils.base import conventions, redaction
from ansible.module_utils.base.model import ABSENT, expect, join_path
from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.jobspec.fields import SPEC_FIELDS, TRAINERS, JobSpecError
from ansible.module_utils.regression import gates as regression_gates

# Extra vars that steer the playbooks rather than describe the job.
PLAYBOOK_KNOBS = frozenset({"spec", "wait", "poll_s", "force", "id", "do", "preflight", "suite", "run_id", "state",
                            "script", "command", "submitter"})
# Knobs of other playbooks that a submit would otherwise ignore, and what to use instead.
MISPLACED_KNOBS = {"id": "use -e submission_id=ID", "run_id": "it names a regression run (regression.yml)",
                   "do": "it is job.yml's (-e id=ID -e do=...)"}
# Inventory-style variables a user may pass with -e; they are not JobSpec fields.
_KNOWN_PREFIXES = ("ansible_", "ray_", "shared_root_", "jobspec_", "code_snapshot_", "regression_")


SPEC_FIELD_NAMES = frozenset(f.name for f in SPEC_FIELDS)


def list_specs(specs_dir) -> list:
    """Names of the spec files in specs_dir."""
    try:
        files = os.listdir(specs_dir)
    except OSError:
        return []
    return sorted(f[:-5] for f in files if f.endswith(".yaml") and conventions.matches(conventions.NAME_RULE, f[:-5]))


def find_spec_file(name, specs_dir) -> str:
    """Path of <specs_dir>/<name>.yaml; the error lists the names that exist."""
    if not conventions.matches(conventions.NAME_RULE, name):
        raise JobSpecError("spec", f"must be a spec name: {conventions.NAME_RULE[1]}", name)
    path = os.path.join(specs_dir, name + ".yaml")
    if not os.path.isfile(path):
        available = ", ".join(list_specs(specs_dir)) or "none"
        raise JobSpecError("spec", f"no such spec in {specs_dir} (available: {available})", name)
    return path


def load_spec_file(path) -> dict:
    """Parse a spec file; YAML errors become JobSpecError with the file and line."""
    from plugin_utils import safe_yaml  # lazily: hosts that only run the Ansible module need no PyYAML

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise JobSpecError("spec", f"cannot read the spec file {path} ({err.strerror})", ABSENT) from None
    except UnicodeDecodeError:
        raise JobSpecError("spec", f"the spec file {path} is not UTF-8 text", ABSENT) from None
    try:
        data = safe_yaml.load_text(text, path)  # aliases, depth, duplicate keys, numbers: see safe_yaml
    except safe_yaml.YamlError as err:  # one line: the file, the line, the problem (never a value)
        raise JobSpecError("spec", f"invalid YAML in {err}", str(path)) from None
    if not isinstance(data, dict):
        raise JobSpecError("spec", f"{path}: the top level must be a mapping of fields", data)
    return data


def _lookup(fields, key, path, value):
    for f in fields:
        if f.name == key:
            return f
    close = difflib.get_close_matches(key, [f.name for f in fields], n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise JobSpecError(path, f"unknown field{hint}", ABSENT)


def _coerce(f, value, path):
    """Convert one -e string to the type of field f (other types pass through)."""
    if not isinstance(value, str):
        return value
    kind = f.kind
    if f.nullable and value == "null":
        return None
    if kind in ("str", "path"):
        return value
    if kind == "bool" and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if kind == "int" and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        return int(value)
    if kind == "number":
        try:
            return int(value) if re.fullmatch(r"\s*[+-]?[0-9]+\s*", value) else float(value)
        except ValueError:
            pass
    if kind in ("paths", "list") and not value.lstrip().startswith("["):
        return value if kind == "paths" else [value]
    if kind in ("paths", "list", "map", "object"):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, list if kind in ("paths", "list") else dict):
            return parsed
        raise JobSpecError(path, f"must be JSON text of {expect(f)}", value)
    raise JobSpecError(path, f"must be {expect(f)}", value)


def coerce_cli_overrides(raw) -> dict:
    """Turn -e key=value pairs (string values) into a nested, typed override layer.

    Dotted keys reach nested fields (resources.nnodes=2) and map entries (env.HF_HOME=/x).
    Dict, list and spec-object values are JSON text; "null" clears a nullable field.
    """
    if not isinstance(raw, dict):
        raise JobSpecError("cli", "must be a mapping of field=value", raw)
    out = {}
    for key, value in raw.items():
        parts = str(key).split(".")
        fields, node, path = SPEC_FIELDS, out, ""
        for i, part in enumerate(parts):
            path = join_path(path, part)
            f = _lookup(fields, part, path, value)
            rest = parts[i + 1:]
            if not rest:
                node[f.name] = _coerce(f, value, path)
                break
            if f.kind not in ("object", "map"):
                raise JobSpecError(str(key), f"'{path}' has no nested fields", value)
            node = node.setdefault(f.name, {})
            if not isinstance(node, dict):
                raise JobSpecError(str(key), f"'{path}' is also set as a whole", value)
            if f.kind == "map":
                # Map keys may contain dots (metadata.team.name): the rest is one key.
                entry = ".".join(rest)
                node[entry] = _coerce(f.item, value, join_path(path, entry))
                break
            fields = f.fields
    return out


def spec_overrides(extra_vars):
    """The -e values that are JobSpec fields; the rest steer the playbook or the inventory."""
    if "_raw_params" in extra_vars:
        # Ansible splits `-e key=two words` at the space and keeps the rest here.
        raise JobSpecError("-e", "is not key=value; quote a value with spaces, e.g. "
                           "-e 'entrypoint=\"echo hi\"'", extra_vars["_raw_params"])
    for knob, use in MISPLACED_KNOBS.items():
        # job.yml's and regression.yml's knobs mean nothing to a submit: dropping them would submit another id.
        if knob in extra_vars:
            raise JobSpecError(knob, f"is not a submit option: {use}", extra_vars[knob])
    return {k: v for k, v in extra_vars.items()
            if k not in PLAYBOOK_KNOBS and not k.startswith(_KNOWN_PREFIXES)}


def site_layer(site_defaults, workload):
    """The inventory's defaults for one workload: `all`, then `trainers` (ppo/grpo/sft), then its own."""
    layer = {}
    keys = ["all"] + (["trainers"] if workload in TRAINERS else []) + [workload]
    for key in keys:
        part = (site_defaults or {}).get(key) or {}
        if not isinstance(part, dict):
            raise JobSpecError(f"jobspec_defaults.{key}", "must be a mapping of jobspec fields", part)
        layer = jobspec.merge_layers(layer, part)
    return layer


def resolve_job(name, *, ray_config, specs_dir, site_defaults=None, overrides=None, extra_vars=None):
    """Load <specs_dir>/<name>.yaml and layer site defaults < file < overrides < -e: a JobSpec.

    overrides: field values (a suite entry's); extra_vars: this run's -e values, as Ansible parsed
    them (knobs and inventory names are left out). Raises JobSpecError naming one bad field.
    """
    cli = coerce_cli_overrides(overrides or {})
    cli = jobspec.merge_layers(cli, coerce_cli_overrides(spec_overrides(extra_vars or {})))
    spec_file = load_spec_file(find_spec_file(str(name), specs_dir))
    workload = cli.get("workload", spec_file.get("workload"))
    return jobspec.resolve(spec_file, name=str(name), ray_config=ray_config,
                           site_defaults=site_layer(site_defaults, workload), cli=cli)


class SuiteError(Exception):
    """A bad suite file; str() is one line naming the suite and what is wrong."""


def load_suite(name, suites_dir):
    """The entries of suites/<name>.yaml, checked: [{name, spec, overrides}]."""
    from plugin_utils import safe_yaml

    if not conventions.matches(conventions.NAME_RULE, str(name)):
        raise SuiteError(f"suite: a suite name is {conventions.NAME_RULE[1]}")
    path = os.path.join(suites_dir, f"{name}.yaml")
    if not os.path.isfile(path):
        listed = os.listdir(suites_dir) if os.path.isdir(suites_dir) else []
        have = sorted(f[:-5] for f in listed if f.endswith(".yaml"))
        raise SuiteError(f"suite {name!r}: no {path} (suites: {', '.join(have) or 'none'})")
    try:
        data = safe_yaml.load_file(path)  # the spec files' limits: aliases, depth, duplicate keys, numbers
    except safe_yaml.YamlError as exc:
        raise SuiteError(f"suite {name!r}: invalid YAML in {exc}") from None
    if not isinstance(data, dict) or set(data) != {"entries"} or not isinstance(data["entries"], list):
        raise SuiteError(f"suite {name!r}: {path} must hold exactly one key, `entries`, a list")
    entries, seen = [], {}
    for i, entry in enumerate(data["entries"]):
        where = f"suite {name!r} entry {i + 1}"
        _check_entry_keys(entry, where)
        if not conventions.matches(conventions.NAME_RULE, str(entry["name"])):
            raise SuiteError(f"{where}: name must be {conventions.NAME_RULE[1]}")
        if str(entry["name"]) in seen:
            raise SuiteError(f"{where}: name must be unique (entry {seen[str(entry['name'])]} has it too)")
        if not isinstance(entry.get("overrides", {}), dict):
            raise SuiteError(f"{where}: overrides must be a mapping of field: value")
        for key in entry.get("overrides") or {}:
            # Only JobSpec fields: spec, wait and ray_* steer the run, and a suite entry must not retarget it.
            if str(key).split(".")[0] not in SPEC_FIELD_NAMES:
                close = difflib.get_close_matches(str(key).split(".")[0], SPEC_FIELD_NAMES, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise SuiteError(f"{where}: overrides key {conventions.one_line(key, 100)!r} is not a jobspec field"
                                 f"{hint} (spec, wait, poll_s and ray_* are not overrides)")
        try:
            gates = regression_gates.check_gates(entry.get("gates"), f"{where} gates")
        except regression_gates.GateError as exc:
            raise SuiteError(str(exc)) from None
        seen[str(entry["name"])] = i + 1
        entries.append({"name": str(entry["name"]), "spec": str(entry["spec"]),
                        "overrides": {str(k): v for k, v in (entry.get("overrides") or {}).items()},
                        "gates": gates})
    if not entries:
        raise SuiteError(f"suite {name!r}: no entries")
    return entries


def suite_entry(suite, entry, suites_dir):
    """The entry named `entry` of suites/<suite>.yaml, with its overrides as written (secrets included)."""
    entries = load_suite(suite, suites_dir)
    for found in entries:
        if found["name"] == entry:
            return found
    raise SuiteError(f"suite {suite!r}: no entry of that name (entries: {', '.join(e['name'] for e in entries)})")


ENTRY_KEYS = ("name", "spec", "overrides", "gates")


def _check_entry_keys(entry, where):
    """A suite entry is a mapping with name and spec, and optional overrides and gates. The error names the keys
    (a misspelled one with the key it resembles), never a value: an entry's overrides may hold secrets."""
    if not isinstance(entry, dict):
        raise SuiteError(f"{where}: must be a mapping with name and spec (and optional overrides and gates)")
    for key in entry:
        if key not in ENTRY_KEYS:
            close = difflib.get_close_matches(str(key), ENTRY_KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise SuiteError(f"{where}: unknown key {conventions.one_line(key, 100)!r}{hint} (an entry needs name and "
                             "spec, and may have overrides and gates)")
    missing = [key for key in ("name", "spec") if key not in entry]
    if missing:
        raise SuiteError(f"{where}: needs name and spec (and optional overrides and gates): "
                         f"no {' and no '.join(missing)}")


def shown_entries(entries, secret_names):
    """Suite entries as Ansible may show and keep them: secret env values in overrides redacted
    (whether written as env: {NAME: value} or as a dotted env.NAME: value)."""
    shown = []
    for entry in entries:
        overrides = {}
        for key, value in entry["overrides"].items():
            if key.startswith("env.") and redaction.is_secret_name(key[4:], secret_names):
                overrides[key] = redaction.REDACTED
            else:
                # env may also be JSON text (coerced later): shown whole as redacted, it hides what it holds.
                overrides[key] = (value if key != "env" else redaction.redact(value, secret_names)
                                  if isinstance(value, dict) else redaction.REDACTED)
        shown.append({**entry, "overrides": overrides})
    return shown
