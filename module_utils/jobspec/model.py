"""The one model of a JobSpec: the typed RayConfig and JobSpec, and how layers resolve into a JobSpec.

A spec file (jobspecs/<name>.yaml) is merged with site defaults and -e overrides (merge_layers), validated
against the field tables of fields.py, and filled with its derived defaults here (resolve), which also
holds the rules between fields, what only the spec sets (owned.py) and the rules between a spec and its cluster
(check_cluster). All of them raise JobSpecError (defined in fields.py; callers of this module catch it as
model.JobSpecError). Rendering a JobSpec into a Ray job is render.py, over this module; reading spec files and -e
text is the control host's job (plugin_utils/jobspec_input.py). Modules import this as
ansible.module_utils.jobspec.model, so only the standard library and the project's module_utils are imported.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import posixpath
import secrets

from ansible.module_utils.base import conventions
from ansible.module_utils.base.conventions import record_paths
from ansible.module_utils.base.model import fill_static
from ansible.module_utils.jobspec.fields import (
    ENV_VARS_FIELD,
    NAME_FIELD,
    NO_CHECKPOINTS,
    RAY_CONFIG_FIELDS,
    SPEC_FIELDS,
    TRAINER_REQUIRED,
    TRAINERS,
    JobSpecError,
    check,
    check_fields,
)
from ansible.module_utils.jobspec.owned import check_owned, is_inside
from ansible.module_utils.queue.model import DEFAULT_CLASS, PREEMPTIBLE_BY_DEFAULT


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
    head_outage_s: int
    tensorboard_url: str | None

    @classmethod
    def from_dict(cls, data) -> RayConfig:
        if not isinstance(data, dict):
            raise JobSpecError("ray_config", "must be a mapping", data)
        values = check_fields(RAY_CONFIG_FIELDS, fill_static(dict(data), RAY_CONFIG_FIELDS),
                              "ray_config", complete=True)
        runtime_env = values["runtime_env"]
        if "working_dir" in runtime_env:
            # Jobs import code from shared storage (PYTHONPATH), never from an uploaded copy.
            raise JobSpecError("ray_config.runtime_env.working_dir",
                               "is not allowed: code comes from code_path on shared storage",
                               runtime_env["working_dir"])
        if "env_vars" in runtime_env:
            check(ENV_VARS_FIELD, runtime_env["env_vars"], "ray_config.runtime_env.env_vars")
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
    stall_s: int | None = None
    on_stall: str = "report"
    queue_s: int | None = None


@dataclasses.dataclass(frozen=True)
class Queue:
    priority: str = DEFAULT_CLASS
    preemptible: bool | None = None

    @property
    def may_be_preempted(self):
        """Its preemptible, or its class's default (queue/model.py PREEMPTIBLE_BY_DEFAULT)."""
        return self.priority in PREEMPTIBLE_BY_DEFAULT if self.preemptible is None else self.preemptible


@dataclasses.dataclass(frozen=True)
class Retries:
    max: int
    on: list
    cordon: bool = True


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
    queue: Queue
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
    name = check(NAME_FIELD, name, "name")
    v = check_fields(SPEC_FIELDS, data, "", complete=True)
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
    check_owned(v)
    return JobSpec(name=name, **{**v, "resources": Resources(**v["resources"]),
                                 "timeouts": Timeouts(**v["timeouts"]),
                                 "queue": Queue(**v["queue"]), "retries": Retries(**v["retries"]),
                                 "debug": Debug(**v["debug"])})


# What a job whose retries cannot resume is told when it is submitted (restart_note).
RESTART_NOTE = "save_freq -1: no checkpoints, so a retry starts again from step 0"


def checkpoints_off(spec):
    """Whether a verl job saves no checkpoint (save_freq -1, fields.NO_CHECKPOINTS), so an attempt resuming it
    starts from step 0. spec: a JobSpec, or a record's job_spec as read (data of any shape: False when not a spec)."""
    values = spec.to_dict() if isinstance(spec, JobSpec) else spec if isinstance(spec, dict) else {}
    return values.get("workload") in TRAINERS and values.get("save_freq") == NO_CHECKPOINTS


def restart_note(spec):
    """RESTART_NOTE for a job with retries (retries.max > 0) and checkpoints off, else None."""
    spec = as_spec(spec)
    return RESTART_NOTE if spec.retries.max > 0 and checkpoints_off(spec) else None


def attempt_layer(spec, submission_id, resume_from):
    """(name, spec layer) of a job that resumes `resume_from` as `submission_id`: the earlier job's resolved
    spec without what derives from its id (its record, a checkpoint_dir inside it, a snapshot's code_path)."""
    old = dict(spec.to_dict() if isinstance(spec, JobSpec) else spec)
    name = old.pop("name", None)
    output_dir = old.pop("output_dir", None)
    checkpoint_dir = old.get("checkpoint_dir")
    if isinstance(output_dir, str) and isinstance(checkpoint_dir, str) and is_inside(checkpoint_dir, output_dir):
        # Checkpoints go into each job's own record: the attempt's, at the same place in it.
        del old["checkpoint_dir"]  # the default: the attempt's checkpoints/
        output_dir, checkpoint_dir = posixpath.normpath(output_dir), posixpath.normpath(checkpoint_dir)
        if checkpoint_dir != record_paths(output_dir)["checkpoints"]:
            where = posixpath.relpath(checkpoint_dir, output_dir)
            old["checkpoint_dir"] = posixpath.join(posixpath.dirname(output_dir), submission_id, where)
    env = old.get("env")
    if isinstance(env, dict) and isinstance(old.get("shared_root"), str) and \
            env.get("PYTHONPATH") == conventions.plugins_code_dir(old["shared_root"]):
        # A record from before env.PYTHONPATH was refused (the lab's plugins): the plugins are on every job's path.
        old["env"] = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    if old.get("code_id") is not None:
        old.pop("code_path", None)
    return name, {**old, "submission_id": submission_id, "resume_from": resume_from}


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
    name = check(NAME_FIELD, name, "name")
    merged = {}
    for label, layer in (("site_defaults", site_defaults or {}), ("spec", spec), ("cli", cli or {})):
        if not isinstance(layer, dict):
            raise JobSpecError(label, "must be a mapping of jobspec fields", layer)
        if "name" in layer:
            raise JobSpecError("name", "is the spec file name and cannot be set", layer["name"])
        merged = merge_layers(merged, layer)
    values = fill_static(check_fields(SPEC_FIELDS, merged, "", complete=False), SPEC_FIELDS)
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
