"""A JobSpec's fields, each declared once, and the checks of values against them.

SPEC_FIELDS (a spec file) and RAY_CONFIG_FIELDS (the inventory's ray_config) give every field its kind,
constraints, static default and doc, in the project's one model language (module_utils/base/model.py, which
status.json's model speaks too). check / check_fields validate and normalise values against these tables and
raise JobSpecError naming the bad field; -e coercion (plugin_utils/jobspec_input.py), the JSON Schema
(jobspec.schema.json, plugin_utils/jobspec_schema.py) and jobspecs/README.md's field table (plugin_utils/schemas.py)
are derived from the same tables. The typed models and resolve(), which fills the derived defaults and checks the
rules between fields, are model.py. Modules import this as ansible.module_utils.jobspec.fields, so only the
standard library and the project's module_utils are imported.
"""

from __future__ import annotations

from ansible.module_utils.base import conventions, model
from ansible.module_utils.base.model import ABSENT, Field
from ansible.module_utils.base.redaction import DEFAULT_SECRET_ENV_NAMES
from ansible.module_utils.queue import model as queue
from ansible.module_utils.verl import diagnosis

WORKLOADS = ("ppo", "grpo", "sft", "smoke", "command")
# Workloads rendered as verl trainers: they need a model and training data.
TRAINERS = ("ppo", "grpo", "sft")
TRAINER_REQUIRED = ("model_path", "train_files")
# Failure kinds a retry may cure: the diagnosis table marks them.
RETRYABLE = diagnosis.RETRYABLE
# save_freq's "never save a checkpoint", verl's own -1 (its default): its trainers save every N steps only when N > 0
# (the SFT trainer still saves its last step), so a retry of such a job starts again from step 0. 0 is refused: the
# SFT trainer divides by it.
NO_CHECKPOINTS = -1

# (regex, what a valid value looks like). Anchored, used with re.fullmatch here and as JSON Schema patterns, so both
# accept the same strings. Names go unquoted into env and hydra overrides (paths: model.PATH_RULE).
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
    junit.xml. Only its kind is said ("got a string"; a number outside its field's bounds says which: got, as
    model.FieldError worked it out, "got an integer below 1").
    """

    def __init__(self, field, problem, value, got=None):
        self.field = field
        self.value = value
        got = got if got is not None else "" if value is ABSENT else f" (got {model.kind_of(value)})"
        super().__init__(f"jobspec field '{conventions.one_line(field, 200)}': {conventions.one_line(problem)}{got}")


_STRING = Field("", "str")
_POSITIVE = Field("", "number", minimum=0, exclusive=True)

SPEC_FIELDS = (
    Field("submission_id", "str", "Ray submission id and job directory name.", pattern=conventions.ID_RULE,
          derived="<name>-<UTC YYYYmmddTHHMMSSZ>-<6 hex digits>"),
    Field("workload", "str", "What to run.", choices=WORKLOADS, required=True),
    Field("entrypoint", "str", "Shell command of a 'command' job (required there); "
          "the other workloads are rendered and must not set it.", pattern=_COMMAND, nullable=True),
    Field("resources", "object", "What the job needs from the cluster.", fields=(
        Field("nnodes", "int", "Nodes the trainer uses (trainer.nnodes).", default=1, minimum=1),
        Field("n_gpus_per_node", "int", "GPUs per node the trainer uses (trainer.n_gpus_per_node).",
              default=0, minimum=0),
        Field("entrypoint_num_cpus", "number", "CPUs reserved for the driver.", default=0, minimum=0),
        Field("entrypoint_num_gpus", "number", "GPUs reserved for the driver.", default=0, minimum=0),
        Field("entrypoint_memory", "int", "Memory in bytes reserved for the driver.", default=0, minimum=0),
        Field("entrypoint_resources", "map", "Custom resources the driver needs; keep the cluster's (worker_node "
              "keeps the driver off the head).", item=_POSITIVE, derived="ray_config.entrypoint_resources"),
    )),
    Field("shared_root", "path", "Shared storage root, the same path on every node: the cluster's.",
          derived="ray_config.shared_root"),
    Field("code_id", "str", "Code snapshot to run: code_path becomes "
          "<shared_root>/common/code/verl/<code_id>. Set code_id or code_path, not both.",
          pattern=conventions.ID_RULE, nullable=True),
    Field("code_path", "path", "Directory put first on PYTHONPATH (e.g. a verl checkout), before the site's platform "
          "plugins (<shared_root>/common/code/plugins, root's like the snapshots).", nullable=True,
          derived=("with code_id, <shared_root>/common/code/verl/<code_id>; for smoke, "
                   "<shared_root>/common/code/smoke; else none")),
    Field("user_code", "bool", "Put <shared_root>/user/code (people's own code, writable by anyone who can write the "
          "share) on the job's PYTHONPATH and on the head's config check (preflight). Off unless a job asks.",
          default=False),
    Field("model_path", "path", "Model directory; required for ppo, grpo and sft.", nullable=True),
    Field("train_files", "paths", "Training parquet file(s); required for ppo, grpo and sft.",
          nullable=True, item=Field("", "path")),
    Field("val_files", "paths", "Validation parquet file(s).", nullable=True, item=Field("", "path")),
    Field("output_dir", "path", "Job directory (its record); no other than its default.",
          derived="<shared_root>/jobs/<submission_id>"),
    Field("checkpoint_dir", "path", "Checkpoint directory (trainer.default_local_dir), inside the job's own record "
          "(jobspecs/README.md, What the spec owns).", derived="<output_dir>/checkpoints"),
    Field("save_freq", "int", "Save a checkpoint every N steps (trainer.save_freq). -1 (verl's own): none on the "
          "way (verl's sft still saves its last step), so a retry starts again from step 0.", default=10, minimum=1,
          also=((NO_CHECKPOINTS, "no checkpoints"),)),
    Field("total_training_steps", "int", "Stop after N steps (trainer.total_training_steps).",
          minimum=1, nullable=True),
    Field("total_epochs", "int", "Stop after N epochs (trainer.total_epochs).", minimum=1,
          nullable=True),
    Field("timeouts", "object", "How long the job may wait and run.", fields=(
        Field("pending_s", "int", "Seconds the job may wait for resources in Ray, counted from its admission (its "
              "submission to Ray), before it is stopped.", default=conventions.DEFAULT_PENDING_S, minimum=1),
        Field("max_run_s", "int", "Seconds the job may run before it is stopped; null: no limit.",
              minimum=1, nullable=True),
        Field("stall_s", "int", ("Seconds without a new verl step (a job without steps: without its log growing) "
                                 "that make the job hung; null: ten times its median step, at least 900."),
              minimum=1, nullable=True),
        Field("on_stall", "str", ("What a hang does once its stacks are taken: report (the record says so) or stop "
                                  "(FAILED, reason HUNG). retries.on hung stops it and resumes the next attempt."),
              default="report", choices=conventions.STALL_CHOICES),
        Field("queue_s", "int", "Seconds the job may wait QUEUED before it is admitted; longer, it ends FAILED (reason "
              "QUEUE_TIMEOUT) without running. Null: no limit.", minimum=1, nullable=True),
    )),
    Field("queue", "object", "Its place in the cluster's queue (docs/queue.md).", fields=(
        Field("priority", "str", "Its class: high is admitted first, low last.", default=queue.DEFAULT_CLASS,
              choices=queue.CLASSES),
        Field("preemptible", "bool", "Whether a waiting job of a higher class may take its place; null: true for "
              + ", ".join(queue.PREEMPTIBLE_BY_DEFAULT) + " only.", nullable=True),
    )),
    Field("retries", "object", "Resubmit a job that failed for an infrastructure reason as a linked attempt "
          "(<submission_id>-r1, -r2, ...) that resumes from the newest whole checkpoint (verl workloads).",
          fields=(
              Field("max", "int", "Attempts after the first; 0: never retried.", default=0, minimum=0),
              Field("on", "list", "Failure kinds (the record's diagnosis) that are retried.",
                    default=["node_died", "head_restarted", "nccl_gloo"], item=Field("", "str", choices=RETRYABLE)),
              Field("cordon", "bool", "Before the next attempt, cordon the workers the failed one's blame names (as "
                    "cordon.yml does), so it runs on the healthy ones; too few left for resources: not retried.",
                    default=True),
          )),
    Field("debug", "object", "Ray's debugger (debugpy) for the job's tasks and actors: it listens on the node's "
          "cluster address, never 0.0.0.0; attach with VS Code's Ray Distributed Debugger.",
          fields=(
              Field("breakpoints", "bool", "breakpoint() in a task or actor waits for a debugger (RAY_DEBUG=1). Off: "
                    "RAY_DEBUG=0, so a breakpoint() left in code never holds a job.", default=False),
              Field("post_mortem", "bool", "A task or actor that raises waits for a debugger instead of failing "
                    "(RAY_DEBUG_POST_MORTEM=1): the job runs on until it is stopped or reaches max_run_s.",
                    default=False),
          )),
    Field("resume_from", "str", "Submission id of an earlier job (of the same spec) whose newest whole checkpoint, "
          "over its record and its attempts', this job resumes from; set by retries and job.yml do=resume.",
          pattern=conventions.ID_RULE, nullable=True),
    Field("env", "map", "Environment variables of the job (strings); they win over ray_config.runtime_env.env_vars. "
          "None that chooses the code, none the spec sets (jobspecs/README.md, What the spec owns).",
          default={}, pattern=ENV_NAME_RULE, item=_STRING),
    Field("overrides", "list", "Extra hydra overrides for ppo/grpo/sft, appended last so they win; none that deletes "
          "a key, sets a key the spec renders or calls a resolver (jobspecs/README.md, What the spec owns). "
          "Lists from site defaults, the spec and -e are concatenated in that order.",
          default=[], item=Field("", "str", pattern=_OVERRIDE)),
    Field("reward_fn_path", "path", "Python file with a custom reward function "
          "(reward.custom_reward_function.path; ppo and grpo).", nullable=True),
    Field("project_name", "str", "trainer.project_name.", default="verl-ray", pattern=conventions.ID_RULE),
    Field("experiment_name", "str", "trainer.experiment_name.", pattern=conventions.ID_RULE,
          derived="the submission id"),
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
                                   "the GCS store's reconnect window (0: no store, fail at once)."), default=0,
          minimum=0),
    Field("tensorboard_url", "str", ("Where the cluster's TensorBoard serves the shared root's runs "
                                     "(roles/ray_tensorboard): a job's progress line and the regression summary link "
                                     "to its run. Null: no link."), pattern=_URL, nullable=True),
)

NAME_FIELD = Field("name", "str", pattern=conventions.NAME_RULE)


# ---------------------------------------------------------------- checks against the tables


def check(f, value, path, complete=True):
    """Return value normalised (paths cleaned, containers copied); raise JobSpecError naming the field if bad.

    path: the field's dotted name; complete: absent fields of nested objects count as null (model.check_fields).
    No value anywhere may hold NUL: argv, env and paths would cut it there silently."""
    try:
        return model.check(f, value, (path,) if path else (), complete=complete)
    except model.FieldError as err:
        raise JobSpecError(err.field, err.problem, err.value, err.got) from None


def check_fields(fields, value, path, *, complete):
    """Check a mapping against a field table; with complete, absent fields count as null."""
    if not isinstance(value, dict):
        raise JobSpecError(path or "spec", "must be a mapping", value)
    try:
        return model.check_fields(fields, value, (path,) if path else (), complete=complete)
    except model.FieldError as err:
        raise JobSpecError(err.field, err.problem, err.value, err.got) from None
