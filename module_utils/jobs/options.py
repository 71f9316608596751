"""The ray_job options, one table: the module's argument spec and its action plugin's are both derived from it.

Each option says where it is taken: "module" (the ray_job module on the head), "action" (its action plugin on the
control host, action_plugins/ray_job.py) or both. library/ray_job.py's DOCUMENTATION documents the union; a unit
test (tests/unit/library/test_module_docs.py) fails when the two disagree.
"""

from ansible.module_utils.base import conventions

# What each action does and who carries it out.
ACTIONS = {
    "submit": ("both", "resolve (action) and submit a JobSpec, writing its record"),
    "wait": ("both", "follow a job until its record is final (the module: for up to poll_s per call)"),
    "status": ("both", "bring the record up to date with Ray and show it"),
    "stop": ("both", "stop a running job for stop_reason and finalise its record"),
    "logs": ("both", "the end of the driver log"),
    "stacks": ("both", "the Python stacks of a running job's processes into its record (debug/stacks/)"),
    "reconcile": ("both", "finalise the records of jobs a restarted head forgot"),
    "watch": ("both", ("one pass over every open record: finalise, enforce timeouts, handle hangs, reconcile, and "
                       "submit the next attempt of each job the retry rule retries (module_utils/jobs/life/chain.py)")),
    "resume": ("both", "submit the next attempt from the newest whole checkpoint (the action then follows it)"),
    "next": ("module", ("after an attempt ended: follow its newest attempt, or decide its retry, cordon around "
                        "the blamed and submit the next attempt (chain.py); the follower's one call per decision")),
}
# The actions that name a job (submission_id required).
NEEDS_ID = ("wait", "status", "stop", "logs", "resume", "next", "stacks")
# What a person asks of one job (job.yml -e do=...): those that name a job, but the module's own.
PER_JOB = tuple(a for a in NEEDS_ID if ACTIONS[a][0] != "module")

# name: (where, argument spec)
OPTIONS = {
    "action": ("both", {"type": "str", "default": "submit"}),
    "spec": ("both", {"type": "raw"}),
    "submission_id": ("both", {"type": "str"}),
    "stop_reason": ("both", {"type": "str", "choices": list(conventions.STOP_REASONS),
                             "default": conventions.DEFAULT_STOP_REASON}),
    "poll_s": ("both", {"type": "int", "default": conventions.POLL_S}),
    "preflight": ("both", {"type": "bool", "default": True}),
    "output_dir": ("module", {"type": "path"}),
    "last_seen_ms": ("module", {"type": "int"}),
    # What only the control host has for a next attempt: the secret env values its record keeps redacted.
    "secret_env": ("module", {"type": "dict", "no_log": True}),
    # The queue's (module_utils/jobs/submission/admission.py): who submits, the site's quotas and preempting classes,
    # all filled by the action plugin (the control host's login or -e submitter; the inventory's ray_queue_*).
    "submitter": ("module", {"type": "str"}),
    "queue_quotas": ("module", {"type": "dict"}),
    "queue_preempting": ("module", {"type": "list", "elements": "str"}),
    "overrides": ("action", {"type": "dict", "default": {}}),
    "extra_vars": ("action", {"type": "bool", "default": False}),
    "wait": ("action", {"type": "bool", "default": False}),
    "specs_dir": ("action", {"type": "path"}),
    "suite": ("action", {"type": "str"}),
    "entry": ("action", {"type": "str"}),
    "suites_dir": ("action", {"type": "path"}),
    "python": ("action", {"type": "str"}),
}


def argument_spec(side):
    """The argument spec of one side ("module" or "action"), from OPTIONS and ACTIONS.

    Both sides take every action, so both documents agree: the action plugin hands `next` to the module (its
    follower's call after an attempt ended), and the module's `resume` submits the attempt the action then follows."""
    spec = {name: dict(arg) for name, (where, arg) in OPTIONS.items() if where in ("both", side)}
    spec["action"]["choices"] = list(ACTIONS)
    return spec


def required_if():
    return [("action", action, ("submission_id",)) for action in NEEDS_ID]
