"""A JobSpec's fields, each defined once, and the validation walk over them.

SPEC_FIELDS (a spec file) and RAY_CONFIG_FIELDS (the inventory's ray_config) give every field its kind,
constraints, static default and doc. check / check_fields validate and normalise values against these tables
and raise JobSpecError naming the bad field; -e coercion (plugin_utils/jobspec_input.py) and the JSON Schema
(jobspec.schema.json, plugin_utils/jobspec_schema.py) are derived from the same tables. The typed models and
resolve(), which fills the derived defaults and checks the rules between fields, are jobspec.py.
Modules import this as ansible.module_utils.jobspec.fields, so only the standard library and the project's
module_utils are imported.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import posixpath

from ansible.module_utils.base import conventions
from ansible.module_utils.base.redaction import DEFAULT_SECRET_ENV_NAMES
from ansible.module_utils.verl import diagnosis

WORKLOADS = ("ppo", "grpo", "sft", "smoke", "command")
# Workloads rendered as verl trainers: they need a model and training data.
TRAINERS = ("ppo", "grpo", "sft")
TRAINER_REQUIRED = ("model_path", "train_files")
# Failure kinds a retry may cure: the diagnosis table marks them.
RETRYABLE = diagnosis.RETRYABLE

# (regex, what a valid value looks like). Anchored, used with re.fullmatch here and as JSON
# Schema patterns, so both accept the same strings.
# Paths and names go unquoted into hydra overrides and PYTHONPATH: no , = : spaces or quotes.
PATH_RULE = (r"^/[A-Za-z0-9._/+@-]*$", "an absolute path of letters, digits and ._-/+@")
ENV_NAME_RULE = (r"^[A-Za-z_][A-Za-z0-9_]*$",
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
    """A bad JobSpec input; str() is one line naming the field and what is wrong with it.

    The value is kept (`value`) for code, never shown: it may be a secret put in the wrong place (a misspelled
    field, an env value of the wrong type), and this message ends in task output, report.json, summary.md and
    junit.xml. Only its kind is said ("got a string").
    """

    def __init__(self, field, problem, value):
        self.field = field
        self.value = value
        got = "" if value is ABSENT else f" (got {kind_of(value)})"
        super().__init__(f"jobspec field '{conventions.one_line(field, 200)}': {conventions.one_line(problem)}{got}")


# The value of a JobSpecError about a field that was not given at all: its message says nothing of a value.
ABSENT = object()


def kind_of(value):
    """What kind of value this is, in words, never the value itself: 'a string', 'an integer', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    for types, word in ((int, "an integer"), (float, "a number"), (str, "a string"), (dict, "a mapping"),
                        ((list, tuple), "a list")):
        if isinstance(value, types):
            return word
    return "a value of another kind"


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
        Field("stall_s", "int", ("Seconds without a new verl step (a job without steps: without its log growing) "
                                 "that make the job hung; null: ten times its median step, at least 900."),
              minimum=1, nullable=True),
        Field("on_stall", "str", ("What a hang does once its stacks are taken: report (the record says so) or stop "
                                  "(FAILED, reason HUNG). retries.on hung stops it and resumes the next attempt."),
              default="report", choices=conventions.STALL_CHOICES),
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
          "ray_config.runtime_env.env_vars.", default={}, pattern=ENV_NAME_RULE, item=_STRING),
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

ENV_VARS_FIELD = Field("env_vars", "map", pattern=ENV_NAME_RULE, item=_STRING)

RAY_CONFIG_FIELDS = (
    Field("address", "str", "GCS address.", pattern=_HOSTPORT, required=True),
    Field("dashboard_url", "str", "Dashboard (job API) URL.", pattern=_URL, required=True),
    Field("shared_root", "path", "Shared storage root.", default="/private"),
    Field("entrypoint_resources", "map", "Default custom resources of a job's driver.",
          default={"worker_node": 1}, item=_POSITIVE),
    Field("runtime_env", "mapping", "Base runtime_env of every job (no working_dir).", default={}),
    Field("secret_env_names", "list", "Env names whose values are never written out.",
          default=list(DEFAULT_SECRET_ENV_NAMES), item=Field("", "str", pattern=ENV_NAME_RULE)),
    Field("python", "str", "Command the rendered entrypoints start with.", default="python",
          pattern=_COMMAND),
    Field("head_outage_s", "int", ("How long whoever follows a job waits for a head it cannot reach before it fails: "
                                   "the GCS store's reconnect window (0: no store, fail at once)."), default=0),
    Field("tensorboard_url", "str", ("Where the cluster's TensorBoard serves the shared root's runs "
                                     "(roles/ray_tensorboard): a job's progress line and the regression summary link "
                                     "to its run. Null: no link."), pattern=_URL, nullable=True),
)

NAME_FIELD = Field("name", "str", pattern=conventions.NAME_RULE)


# ---------------------------------------------------------------- validation from the tables


def join_path(path, name):
    """The dotted path of field `name` under `path` (as error messages name it)."""
    return f"{path}.{name}" if path else str(name)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def expect(f):
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
        text = PATH_RULE[1]
    elif kind == "paths":
        text = f"{PATH_RULE[1]}, or a non-empty list of them"
    elif kind == "list":
        text = f"a list, each item {expect(f.item)}"
    elif kind == "map":
        text = f"a mapping, each value {expect(f.item)}"
    else:
        text = "a mapping"
    return text + " or null" if f.nullable else text


def check(f, value, path, complete=True):
    """Return value normalised (paths cleaned, containers copied); raise JobSpecError if bad.

    complete: absent fields of nested objects count as null (see check_fields).
    """
    if value is None and f.nullable:
        return None
    _no_nul(value, path)
    kind = f.kind
    if kind == "object":
        return check_fields(f.fields, value, path, complete=complete)
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
    if kind in ("path", "paths") and conventions.matches(PATH_RULE, value):
        # normpath keeps a leading "//" (POSIX allows it); one "/" is what we compare against.
        return "/" + posixpath.normpath(value).lstrip("/")
    if kind == "paths" and isinstance(value, list) and value:
        return [check(f.item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "list" and isinstance(value, list):
        return [check(f.item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or not key or (f.pattern and not conventions.matches(f.pattern, key)):
                what = f.pattern[1] if f.pattern else "a non-empty string"
                raise JobSpecError(join_path(path, key), f"the name must be {what}", key)
        return {key: check(f.item, v, join_path(path, key)) for key, v in value.items()}
    if kind == "mapping" and isinstance(value, dict):
        return copy.deepcopy(value)
    raise JobSpecError(path, f"must be {expect(f)}", value)


def _no_nul(value, path):
    """No value anywhere may hold NUL: C strings (argv, env, paths) would cut it there silently."""
    if isinstance(value, str):
        if "\x00" in value:
            raise JobSpecError(path, "must not contain a NUL character", value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, join_path(path, key))
            _no_nul(item, join_path(path, key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _no_nul(item, f"{path}[{i}]")


def check_fields(fields, value, path, *, complete):
    """Check a mapping against a field table; with complete, absent fields count as null."""
    if not isinstance(value, dict):
        raise JobSpecError(path or "spec", "must be a mapping", value)
    known = {f.name: f for f in fields}
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise JobSpecError(join_path(path, key), f"unknown field{hint}", ABSENT)
    out = {}
    for f in fields:
        if f.name in value:
            out[f.name] = check(f, value[f.name], join_path(path, f.name), complete)
        elif complete:
            if f.required:
                raise JobSpecError(join_path(path, f.name), f"is required ({expect(f)})", ABSENT)
            out[f.name] = check(f, None, join_path(path, f.name), complete)
    return out


def fill_static(values, fields):
    """Add the static defaults of absent fields (nested objects included), in place."""
    for f in fields:
        if f.kind == "object":
            values[f.name] = fill_static(values.get(f.name) or {}, f.fields)
        elif f.name not in values and f.default is not None:
            values[f.name] = copy.deepcopy(f.default)
    return values
