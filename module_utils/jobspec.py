"""The one model of a JobSpec: what a verl job on the Ray cluster is, and how it is submitted.

A spec file (jobspecs/<name>.yaml) is merged with site defaults and -e overrides, validated,
and rendered into a Ray job: entrypoint, runtime_env and entrypoint resources.

The Ansible module imports this file as ansible.module_utils.jobspec and Ansible ships it to
the host that submits, so only the standard library is imported at module level (PyYAML is
imported where a file is parsed). Filter plugins and the CLI import it as plain `jobspec`.

Every field is defined once, in the tables below; validation, -e coercion and the JSON Schema
(jobspec.schema.json) are all derived from them.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import json
import math
import os
import posixpath
import re
import secrets
import shlex

WORKLOADS = ("ppo", "grpo", "sft", "smoke", "command")
# Workloads rendered as verl trainers: they need a model and training data.
TRAINERS = ("ppo", "grpo", "sft")
TRAINER_REQUIRED = ("model_path", "train_files")
DEFAULT_SECRET_ENV_NAMES = ("WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "RAY_AUTH_TOKEN")
REDACTED = "<redacted>"

# (regex, what a valid value looks like). Anchored, used with re.fullmatch here and as JSON
# Schema patterns, so both accept the same strings.
_ID = (r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
       "1-128 letters, digits or ._- starting with a letter or digit")
# Shorter than an id, so <name>-<time>-<hex> always makes a valid default id.
_NAME = (r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
         "1-100 letters, digits or ._- starting with a letter or digit (no path separators)")
# Paths and names go unquoted into hydra overrides and PYTHONPATH: no , = : spaces or quotes.
_PATH = (r"^/[A-Za-z0-9._/+@-]*$", "an absolute path of letters, digits and ._-/+@")
_LABEL = (r"^[A-Za-z0-9._-]+$", "a name of letters, digits or ._-")
_ENV_NAME = (r"^[A-Za-z_][A-Za-z0-9_]*$",
             "an environment variable name (letters, digits and _, not starting with a digit)")
_OVERRIDE = (r"^[^=\s][^=]*=.*$", "a hydra override 'key=value' with a non-empty key")
_COMMAND = (r"^\s*\S[\s\S]*$", "a non-empty command")
_HOST = r"([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])"
_HOSTPORT = (rf"^{_HOST}:[0-9]{{1,5}}$", "host:port")
_URL = (rf"^https?://{_HOST}(:[0-9]{{1,5}})?/?$", "a URL http://host:port")


class JobSpecError(ValueError):
    """A bad JobSpec input; str() is one line naming the field and the bad value."""

    def __init__(self, field, problem, value):
        self.field = field
        self.value = value
        shown = repr(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"jobspec field '{_one_line(field)}': {_one_line(problem)}, got {shown}")


def _one_line(text):
    return " ".join(str(text).split())


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a spec or of the ray config: its type, constraints, default and doc.

    kinds: str, int, number, path, paths (a path or a list of paths), list (of `item`),
    map (keys match `pattern`, values are `item`), object (nested `fields`), mapping (free-form).
    """

    name: str
    kind: str
    doc: str = ""
    default: object = None  # a static default; derived defaults are filled by resolve()
    nullable: bool = False  # null is a valid value, meaning "not set"
    required: bool = False  # must be given: no default of any kind
    minimum: float = 0
    exclusive: bool = False  # minimum itself is not allowed
    pattern: tuple | None = None  # (regex, description) for str values or map keys
    choices: tuple = ()
    item: Field | None = None
    fields: tuple = ()


_STRING = Field("", "str")
_POSITIVE = Field("", "number", minimum=0, exclusive=True)

SPEC_FIELDS = (
    Field("submission_id", "str", "Ray submission id and job directory name; "
          "default <name>-<UTC YYYYmmddTHHMMSSZ>-<6 hex digits>.", pattern=_ID),
    Field("workload", "str", "What to run.", choices=WORKLOADS, required=True),
    Field("entrypoint", "str", "Shell command of a 'command' job (required there); "
          "the other workloads are rendered and must not set it.", pattern=_COMMAND, nullable=True),
    Field("resources", "object", "What the job needs from the cluster.", fields=(
        Field("nnodes", "int", "Nodes the trainer uses (trainer.nnodes).", default=1, minimum=1),
        Field("n_gpus_per_node", "int", "GPUs per node the trainer uses (trainer.n_gpus_per_node).",
              default=0),
        Field("entrypoint_num_cpus", "number", "CPUs reserved for the driver.", default=0),
        Field("entrypoint_num_gpus", "number", "GPUs reserved for the driver.", default=0),
        Field("entrypoint_memory", "int", "Memory in bytes reserved for the driver.", default=0),
        Field("entrypoint_resources", "map", "Custom resources the driver needs; default "
              "ray_config.entrypoint_resources (keeps the driver off the head).", item=_POSITIVE),
    )),
    Field("shared_root", "path", "Shared storage root, the same path on every node; "
          "default ray_config.shared_root."),
    Field("code_id", "str", "Code snapshot to run: code_path becomes "
          "<shared_root>/common/code/verl/<code_id>. Set code_id or code_path, not both.",
          pattern=_ID, nullable=True),
    Field("code_path", "path", "Directory put first on PYTHONPATH (e.g. a verl checkout); "
          "default for smoke: <shared_root>/common/code/smoke.", nullable=True),
    Field("model_path", "path", "Model directory; required for ppo, grpo and sft.", nullable=True),
    Field("train_files", "paths", "Training parquet file(s); required for ppo, grpo and sft.",
          nullable=True, item=Field("", "path")),
    Field("val_files", "paths", "Validation parquet file(s).", nullable=True, item=Field("", "path")),
    Field("output_dir", "path", "Job directory, under shared_root; "
          "default <shared_root>/jobs/<submission_id>."),
    Field("checkpoint_dir", "path", "Checkpoint directory (trainer.default_local_dir); "
          "default <output_dir>/checkpoints."),
    Field("save_freq", "int", "Save a checkpoint every N steps.", default=10, minimum=1),
    Field("total_training_steps", "int", "Stop after N steps (trainer.total_training_steps).",
          minimum=1, nullable=True),
    Field("total_epochs", "int", "Stop after N epochs (trainer.total_epochs).", minimum=1,
          nullable=True),
    Field("timeouts", "object", "How long the job may wait and run.", fields=(
        Field("pending_s", "int", "Seconds the job may wait for resources before it is stopped.",
              default=600, minimum=1),
        Field("max_run_s", "int", "Seconds the job may run before it is stopped; null: no limit.",
              minimum=1, nullable=True),
    )),
    Field("env", "map", "Environment variables of the job; they win over "
          "ray_config.runtime_env.env_vars.", default={}, pattern=_ENV_NAME, item=_STRING),
    Field("overrides", "list", "Extra hydra overrides for ppo/grpo/sft, appended last so they win. "
          "Lists from site defaults, the spec and -e are concatenated in that order.",
          default=[], item=Field("", "str", pattern=_OVERRIDE)),
    Field("reward_fn_path", "path", "Python file with a custom reward function "
          "(custom_reward_function.path; ppo and grpo).", nullable=True),
    Field("project_name", "str", "trainer.project_name.", default="verl-ray", pattern=_LABEL),
    Field("experiment_name", "str", "trainer.experiment_name; default the submission id.",
          pattern=_LABEL),
    Field("metadata", "map", "Free-form string labels kept with the job.", default={},
          item=_STRING),
)

_ENV_VARS = Field("env_vars", "map", pattern=_ENV_NAME, item=_STRING)

RAY_CONFIG_FIELDS = (
    Field("address", "str", "GCS address.", pattern=_HOSTPORT, required=True),
    Field("dashboard_url", "str", "Dashboard (job API) URL.", pattern=_URL, required=True),
    Field("shared_root", "path", "Shared storage root.", default="/private"),
    Field("entrypoint_resources", "map", "Default custom resources of a job's driver.",
          default={"worker_node": 1}, item=_POSITIVE),
    Field("runtime_env", "mapping", "Base runtime_env of every job (no working_dir).", default={}),
    Field("secret_env_names", "list", "Env names whose values are never written out.",
          default=list(DEFAULT_SECRET_ENV_NAMES), item=Field("", "str", pattern=_ENV_NAME)),
    Field("python", "str", "Command the rendered entrypoints start with.", default="python",
          pattern=_COMMAND),
)

_NAME_FIELD = Field("name", "str", pattern=_NAME)


# ---------------------------------------------------------------- validation from the tables


def _join(path, name):
    return f"{path}.{name}" if path else str(name)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _matches(pattern, value):
    return isinstance(value, str) and re.fullmatch(pattern[0], value) is not None


def _expect(f):
    """How an error message describes a valid value of field f."""
    kind = f.kind
    if kind == "int":
        text = "a positive integer" if f.minimum >= 1 else "a non-negative integer"
    elif kind == "number":
        text = "a number > 0" if f.exclusive else "a number >= 0"
    elif kind == "str":
        text = ("one of " + ", ".join(f.choices) if f.choices
                else f.pattern[1] if f.pattern else "a string")
    elif kind == "path":
        text = _PATH[1]
    elif kind == "paths":
        text = f"{_PATH[1]}, or a non-empty list of them"
    elif kind == "list":
        text = f"a list, each item {_expect(f.item)}"
    elif kind == "map":
        text = f"a mapping, each value {_expect(f.item)}"
    else:
        text = "a mapping"
    return text + " or null" if f.nullable else text


def _check(f, value, path, complete=True):
    """Return value normalised (paths cleaned, containers copied); raise JobSpecError if bad.

    complete: absent fields of nested objects count as null (see _check_fields).
    """
    if value is None and f.nullable:
        return None
    kind = f.kind
    if kind == "object":
        return _check_fields(f.fields, value, path, complete=complete)
    if kind == "int" and _is_int(value) and value >= f.minimum:
        return value
    if kind == "number" and _is_number(value) and (
            value > f.minimum if f.exclusive else value >= f.minimum):
        return value
    if kind == "str" and isinstance(value, str) and (not f.choices or value in f.choices) and (
            not f.pattern or _matches(f.pattern, value)):
        return value
    if kind in ("path", "paths") and _matches(_PATH, value):
        # normpath keeps a leading "//" (POSIX allows it); one "/" is what we compare against.
        return "/" + posixpath.normpath(value).lstrip("/")
    if kind == "paths" and isinstance(value, list) and value:
        return [_check(f.item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "list" and isinstance(value, list):
        return [_check(f.item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or not key or (f.pattern and not _matches(f.pattern, key)):
                what = f.pattern[1] if f.pattern else "a non-empty string"
                raise JobSpecError(_join(path, key), f"the name must be {what}", key)
        return {key: _check(f.item, v, _join(path, key)) for key, v in value.items()}
    if kind == "mapping" and isinstance(value, dict):
        return copy.deepcopy(value)
    raise JobSpecError(path, f"must be {_expect(f)}", value)


def _check_fields(fields, value, path, *, complete):
    """Check a mapping against a field table; with complete, absent fields count as null."""
    if not isinstance(value, dict):
        raise JobSpecError(path or "spec", "must be a mapping", value)
    known = {f.name: f for f in fields}
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise JobSpecError(_join(path, key), f"unknown field{hint}", value[key])
    out = {}
    for f in fields:
        if f.name in value:
            out[f.name] = _check(f, value[f.name], _join(path, f.name), complete)
        elif complete:
            if f.required:
                raise JobSpecError(_join(path, f.name), f"is required ({_expect(f)})", None)
            out[f.name] = _check(f, None, _join(path, f.name), complete)
    return out


def _fill_static(values, fields):
    """Add the static defaults of absent fields (nested objects included), in place."""
    for f in fields:
        if f.kind == "object":
            values[f.name] = _fill_static(values.get(f.name) or {}, f.fields)
        elif f.name not in values and f.default is not None:
            values[f.name] = copy.deepcopy(f.default)
    return values


# ---------------------------------------------------------------------------- the models


@dataclasses.dataclass(frozen=True)
class RayConfig:
    """What jobs need to know about the cluster (inventory group_vars `ray_config`)."""

    address: str
    dashboard_url: str
    shared_root: str
    entrypoint_resources: dict
    runtime_env: dict
    secret_env_names: list
    python: str

    @classmethod
    def from_dict(cls, data) -> RayConfig:
        if not isinstance(data, dict):
            raise JobSpecError("ray_config", "must be a mapping", data)
        values = _check_fields(RAY_CONFIG_FIELDS, _fill_static(dict(data), RAY_CONFIG_FIELDS),
                               "ray_config", complete=True)
        runtime_env = values["runtime_env"]
        if "working_dir" in runtime_env:
            # Jobs import code from shared storage (PYTHONPATH), never from an uploaded copy.
            raise JobSpecError("ray_config.runtime_env.working_dir",
                               "is not allowed: code comes from code_path on shared storage",
                               runtime_env["working_dir"])
        if "env_vars" in runtime_env:
            _check(_ENV_VARS, runtime_env["env_vars"], "ray_config.runtime_env.env_vars")
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Resources:
    nnodes: int
    n_gpus_per_node: int
    entrypoint_num_cpus: float
    entrypoint_num_gpus: float
    entrypoint_memory: int
    entrypoint_resources: dict


@dataclasses.dataclass(frozen=True)
class Timeouts:
    pending_s: int
    max_run_s: int | None


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A resolved, valid JobSpec. Build it with resolve() or from_dict(), not directly."""

    name: str
    submission_id: str
    workload: str
    entrypoint: str | None
    resources: Resources
    shared_root: str
    code_id: str | None
    code_path: str | None
    model_path: str | None
    train_files: str | list | None
    val_files: str | list | None
    output_dir: str
    checkpoint_dir: str
    save_freq: int
    total_training_steps: int | None
    total_epochs: int | None
    timeouts: Timeouts
    env: dict
    overrides: list
    reward_fn_path: str | None
    project_name: str
    experiment_name: str
    metadata: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data) -> JobSpec:
        """Rebuild and re-validate a resolved spec (the output of to_dict)."""
        if not isinstance(data, dict):
            raise JobSpecError("spec", "must be a mapping", data)
        data = dict(data)
        return _finish(data.pop("name", None), data)


def _code_id_path(shared_root, code_id):
    return posixpath.join(shared_root, "common", "code", "verl", code_id)


def _finish(name, data):
    """Validate a complete spec, check the rules between fields and build the JobSpec."""
    name = _check(_NAME_FIELD, name, "name")
    v = _check_fields(SPEC_FIELDS, data, "", complete=True)
    workload = v["workload"]
    if workload in TRAINERS:
        for key in TRAINER_REQUIRED:
            if v[key] is None:
                raise JobSpecError(key, f"is required for workload '{workload}'", None)
    if workload == "command" and v["entrypoint"] is None:
        raise JobSpecError("entrypoint", "is required for workload 'command'", None)
    if workload != "command" and v["entrypoint"] is not None:
        raise JobSpecError("entrypoint", f"is rendered for workload '{workload}'; "
                           "set it only for workload 'command'", v["entrypoint"])
    if v["code_id"] is not None and v["code_path"] != _code_id_path(v["shared_root"], v["code_id"]):
        raise JobSpecError("code_path", "must be <shared_root>/common/code/verl/<code_id> "
                           "when code_id is set (set one of them, not both)", v["code_path"])
    if not v["output_dir"].startswith(v["shared_root"].rstrip("/") + "/"):
        raise JobSpecError("output_dir", f"must be under shared_root {v['shared_root']}",
                           v["output_dir"])
    return JobSpec(name=name, **{**v, "resources": Resources(**v["resources"]),
                                 "timeouts": Timeouts(**v["timeouts"])})


def merge_layers(base, over):
    """Merge two layers of spec fields the way resolve() does (site defaults are built from several)."""
    return _merge(base, over)


def _merge(base, over, top=True):
    """Deep-merge mapping `over` into `base`; top-level overrides lists are concatenated."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _merge(old, value, top=False)
        elif top and key == "overrides" and isinstance(old, list) and isinstance(value, list):
            # Every layer's hydra overrides apply; hydra lets the last one win.
            out[key] = old + value
        else:
            out[key] = value
    return out


# datetime.UTC needs Python 3.11; the submitting host's Ray Python may be 3.10.
_UTC = datetime.timezone.utc  # noqa: UP017


def _default_id(name, now, token):
    now = now or datetime.datetime.now(_UTC)
    if now.tzinfo is not None:
        now = now.astimezone(_UTC)
    return f"{name}-{now:%Y%m%dT%H%M%SZ}-{token or secrets.token_hex(3)}"


def resolve(spec, *, name, ray_config, site_defaults=None, cli=None, now=None,
            token=None) -> JobSpec:
    """Merge site_defaults < spec < cli, validate, and fill every derived default.

    ray_config is the inventory's ray_config dict (or a RayConfig); cli is usually the
    output of coerce_cli_overrides. now and token fix the default submission id in tests.
    """
    rc = _as_ray_config(ray_config)
    name = _check(_NAME_FIELD, name, "name")
    merged = {}
    for label, layer in (("site_defaults", site_defaults or {}), ("spec", spec), ("cli", cli or {})):
        if not isinstance(layer, dict):
            raise JobSpecError(label, "must be a mapping of jobspec fields", layer)
        if "name" in layer:
            raise JobSpecError("name", "is the spec file name and cannot be set", layer["name"])
        merged = _merge(merged, layer)
    values = _fill_static(_check_fields(SPEC_FIELDS, merged, "", complete=False), SPEC_FIELDS)
    if values.get("code_id") is not None and values.get("code_path") is not None:
        raise JobSpecError("code_path", "cannot be set together with code_id (set one of them)",
                           values["code_path"])

    root = values.setdefault("shared_root", rc.shared_root)
    sid = values.setdefault("submission_id", _default_id(name, now, token))
    values["resources"].setdefault("entrypoint_resources", copy.deepcopy(rc.entrypoint_resources))
    output_dir = values.setdefault("output_dir", posixpath.join(root, "jobs", sid))
    values.setdefault("checkpoint_dir", posixpath.join(output_dir, "checkpoints"))
    values.setdefault("experiment_name", sid)
    if values.get("code_id") is not None:
        values["code_path"] = _code_id_path(root, values["code_id"])
    elif values.get("workload") == "smoke" and values.get("code_path") is None:
        values["code_path"] = posixpath.join(root, "common", "code", "smoke")
    return _finish(name, values)


# ------------------------------------------------------------------------ files and -e input


def list_specs(specs_dir) -> list:
    """Names of the spec files in specs_dir."""
    try:
        files = os.listdir(specs_dir)
    except OSError:
        return []
    return sorted(f[:-5] for f in files if f.endswith(".yaml") and _matches(_NAME, f[:-5]))


def find_spec_file(name, specs_dir) -> str:
    """Path of <specs_dir>/<name>.yaml; the error lists the names that exist."""
    if not _matches(_NAME, name):
        raise JobSpecError("spec", f"must be a spec name: {_NAME[1]}", name)
    path = os.path.join(specs_dir, name + ".yaml")
    if not os.path.isfile(path):
        available = ", ".join(list_specs(specs_dir)) or "none"
        raise JobSpecError("spec", f"no such spec in {specs_dir} (available: {available})", name)
    return path


def load_spec_file(path) -> dict:
    """Parse a spec file; YAML errors become JobSpecError with the file and line."""
    import yaml  # lazily: hosts that only run the Ansible module need no PyYAML

    class UniqueKeyLoader(yaml.SafeLoader):
        """SafeLoader keeps the last of two equal keys; a duplicate is a mistake here."""

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    if key_node.value in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key '{key_node.value}'", key_node.start_mark)
                    seen.add(key_node.value)
            return super().construct_mapping(node, deep)

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise JobSpecError("spec", f"cannot read the spec file ({err.strerror})", str(path)) from None
    except UnicodeDecodeError:
        raise JobSpecError("spec", "the spec file is not UTF-8 text", str(path)) from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise JobSpecError("spec", f"invalid YAML{where}: {problem}", str(path)) from None
    if not isinstance(data, dict):
        raise JobSpecError("spec", f"{path}: the top level must be a mapping of fields", data)
    return data


def _lookup(fields, key, path, value):
    for f in fields:
        if f.name == key:
            return f
    close = difflib.get_close_matches(key, [f.name for f in fields], n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise JobSpecError(path, f"unknown field{hint}", value)


def _coerce(f, value, path):
    """Convert one -e string to the type of field f (other types pass through)."""
    if not isinstance(value, str):
        return value
    kind = f.kind
    if f.nullable and value == "null":
        return None
    if kind in ("str", "path"):
        return value
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
        raise JobSpecError(path, f"must be JSON text of {_expect(f)}", value)
    raise JobSpecError(path, f"must be {_expect(f)}", value)


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
            path = _join(path, part)
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
                node[entry] = _coerce(f.item, value, _join(path, entry))
                break
            fields = f.fields
    return out


# -------------------------------------------------------------------------------- rendering


def _as_ray_config(ray_config):
    return ray_config if isinstance(ray_config, RayConfig) else RayConfig.from_dict(ray_config)


def _as_spec(spec):
    return spec if isinstance(spec, JobSpec) else JobSpec.from_dict(spec)


def _hydra_value(value):
    if isinstance(value, list):
        return "[" + ",".join(f"'{v}'" for v in value) + "]"
    return str(value)


def render_runtime_env(spec, ray_config) -> dict:
    """runtime_env of the job: the site's, plus job env vars and the code on PYTHONPATH.

    Never a working_dir: code is read from shared storage, so each job can pick its version.
    """
    spec, rc = _as_spec(spec), _as_ray_config(ray_config)
    runtime_env = copy.deepcopy(rc.runtime_env)
    env_vars = dict(runtime_env.get("env_vars", {}))
    if spec.workload == "sft":
        # sft_trainer_ray calls ray.init() itself; "auto" joins the cluster the job runs in.
        env_vars["RAY_ADDRESS"] = "auto"
    env_vars.update(spec.env)
    user_code = posixpath.join(spec.shared_root, "user", "code")
    env_vars["PYTHONPATH"] = ":".join(
        p for p in (spec.code_path, user_code, env_vars.get("PYTHONPATH")) if p)
    runtime_env["env_vars"] = {k: str(v) for k, v in env_vars.items()}
    return runtime_env


def _trainer_args(spec, rc):
    """The python -m arguments of a verl trainer, hydra overrides included."""
    env_vars = render_runtime_env(spec, rc)["env_vars"]
    loggers = ["console"] + (["wandb"] if "WANDB_API_KEY" in env_vars else [])
    if spec.workload == "sft":
        head = ["verl.trainer.sft_trainer_ray"]
        settings = [("model.path", spec.model_path)]
    else:
        estimator = "gae" if spec.workload == "ppo" else "grpo"
        head = ["verl.trainer.main_ppo", f"algorithm.adv_estimator={estimator}"]
        settings = [("actor_rollout_ref.model.path", spec.model_path)]
        if spec.workload == "ppo":
            settings.append(("critic.model.path", spec.model_path))
    settings = [("data.train_files", spec.train_files), ("data.val_files", spec.val_files),
                *settings,
                ("trainer.default_local_dir", spec.checkpoint_dir),
                ("trainer.save_freq", spec.save_freq),
                ("trainer.nnodes", spec.resources.nnodes),
                ("trainer.n_gpus_per_node", spec.resources.n_gpus_per_node),
                ("trainer.total_training_steps", spec.total_training_steps),
                ("trainer.total_epochs", spec.total_epochs),
                ("trainer.project_name", spec.project_name),
                ("trainer.experiment_name", spec.experiment_name),
                ("trainer.logger", loggers)]
    if spec.workload != "sft":
        settings.append(("custom_reward_function.path", spec.reward_fn_path))
    args = [f"{key}={_hydra_value(value)}" for key, value in settings if value is not None]
    return ["-m", *head, *args, *spec.overrides]


def render_entrypoint(spec, ray_config) -> str:
    """The shell command Ray runs as the job's driver."""
    spec, rc = _as_spec(spec), _as_ray_config(ray_config)
    if spec.workload == "command":
        command = spec.entrypoint
    else:
        if spec.workload == "smoke":
            args = ["-m", "smoke_probe", "--checkpoint-dir", spec.checkpoint_dir,
                    "--submission-id", spec.submission_id]
        else:
            args = _trainer_args(spec, rc)
        # rc.python is a command prefix from the site config (it may be "uv run python").
        command = f"{rc.python} {shlex.join(args)}"
    if spec.code_id is not None:
        # A code snapshot carries job_preflight: it checks, on the worker and before any work,
        # that verl is imported from the chosen snapshot, and records what was imported.
        check = ["-m", "job_preflight", "--code-path", spec.code_path,
                 "--out", posixpath.join(spec.output_dir, "preflight.json")]
        command = f"{rc.python} {shlex.join(check)} && {command}"
    return command


def compose_command(spec, ray_config):
    """argv that makes verl's hydra compose the job's config and exit (`--cfg job`), or None.

    Run before submission it rejects a misspelled override in seconds, with verl's own message.
    """
    spec, rc = _as_spec(spec), _as_ray_config(ray_config)
    if spec.workload not in TRAINERS:
        return None
    return [*shlex.split(rc.python), *_trainer_args(spec, rc), "--cfg", "job"]


def entrypoint_options(spec) -> dict:
    """Driver resource kwargs of JobSubmissionClient.submit_job; zero ones are left out."""
    r = _as_spec(spec).resources
    options = {"entrypoint_num_cpus": r.entrypoint_num_cpus,
               "entrypoint_num_gpus": r.entrypoint_num_gpus,
               "entrypoint_memory": r.entrypoint_memory,
               "entrypoint_resources": dict(r.entrypoint_resources)}
    return {key: value for key, value in options.items() if value}


def _pasteable(entrypoint):
    """The entrypoint as words after `ray job submit --`, which Ray re-joins with shlex.join.

    A plain argv survives that unchanged; shell syntax (pipes, $VAR, &&) would be run by the
    pasting shell, so such a command goes through bash -c instead.
    """
    try:
        if shlex.join(shlex.split(entrypoint)) == entrypoint:
            return entrypoint
    except ValueError:
        pass
    return shlex.join(["bash", "-c", entrypoint])


def submit_command(spec, ray_config, runtime_env) -> str:
    """A `ray job submit` command equivalent to the SDK submission, for a person to paste.

    It embeds runtime_env as given: pass it through redact() before writing it anywhere.
    """
    spec, rc = _as_spec(spec), _as_ray_config(ray_config)
    options = entrypoint_options(spec)
    args = ["ray", "job", "submit", "--address", rc.dashboard_url,
            "--submission-id", spec.submission_id]
    if "entrypoint_resources" in options:
        args += ["--entrypoint-resources",
                 json.dumps(options.pop("entrypoint_resources"), sort_keys=True)]
    args += ["--runtime-env-json", json.dumps(runtime_env, sort_keys=True)]
    for key, value in options.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    args += ["--no-wait", "--"]
    return f"{shlex.join(args)} {_pasteable(render_entrypoint(spec, rc))}"


# -------------------------------------------------------------------------------- redaction

_SECRET_NAME = re.compile(r"(_TOKEN|_API_KEY|_SECRET)$|PASSWORD", re.IGNORECASE)


def is_secret_name(key, secret_names=DEFAULT_SECRET_ENV_NAMES) -> bool:
    return isinstance(key, str) and (key in secret_names or _SECRET_NAME.search(key) is not None)


def redact(obj, secret_names, extra_values=()):
    """A deep copy of obj with secrets hidden.

    Values under a secret key (in any mapping) become "<redacted>", and every occurrence of
    such a value, or of an extra_value, inside any string (a rendered command) is replaced.
    """
    found = [v for v in extra_values if isinstance(v, str)]

    def collect(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if is_secret_name(key, secret_names) and isinstance(value, str):
                    found.append(value)
                else:
                    collect(value)
        elif isinstance(node, (list, tuple)):
            for item in node:
                collect(item)

    collect(obj)
    # Also the JSON-escaped form (commands embed runtime_env as JSON). Values shorter than 4
    # characters would garble every string; they are still hidden under their key.
    needles = sorted({form for v in found if len(v) >= 4 for form in (v, json.dumps(v)[1:-1])},
                     key=len, reverse=True)

    def scrub(node):
        if isinstance(node, dict):
            return {key: REDACTED if is_secret_name(key, secret_names) else scrub(value)
                    for key, value in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(scrub(item) for item in node)
        if isinstance(node, str):
            for needle in needles:
                node = node.replace(needle, REDACTED)
            return node
        return copy.deepcopy(node)

    return scrub(obj)


# ------------------------------------------------------------------------------ JSON Schema


def _schema(f):
    kind = f.kind
    if kind == "object":
        schema = {"type": "object",
                  "properties": {c.name: _schema(c) for c in f.fields},
                  "additionalProperties": False}
        required = [c.name for c in f.fields if c.required]
        if required:
            schema["required"] = required
    elif kind == "int":
        schema = {"type": "integer", "minimum": f.minimum}
    elif kind == "number":
        schema = {"type": "number", ("exclusiveMinimum" if f.exclusive else "minimum"): f.minimum}
    elif kind == "str":
        schema = {"type": "string"}
        if f.choices:
            schema["enum"] = list(f.choices)
        if f.pattern:
            schema["pattern"] = f.pattern[0]
    elif kind == "path":
        schema = {"type": "string", "pattern": _PATH[0]}
    elif kind == "paths":
        path = _schema(f.item)
        schema = {"anyOf": [path, {"type": "array", "items": path, "minItems": 1}]}
    elif kind == "list":
        schema = {"type": "array", "items": _schema(f.item)}
    elif kind == "map":
        schema = {"type": "object", "additionalProperties": _schema(f.item)}
        if f.pattern:
            schema["propertyNames"] = {"pattern": f.pattern[0]}
    else:
        schema = {"type": "object"}
    if f.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    if f.default is not None:
        schema = {"default": f.default, **schema}
    return {"description": f.doc, **schema} if f.doc else schema


def json_schema() -> dict:
    """JSON Schema (draft 2020-12) of a spec file, derived from SPEC_FIELDS."""
    schema = _schema(Field("", "object", fields=SPEC_FIELDS))
    schema["allOf"] = [
        {"if": {"properties": {"workload": {"enum": list(TRAINERS)}}, "required": ["workload"]},
         "then": {"required": list(TRAINER_REQUIRED)}},
        {"if": {"properties": {"workload": {"const": "command"}}, "required": ["workload"]},
         "then": {"required": ["entrypoint"]},
         "else": {"not": {"required": ["entrypoint"]}}},
        {"not": {"required": ["code_id", "code_path"]}},
    ]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "verl Ray JobSpec",
            "description": "A job file in jobspecs/<name>.yaml. Generated by "
                           "module_utils/jobspec.py --write-schema; do not edit.",
            **schema}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def _main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Write the JobSpec JSON Schema.")
    parser.add_argument("--write-schema", metavar="PATH", required=True)
    args = parser.parse_args(argv)
    with open(args.write_schema, "w", encoding="utf-8") as handle:
        handle.write(schema_text())


if __name__ == "__main__":
    _main()
