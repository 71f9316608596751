"""The one model of a JobSpec: its fields, their validation, and how layers resolve into a JobSpec.

A spec file (jobspecs/<name>.yaml) is merged with site defaults and -e overrides, validated,
and filled with its derived defaults here. Rendering it into a Ray job is jobspec_render.py;
reading spec files and -e text is the control host's job (plugin_utils/jobspec_input.py).

Every field is defined once, in the tables below; validation, -e coercion and the JSON Schema
(jobspec.schema.json, plugin_utils/jobspec_schema.py) are all derived from them. Modules import
this as ansible.module_utils.jobspec, so only the standard library is imported.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import math
import posixpath
import secrets

from ansible.module_utils import conventions, diagnosis
from ansible.module_utils.jobs.record import paths as record_paths
from ansible.module_utils.redaction import DEFAULT_SECRET_ENV_NAMES

WORKLOADS = ("ppo", "grpo", "sft", "smoke", "command")
# Workloads rendered as verl trainers: they need a model and training data.
TRAINERS = ("ppo", "grpo", "sft")
TRAINER_REQUIRED = ("model_path", "train_files")
# Failure kinds a retry may cure: the diagnosis table marks them.
RETRYABLE = diagnosis.RETRYABLE

# (regex, what a valid value looks like). Anchored, used with re.fullmatch here and as JSON
# Schema patterns, so both accept the same strings.
# Paths and names go unquoted into hydra overrides and PYTHONPATH: no , = : spaces or quotes.
_PATH = (r"^/[A-Za-z0-9._/+@-]*$", "an absolute path of letters, digits and ._-/+@")
_ENV_NAME = (r"^[A-Za-z_][A-Za-z0-9_]*$",
             "an environment variable name (letters, digits and _, not starting with a digit)")
# A plain dotted key (optionally +, ++ or ~ for hydra's append/force/delete), then a value on one line. Hydra's
# own flags (--cfg, --config-dir, -m) and hydra.* keys would change what runs or where it writes: refused.
_OVERRIDE = (r"^(?!\+{0,2}hydra[./=])(\+\+|\+|~)?[A-Za-z_][A-Za-z0-9_.@/+~-]*=[^\x00-\x1f\x7f]*$",
             ("a hydra override 'key=value': a plain dotted key (letters, digits, _.-/@, optional +, ++ or ~ "
              "first, not hydra.*) and a one-line value"))
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
        super().__init__(f"jobspec field '{conventions.one_line(field)}': {conventions.one_line(problem)}, got {shown}")


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a spec or of the ray config: its type, constraints, default and doc.

    kinds: str, int, number, bool, path, paths (a path or a list of paths), list (of `item`),
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
          "default <name>-<UTC YYYYmmddTHHMMSSZ>-<6 hex digits>.", pattern=conventions.ID_RULE),
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
          pattern=conventions.ID_RULE, nullable=True),
    Field("code_path", "path", "Directory put first on PYTHONPATH (e.g. a verl checkout); "
          "default for smoke: <shared_root>/common/code/smoke.", nullable=True),
    Field("user_code", "bool", "Put <shared_root>/user/code (people's own code, writable by anyone who can write the "
          "share) on the job's PYTHONPATH and on the head's config check (preflight). Off unless a job asks.",
          default=False),
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
              default=conventions.DEFAULT_PENDING_S, minimum=1),
        Field("max_run_s", "int", "Seconds the job may run before it is stopped; null: no limit.",
              minimum=1, nullable=True),
    )),
    Field("retries", "object", "Resubmit a job that failed for an infrastructure reason as a linked attempt "
          "(<submission_id>-r1, -r2, ...) that resumes from the newest whole checkpoint (verl workloads).", fields=(
        Field("max", "int", "Attempts after the first; 0: never retried.", default=0),
        Field("on", "list", "Failure kinds (the record's diagnosis) that are retried.",
              default=["node_died", "head_restarted", "nccl_gloo"], item=Field("", "str", choices=RETRYABLE)),
    )),
    Field("debug", "object", "Ray's debugger (debugpy) for the job's tasks and actors: it listens on the node's "
          "cluster address, never 0.0.0.0; attach with VS Code's Ray Distributed Debugger.", fields=(
        Field("breakpoints", "bool", "breakpoint() in a task or actor waits for a debugger (RAY_DEBUG=1). Off: "
              "RAY_DEBUG=0, so a breakpoint() left in code never holds a job.", default=False),
        Field("post_mortem", "bool", "A task or actor that raises waits for a debugger instead of failing "
              "(RAY_DEBUG_POST_MORTEM=1): the job runs on until it is stopped or reaches max_run_s.",
              default=False),
    )),
    Field("resume_from", "str", "Submission id of an earlier job (of the same spec) whose newest whole checkpoint, "
          "over its record and its attempts', this job resumes from; set by retries and job.yml do=resume.",
          pattern=conventions.ID_RULE, nullable=True),
    Field("env", "map", "Environment variables of the job; they win over "
          "ray_config.runtime_env.env_vars.", default={}, pattern=_ENV_NAME, item=_STRING),
    Field("overrides", "list", "Extra hydra overrides for ppo/grpo/sft, appended last so they win. "
          "Lists from site defaults, the spec and -e are concatenated in that order.",
          default=[], item=Field("", "str", pattern=_OVERRIDE)),
    Field("reward_fn_path", "path", "Python file with a custom reward function "
          "(reward.custom_reward_function.path; ppo and grpo).", nullable=True),
    Field("project_name", "str", "trainer.project_name.", default="verl-ray", pattern=conventions.ID_RULE),
    Field("experiment_name", "str", "trainer.experiment_name; default the submission id.",
          pattern=conventions.ID_RULE),
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

_NAME_FIELD = Field("name", "str", pattern=conventions.NAME_RULE)


# ---------------------------------------------------------------- validation from the tables


def _join(path, name):
    return f"{path}.{name}" if path else str(name)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _expect(f):
    """How an error message describes a valid value of field f."""
    kind = f.kind
    if kind == "int":
        text = "a positive integer" if f.minimum >= 1 else "a non-negative integer"
    elif kind == "number":
        text = "a number > 0" if f.exclusive else "a number >= 0"
    elif kind == "bool":
        text = "true or false"
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
    _no_nul(value, path)
    kind = f.kind
    if kind == "object":
        return _check_fields(f.fields, value, path, complete=complete)
    if kind == "int" and _is_int(value) and value >= f.minimum:
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "number" and _is_number(value) and (
            value > f.minimum if f.exclusive else value >= f.minimum):
        return value
    if kind == "str" and isinstance(value, str) and (not f.choices or value in f.choices) and (
            not f.pattern or conventions.matches(f.pattern, value)):
        return value
    if kind in ("path", "paths") and conventions.matches(_PATH, value):
        # normpath keeps a leading "//" (POSIX allows it); one "/" is what we compare against.
        return "/" + posixpath.normpath(value).lstrip("/")
    if kind == "paths" and isinstance(value, list) and value:
        return [_check(f.item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "list" and isinstance(value, list):
        return [_check(f.item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or not key or (f.pattern and not conventions.matches(f.pattern, key)):
                what = f.pattern[1] if f.pattern else "a non-empty string"
                raise JobSpecError(_join(path, key), f"the name must be {what}", key)
        return {key: _check(f.item, v, _join(path, key)) for key, v in value.items()}
    if kind == "mapping" and isinstance(value, dict):
        return copy.deepcopy(value)
    raise JobSpecError(path, f"must be {_expect(f)}", value)


def _no_nul(value, path):
    """No value anywhere may hold NUL: C strings (argv, env, paths) would cut it there silently."""
    if isinstance(value, str):
        if "\x00" in value:
            raise JobSpecError(path, "must not contain a NUL character", value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, _join(path, key))
            _no_nul(item, _join(path, key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _no_nul(item, f"{path}[{i}]")


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
class Retries:
    max: int
    on: list


@dataclasses.dataclass(frozen=True)
class Debug:
    breakpoints: bool
    post_mortem: bool


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
    user_code: bool
    model_path: str | None
    train_files: str | list | None
    val_files: str | list | None
    output_dir: str
    checkpoint_dir: str
    save_freq: int
    total_training_steps: int | None
    total_epochs: int | None
    timeouts: Timeouts
    retries: Retries
    debug: Debug
    resume_from: str | None
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
    if v["code_id"] is not None and v["code_path"] != conventions.verl_code_dir(v["shared_root"], v["code_id"]):
        raise JobSpecError("code_path", "must be <shared_root>/common/code/verl/<code_id> "
                           "when code_id is set (set one of them, not both)", v["code_path"])
    # One job's record is its own: never a parent of others' records, nor another job's directory.
    expected = conventions.job_dir(v["shared_root"], v["submission_id"])
    if v["output_dir"] != expected:
        raise JobSpecError("output_dir", f"must be {expected} (<shared_root>/jobs/<submission_id>)",
                           v["output_dir"])
    if v["resume_from"] is not None and workload not in TRAINERS:
        raise JobSpecError("resume_from", "only verl workloads (ppo, grpo, sft) resume from a checkpoint",
                           v["resume_from"])
    if v["resume_from"] == v["submission_id"]:
        raise JobSpecError("resume_from", "must name an earlier job, not this one", v["resume_from"])
    if not is_inside(v["checkpoint_dir"], v["shared_root"]):
        raise JobSpecError("checkpoint_dir", f"must be inside shared_root {v['shared_root']}",
                           v["checkpoint_dir"])
    return JobSpec(name=name, **{**v, "resources": Resources(**v["resources"]),
                                 "timeouts": Timeouts(**v["timeouts"]), "retries": Retries(**v["retries"]),
                                 "debug": Debug(**v["debug"])})


def attempt_layer(spec, submission_id, resume_from):
    """(name, spec layer) of a job that resumes `resume_from` as `submission_id`: the earlier job's resolved
    spec without what derives from its id (its record, a checkpoint_dir inside it, a snapshot's code_path)."""
    old = dict(spec.to_dict() if isinstance(spec, JobSpec) else spec)
    name = old.pop("name", None)
    output_dir = old.pop("output_dir", None)
    if output_dir and old.get("checkpoint_dir") == record_paths(output_dir)["checkpoints"]:
        del old["checkpoint_dir"]
    if old.get("code_id") is not None:
        old.pop("code_path", None)
    return name, {**old, "submission_id": submission_id, "resume_from": resume_from}


def is_inside(path, root):
    """Whether normalised absolute path lies strictly below root (no symlinks resolved here)."""
    root = "/" + posixpath.normpath(root).lstrip("/")
    path = "/" + posixpath.normpath(path).lstrip("/")
    return root != "/" and path.startswith(root.rstrip("/") + "/")


def _check_root(shared_root, rc):
    if shared_root != "/" + posixpath.normpath(rc.shared_root).lstrip("/"):
        raise JobSpecError("shared_root", f"must be the cluster's shared root {rc.shared_root} "
                           "(ray_config.shared_root)", shared_root)


def check_cluster(spec, ray_config):
    """The rules between a spec and its cluster: the job's shared root is the cluster's, and its driver
    keeps the cluster's default entrypoint resources (worker_node keeps it off the head)."""
    spec, rc = as_spec(spec), as_ray_config(ray_config)
    _check_root(spec.shared_root, rc)
    missing = sorted(set(rc.entrypoint_resources) - set(spec.resources.entrypoint_resources))
    if missing:
        raise JobSpecError("resources.entrypoint_resources",
                           f"must keep {', '.join(missing)} from ray_config.entrypoint_resources (without it the "
                           "driver may run on the head, away from the workers); add your resources beside it",
                           spec.resources.entrypoint_resources)
    return spec


def as_ray_config(ray_config) -> RayConfig:
    return ray_config if isinstance(ray_config, RayConfig) else RayConfig.from_dict(ray_config)


def as_spec(spec) -> JobSpec:
    return spec if isinstance(spec, JobSpec) else JobSpec.from_dict(spec)


def merge_layers(base, over, top=True):
    """Deep-merge layer `over` into `base` (the way resolve() layers them); top-level overrides lists are
    concatenated."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = merge_layers(old, value, top=False)
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
    rc = as_ray_config(ray_config)
    name = _check(_NAME_FIELD, name, "name")
    merged = {}
    for label, layer in (("site_defaults", site_defaults or {}), ("spec", spec), ("cli", cli or {})):
        if not isinstance(layer, dict):
            raise JobSpecError(label, "must be a mapping of jobspec fields", layer)
        if "name" in layer:
            raise JobSpecError("name", "is the spec file name and cannot be set", layer["name"])
        merged = merge_layers(merged, layer)
    values = _fill_static(_check_fields(SPEC_FIELDS, merged, "", complete=False), SPEC_FIELDS)
    if values.get("code_id") is not None and values.get("code_path") is not None:
        raise JobSpecError("code_path", "cannot be set together with code_id (set one of them)",
                           values["code_path"])

    root = values.setdefault("shared_root", rc.shared_root)
    _check_root(root, rc)
    sid = values.setdefault("submission_id", _default_id(name, now, token))
    values["resources"].setdefault("entrypoint_resources", copy.deepcopy(rc.entrypoint_resources))
    output_dir = values.setdefault("output_dir", conventions.job_dir(root, sid))
    values.setdefault("checkpoint_dir", record_paths(output_dir)["checkpoints"])
    values.setdefault("experiment_name", sid)
    if values.get("code_id") is not None:
        values["code_path"] = conventions.verl_code_dir(root, values["code_id"])
    elif values.get("workload") == "smoke" and values.get("code_path") is None:
        values["code_path"] = conventions.smoke_code_dir(root)
    return check_cluster(_finish(name, values), rc)
