"""Rendering a JobSpec into a Ray job: verl's trainers and hydra overrides, the runtime_env, the
entrypoint and its resources, and the equivalent `ray job submit` command.

Over model.py (the JobSpec) and owned.py (what the spec renders: SETTINGS, RENDERED_ENV). Runs where the job is
submitted (the module on the head): imported as ansible.module_utils.jobspec.render, standard library only.
"""

import copy
import json
import shlex

from ansible.module_utils.base import conventions
from ansible.module_utils.base.conventions import record_paths
from ansible.module_utils.jobspec.fields import TRAINERS
from ansible.module_utils.jobspec.model import as_ray_config as _as_ray_config
from ansible.module_utils.jobspec.model import as_spec as _as_spec
from ansible.module_utils.jobspec.owned import SETTINGS


def _hydra_value(value):
    if isinstance(value, list):
        return "[" + ",".join(f"'{v}'" for v in value) + "]"
    return str(value)


# verl's loggers every verl job runs with: the console for people reading driver.log, the file logger for the record's
# exact metrics (metrics.jsonl), tensorboard for the cluster's TensorBoard (wandb is added when WANDB_API_KEY is set).
LOGGERS = ("console", "file", "tensorboard")


def render_runtime_env(spec, ray_config) -> dict:
    """runtime_env of the job: the site's, plus job env vars and the code on PYTHONPATH.

    Never a working_dir: code is read from shared storage, so each job can pick its version.
    """
    spec, rc = _as_spec(spec), _as_ray_config(ray_config)
    runtime_env = copy.deepcopy(rc.runtime_env)
    env_vars = dict(runtime_env.get("env_vars", {}))
    env_vars.update(spec.env)  # never an owned.RENDERED_ENV name (check_env refuses them): set below
    if spec.workload == "sft":
        # sft_trainer_ray calls ray.init() itself; "auto" joins the cluster the job runs in.
        env_vars["RAY_ADDRESS"] = "auto"
    # Ray's default (RAY_DEBUG=1) would let a breakpoint() left in code hold a multi-day job waiting for a
    # debugger; only a job that asks gets one. debugpy listens on the node's own address (Ray's choice).
    wants_debugger = spec.debug.breakpoints or spec.debug.post_mortem
    env_vars["RAY_DEBUG"] = "1" if wants_debugger else "0"
    if spec.debug.post_mortem:
        env_vars["RAY_DEBUG_POST_MORTEM"] = "1"
    if spec.workload in TRAINERS:
        record = record_paths(spec.output_dir)
        env_vars["VERL_FILE_LOGGER_PATH"] = record["metrics"]
        env_vars["TENSORBOARD_DIR"] = record["tensorboard"]
    # The code: the job's (its snapshot or code_path), then the site's platform plugins (common/code/plugins, root's
    # like the snapshots: the code_snapshot role copies code_snapshot_plugins there; a plugin is inert until a job's
    # env names it, e.g. VERL_USE_EXTERNAL_MODULES), then the share's user/code, which its users can write: a
    # sitecustomize.py there would run in every job (as root) and in the head's preflight, so only a job that asks
    # gets it. Last, a PYTHONPATH of the site's own ray_config.runtime_env (the operator's, never a spec's).
    user_code = conventions.user_code_dir(spec.shared_root) if spec.user_code else None
    env_vars["PYTHONPATH"] = ":".join(
        p for p in (spec.code_path, conventions.plugins_code_dir(spec.shared_root), user_code,
                    runtime_env.get("env_vars", {}).get("PYTHONPATH")) if p)
    runtime_env["env_vars"] = {k: str(v) for k, v in env_vars.items()}
    return runtime_env


def _trainer_args(spec, rc, resume_path=None):
    """The python -m arguments of a verl trainer, hydra overrides included.

    resume_path: the checkpoint (a global_step_N folder) the job resumes from, found on the head."""
    env_vars = render_runtime_env(spec, rc)["env_vars"]
    loggers = [*LOGGERS] + (["wandb"] if "WANDB_API_KEY" in env_vars else [])
    head = ["verl.trainer.sft_trainer_ray" if spec.workload == "sft" else "verl.trainer.main_ppo"]
    settings = [(key, value(spec, loggers, resume_path)) for key, workloads, _, value in SETTINGS
                if spec.workload in workloads]
    args = [f"{key}={_hydra_value(value)}" for key, value in settings if value is not None]
    return ["-m", *head, *args, *spec.overrides]


def render_entrypoint(spec, ray_config, resume_path=None) -> str:
    """The shell command Ray runs as the job's driver (resume_path: see _trainer_args)."""
    spec, rc = _as_spec(spec), _as_ray_config(ray_config)
    if spec.workload == "command":
        command = spec.entrypoint
    else:
        if spec.workload == "smoke":
            args = ["-m", "smoke_probe", "--checkpoint-dir", spec.checkpoint_dir,
                    "--submission-id", spec.submission_id]
        else:
            args = _trainer_args(spec, rc, resume_path)
        # rc.python is a command prefix from the site config (it may be "uv run python").
        command = f"{rc.python} {shlex.join(args)}"
    if spec.code_id is not None:
        # A code snapshot carries job_preflight: it checks, on the worker and before any work,
        # that verl is imported from the chosen snapshot, and records what was imported.
        check = ["-m", "job_preflight", "--code-path", spec.code_path,
                 "--out", record_paths(spec.output_dir)["preflight"]]
        command = f"{rc.python} {shlex.join(check)} && {command}"
    return command


def compose_command(spec, ray_config, resume_path=None):
    """argv that makes verl's hydra compose the job's config and exit (`--cfg job`), or None.

    Run before submission it rejects a misspelled override in seconds, with verl's own message.
    """
    spec, rc = _as_spec(spec), _as_ray_config(ray_config)
    if spec.workload not in TRAINERS:
        return None
    return [*shlex.split(rc.python), *_trainer_args(spec, rc, resume_path), "--cfg", "job"]


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
