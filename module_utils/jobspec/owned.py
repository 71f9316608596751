"""What the spec owns, only the spec sets: the env names and verl's hydra keys it renders, and the checks that
neither a job's env nor its overrides take them back (nor choose the job's code, nor put its checkpoints outside its
own record). Each refusal is an OwnedError: one line naming the field and the rule, never the value.

model.py runs these checks on every spec it builds and render.py renders SETTINGS: both import this module, and
render.py imports model.py, so the JobSpec's modules depend one way (fields < owned < model < render). Standard
library only: the module on the head imports it.
"""

import posixpath
import re

from ansible.module_utils.base.conventions import record_paths
from ansible.module_utils.jobspec.fields import TRAINERS, JobSpecError

# The env names the renderer sets itself, from the spec's own fields: a job's env may not set them (check_env).
RENDERED_ENV = {"PYTHONPATH": "code_id, code_path and user_code (and the site's plugins directory)",
                "RAY_ADDRESS": "the workload (sft joins the cluster it runs in)",
                "RAY_DEBUG": "debug.breakpoints and debug.post_mortem",
                "RAY_DEBUG_POST_MORTEM": "debug.post_mortem",
                "VERL_FILE_LOGGER_PATH": "output_dir (verl's file logger writes the record's metrics.jsonl)",
                "TENSORBOARD_DIR": "output_dir (verl's tensorboard logger writes the record's tensorboard/)"}

_RL = ("ppo", "grpo")
# What the spec renders into verl's hydra config, one row a key: (key, workloads, the spec's field that sets it,
# its value from the spec, the loggers and the checkpoint a resume starts from). The one home of those keys: the
# trainer's arguments are rendered from it, and an override may not set any of them (OWNED_KEYS, check_overrides).
SETTINGS = (
    ("algorithm.adv_estimator", _RL, "workload", lambda s, log, res: "gae" if s.workload == "ppo" else "grpo"),
    ("data.train_files", TRAINERS, "train_files", lambda s, log, res: s.train_files),
    ("data.val_files", TRAINERS, "val_files", lambda s, log, res: s.val_files),
    ("model.path", ("sft",), "model_path", lambda s, log, res: s.model_path),
    ("actor_rollout_ref.model.path", _RL, "model_path", lambda s, log, res: s.model_path),
    ("critic.model.path", ("ppo",), "model_path", lambda s, log, res: s.model_path),
    ("trainer.default_local_dir", TRAINERS, "checkpoint_dir", lambda s, log, res: s.checkpoint_dir),
    ("trainer.save_freq", TRAINERS, "save_freq", lambda s, log, res: s.save_freq),
    ("trainer.nnodes", TRAINERS, "resources.nnodes", lambda s, log, res: s.resources.nnodes),
    ("trainer.n_gpus_per_node", TRAINERS, "resources.n_gpus_per_node",
     lambda s, log, res: s.resources.n_gpus_per_node),
    ("trainer.total_training_steps", TRAINERS, "total_training_steps", lambda s, log, res: s.total_training_steps),
    ("trainer.total_epochs", TRAINERS, "total_epochs", lambda s, log, res: s.total_epochs),
    ("trainer.project_name", TRAINERS, "project_name", lambda s, log, res: s.project_name),
    ("trainer.experiment_name", TRAINERS, "experiment_name", lambda s, log, res: s.experiment_name),
    ("trainer.logger", TRAINERS, "env (wandb when WANDB_API_KEY is set)", lambda s, log, res: log),
    # verl 0.9.1 reads reward.custom_reward_function; the top-level legacy key is only migrated by a path its v1
    # trainer skips, so a reward function set there would be silently ignored.
    ("reward.custom_reward_function.path", _RL, "reward_fn_path", lambda s, log, res: s.reward_fn_path),
    ("trainer.resume_mode", TRAINERS, "resume_from", lambda s, log, res: "resume_path" if res else None),
    ("trainer.resume_from_path", TRAINERS, "resume_from", lambda s, log, res: res),
)
# Keys an override may not set, each with the spec field that owns it: the rendered ones, and those of verl that
# would take them back: its legacy reward key (still read on some paths), the copy of every checkpoint it makes
# elsewhere (default_hdfs_dir: a local path too), and the removal of the checkpoint it resumed from (another record).
OWNED_KEYS = {**{key: field for key, _, field, _ in SETTINGS}, "custom_reward_function.path": "reward_fn_path",
              "trainer.default_hdfs_dir": "checkpoint_dir", "trainer.del_local_ckpt_after_load": "resume_from"}

# verl's config groups whose chosen option holds keys the spec owns, by workload (from the defaults lists of verl
# 0.9.1's sft_trainer_engine.yaml and ppo_trainer.yaml): `model=hf_model` chooses the group's file, which Hydra composes
# before any override, so the spec's own keys still win; the same key set to anything else (`model={...}`, or a name
# where the key is no group: Hydra then replaces the whole mapping with a string) would take them back.
CONFIG_GROUPS = {"sft": ("model",),
                 "ppo": ("data", "critic", "reward", "model@actor_rollout_ref.model", "model@critic.model"),
                 "grpo": ("data", "critic", "reward", "model@actor_rollout_ref.model", "model@critic.model")}
_OPTION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# An estimator other than PPO's and GRPO's own (rloo, remax, reinforce_plus_plus, gpg...): verl's main_ppo runs it as
# PPO's trainer (with no critic, which verl enables for gae only), so a ppo spec may keep it as an override.
ESTIMATOR = "algorithm.adv_estimator"
OWN_ESTIMATORS = ("gae", "grpo")
ESTIMATOR_NAME = re.compile(r"[a-z][a-z0-9_]*")

# Env names that choose which code runs or how it loads, so `code_id`, `code_path` and `user_code` (the spec's) would
# mean nothing: Python's search path, startup and bytecode (PYTHON*), where `python` is found (PATH) or a user
# site-packages (HOME), the dynamic loader's (every LD_* and DYLD_*), the shell's startup file (BASH_ENV, ENV).
# The names the renderer sets itself (RENDERED_ENV: PYTHONPATH, RAY_DEBUG, ...) are refused too.
CODE_ENV_NAMES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPLATLIBDIR",
                  "PYTHONPYCACHEPREFIX", "PYTHONEXECUTABLE", "PYTHONBREAKPOINT", "PATH", "HOME", "BASH_ENV", "ENV")
CODE_ENV_PREFIXES = ("LD_", "DYLD_")
# The one kind of interpolation an override may hold: a plain reference to another config key, ${a.b} (or ${..a},
# ${a.b[0]}). Resolvers, ${name:...} (oc.env, oc.decode, eval, a site's own), read the environment or run code.
_PLAIN_REFERENCE = re.compile(r"\$\{\.*[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+|\[[0-9]+\])*\}")


class OwnedError(JobSpecError):
    """A spec input that takes back what the spec owns: one line naming the field and the rule, never the value."""

    def __init__(self, field, rule):
        super().__init__(field, rule, None)
        self.args = (f"jobspec field '{field}': {rule}",)


def _owned_conflict(target, owned_keys):
    """The owned key a config path sets, replaces (an ancestor: trainer={...}) or reaches into; or None."""
    for key in owned_keys:
        if target in ("", key) or key.startswith(target + ".") or target.startswith(key + "."):
            return key
    return None


def check_env(env):
    """A job's env may not choose its code (CODE_ENV_NAMES) nor set what the renderer sets (RENDERED_ENV)."""
    for name in env:
        if name in CODE_ENV_NAMES or name.startswith(CODE_ENV_PREFIXES):
            raise OwnedError(f"env.{name}", "changes which code a job runs or how it is loaded (PYTHONPATH, LD_*, "
                             "PATH and their like: jobspecs/README.md): choose the code with code_id (or code_path) "
                             "and user_code; the site's plugins (common/code/plugins) are on every job's PYTHONPATH")
        if name in RENDERED_ENV:
            raise OwnedError(f"env.{name}", f"is set by the spec from {RENDERED_ENV[name]}: set that instead")


def check_overrides(overrides, workload=None):
    """Overrides may not delete keys (~), set what the spec renders (OWNED_KEYS, their ancestors
    included) or hydra's own config, nor call a resolver (plain ${other.key} references stay); the workload's config
    groups may be chosen (CONFIG_GROUPS), and a ppo spec may run another estimator than gae (OWN_ESTIMATORS).
    Every refused override is named in one OwnedError (a script pasted as overrides sets many owned keys)."""
    problems = [problem for problem in (_override_problem(f"overrides[{i}]", text, workload)
                                        for i, text in enumerate(overrides)) if problem]
    if len(problems) == 1:
        raise OwnedError(problems[0][0], problems[0][1])
    if problems:
        owned = sum(1 for _, _, key in problems if key)
        why = f" ({owned} set keys the spec renders from its fields: set the field named instead)" if owned else ""
        listed = [f"{field} sets {key} (the spec's {OWNED_KEYS[key]})" if key else f"{field} {rule}"
                  for field, rule, key in problems]
        raise OwnedError("overrides", f"{len(problems)} overrides are refused{why}: {'; '.join(listed)}")


_DELETES = "deletes a key (~): an override may set or add keys, never remove them"
_HYDRA = "sets hydra's own config (hydra.*), which decides what runs and where it writes"
_RESOLVER = ("calls an interpolation resolver (${name:...}, e.g. oc.env, oc.decode, eval), which reads the "
             "environment or runs code: only plain ${other.key} references")


def _override_problem(field, text, workload=None):
    """(field, rule, the owned key it sets or None) of one override's first refusal, or None."""
    key, _, value = text.partition("=")
    if "~" in key:
        return field, _DELETES, None
    bare = key.lstrip("+")
    if bare in CONFIG_GROUPS.get(workload, ()) and _OPTION.fullmatch(value) and value != "null":
        return None  # a config group's option, not a write to the keys under it
    if bare == ESTIMATOR and workload == "ppo" and ESTIMATOR_NAME.fullmatch(value) and value not in OWN_ESTIMATORS:
        return None
    path, _, package = key.lstrip("+").partition("@")
    # A config group path (a/b) is the package a.b; @_global_ puts an option at the top of the config.
    targets = [path.replace("/", ".")]
    if package:
        parts = package.split(".")
        if parts[0].startswith("_"):  # _global_ is the top; _group_, _here_ and _name_ are taken as it too
            parts = parts[1:] if parts[0] == "_global_" else []
        targets.append(".".join(parts))
    for target in targets:
        if target.split(".")[0] == "hydra":
            return field, _HYDRA, None
        owned = _owned_conflict(target, OWNED_KEYS)
        if owned is not None:
            rule = (f"sets {owned} (or a key above it), which the spec renders from {OWNED_KEYS[owned]}: "
                    "set that instead")
            return field, rule, owned
    if any(not _PLAIN_REFERENCE.match(value, found.start()) for found in re.finditer(r"\$\{", value)):
        return field, _RESOLVER, None
    return None


def check_checkpoint_dir(checkpoint_dir, output_dir):
    """Checkpoints go into the job's own record (its checkpoints/ by default): never another job's record, a code
    snapshot, the regression tree or one of the record's own files and folders (config/, logs/, status.json...)."""
    top = posixpath.relpath(checkpoint_dir, output_dir).split("/")[0]
    own = {posixpath.relpath(path, output_dir).split("/")[0] for path in record_paths(output_dir).values()}
    if not is_inside(checkpoint_dir, output_dir) or top.startswith(".") or (top in own and top != "checkpoints"):
        raise OwnedError("checkpoint_dir", "must be inside the job's own record <shared_root>/jobs/<submission_id>/ "
                         "(default its checkpoints/; not config/, logs/, debug/ or one of its files): never another "
                         "job's record, a code snapshot or the regression tree (to start from another job's "
                         "checkpoint, set resume_from)")


def check_owned(values):
    """What the spec owns, only the spec sets: its code, its rendered hydra keys and its checkpoint directory."""
    check_env(values["env"])
    check_overrides(values["overrides"], values["workload"])
    check_checkpoint_dir(values["checkpoint_dir"], values["output_dir"])


def is_inside(path, root):
    """Whether normalised absolute path lies strictly below root (no symlinks resolved here)."""
    root = "/" + posixpath.normpath(root).lstrip("/")
    path = "/" + posixpath.normpath(path).lstrip("/")
    return root != "/" and path.startswith(root.rstrip("/") + "/")
