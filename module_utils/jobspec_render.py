"""Rendering a JobSpec into a Ray job: verl's trainers and hydra overrides, the runtime_env, the
entrypoint and its resources, and the equivalent `ray job submit` command.

Runs where the job is submitted (the module on the head): imported as ansible.module_utils.jobspec_render,
standard library only.
"""

import copy
import json
import shlex

from ansible.module_utils import conventions
from ansible.module_utils.jobs.record import paths as record_paths
from ansible.module_utils.jobspec import as_ray_config as _as_ray_config
from ansible.module_utils.jobspec import as_spec as _as_spec
from ansible.module_utils.jobspec_fields import TRAINERS


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
    # Ray's default (RAY_DEBUG=1) would let a breakpoint() left in code hold a multi-day job waiting for a
    # debugger; only a job that asks gets one. debugpy listens on the node's own address (Ray's choice).
    wants_debugger = spec.debug.breakpoints or spec.debug.post_mortem
    env_vars["RAY_DEBUG"] = "1" if wants_debugger else "0"
    if spec.debug.post_mortem:
        env_vars["RAY_DEBUG_POST_MORTEM"] = "1"
    env_vars.update(spec.env)
    # The share's user/code is writable by its users: a sitecustomize.py there would run in every job (as
    # root) and in the head's preflight. Only a job that asks for it gets it.
    user_code = conventions.user_code_dir(spec.shared_root) if spec.user_code else None
    env_vars["PYTHONPATH"] = ":".join(
        p for p in (spec.code_path, user_code, env_vars.get("PYTHONPATH")) if p)
    runtime_env["env_vars"] = {k: str(v) for k, v in env_vars.items()}
    return runtime_env


def _trainer_args(spec, rc, resume_path=None):
    """The python -m arguments of a verl trainer, hydra overrides included.

    resume_path: the checkpoint (a global_step_N folder) the job resumes from, found on the head."""
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
        # verl 0.9.1 reads reward.custom_reward_function; the top-level legacy key is only migrated by a
        # path its v1 trainer skips, so a reward function set there would be silently ignored.
        settings.append(("reward.custom_reward_function.path", spec.reward_fn_path))
    if resume_path:
        settings += [("trainer.resume_mode", "resume_path"), ("trainer.resume_from_path", resume_path)]
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
