"""Names and paths every part of the project agrees on, defined once.

Every file imports this as ansible.module_utils.base.conventions (on the control host through the
bootstrap, plugin_utils/__init__.py). It imports only the standard library.
"""

import posixpath
import re
import urllib.parse

# (regex, what a valid value looks like). Anchored: used with re.fullmatch and as JSON Schema patterns.
ID_RULE = (r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
           "1-128 letters, digits or ._- starting with a letter or digit")
# The name of a spec file (jobspecs/<name>.yaml) or suite file (suites/<name>.yaml). Shorter than an
# id, so <name>-<time>-<hex> always makes a valid default submission id.
NAME_RULE = (r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
             "1-100 letters, digits or ._- starting with a letter or digit (no path separators)")

# The module a code snapshot carries to say which code it is (written by the code_snapshot role).
MARKER_MODULE = "verl_code_marker"
MARKER_FILE = MARKER_MODULE + ".py"
# The shared storage's mark at the top of the shared root (written once by the shared_root module): a node
# that lacks it does not see the shared storage (not mounted), whatever its path holds.
SHARED_ROOT_MARK = ".shared-root-id"

# Why a stop was asked for, as the record's reason says: a person, or a Slurm allocation about to end
# (scripts/slurm_batch.py). Neither is retried.
STOP_REASONS = ("STOPPED_BY_USER", "SLURM_ALLOCATION_ENDING")
# The reasons ray_job stops a job for its own timeouts (pending_s, max_run_s): such a job FAILED.
TIMEOUT_REASONS = ("PENDING_TIMEOUT", "DEADLINE_EXCEEDED")
# The reason ray_job stops a job that made no progress for its stall_s (timeouts.on_stall, or retries.on hung):
# FAILED too, and, unlike the timeouts, retried when the spec's retries cover the diagnosis `hung`.
HUNG_REASON = "HUNG"
# ray_job's own stops, which make a stopped job FAILED.
FAILING_STOP_REASONS = (*TIMEOUT_REASONS, HUNG_REASON)
# Every reason ray_job gives a job it stopped: its timeouts, a hang, and the above.
OWN_STOP_REASONS = (*FAILING_STOP_REASONS, *STOP_REASONS)
# What a job without steps may go without its log growing, and what its stall_s is at least when the spec leaves it
# to the job's own step times (STALL_FACTOR times the median step): a slow but moving job is never called hung.
STALL_FLOOR_S = 900
STALL_FACTOR = 10
STALL_CHOICES = ("report", "stop")
# The reason a stop gives when nobody names one (job.yml -e do=stop).
DEFAULT_STOP_REASON = STOP_REASONS[0]
# The reason a queued job that waited longer than its timeouts.queue_s ends with (FAILED, never submitted to Ray).
QUEUE_TIMEOUT_REASON = "QUEUE_TIMEOUT"
# Seconds a job may wait for resources when its spec does not say (JobSpec timeouts.pending_s).
DEFAULT_PENDING_S = 600
# Seconds one ray_job wait call follows a job before it returns a progress line (-e poll_s).
POLL_S = 20


def matches(rule, value):
    return isinstance(value, str) and re.fullmatch(rule[0], value) is not None


def check_id(field, value):
    """value when it follows the id rule (one plain path component); else ValueError naming field.

    Every id check says it this one way, and never repeats the value: it may be a secret given by mistake.
    """
    if not matches(ID_RULE, value):
        raise ValueError(f"{field}: must be {ID_RULE[1]}")
    return value


# The shared root's layout: each directory under it, with its mode (the shared_root role lays it out).
# Code every job imports (common/code: verl snapshots, plugins, the smoke probe), job records and
# regression reports are written by root only (0755; the shared_root module refuses such a directory
# when someone else owns it); user/, datasets/, hf/ and outputs/ are for everyone (1777: the sticky bit
# keeps people from deleting each other's files). user/code reaches a job only when its spec asks for it.
JOBS, COMMON_CODE, USER_CODE, REGRESSION = "jobs", "common/code", "user/code", "regression"
# Acceptance reports (acceptance.yml) are not in LAYOUT: a new LAYOUT entry would change every node's settled shared
# root; the acceptance module makes the folder (root, 0755) when it first writes a report.
ACCEPTANCE = "acceptance"
LAYOUT = {"common": "0755", COMMON_CODE: "0755", JOBS: "0755", REGRESSION: "0755",
          "user": "1777", USER_CODE: "1777", "datasets": "1777", "hf": "1777", "outputs": "1777"}


def tensorboard_link(url, sid):
    """A job's run in the cluster's TensorBoard at url (ray_config.tensorboard_url), or None without one.
    roles/ray_tensorboard serves <shared_root>/jobs, so the job's run is <sid>/tensorboard; TensorBoard's runFilter
    is a regular expression (in the query: the hash only picks the dashboard), so it is anchored to that run alone."""
    if not url:
        return None
    run = urllib.parse.quote("^" + sid.replace(".", "\\.") + "/", safe="/")  # "." is an id's one special character
    return f"{url.rstrip('/')}/?runFilter={run}#timeseries"


# Where things live under the shared root.
def job_dir(shared_root, submission_id):
    """A job's record: <shared_root>/jobs/<submission_id>."""
    return posixpath.join(shared_root, JOBS, submission_id)


def verl_code_dir(shared_root, code_id):
    """A verl code snapshot: <shared_root>/common/code/verl/<code_id>."""
    return posixpath.join(shared_root, COMMON_CODE, "verl", code_id)


def smoke_code_dir(shared_root):
    """The smoke probe's code: <shared_root>/common/code/smoke."""
    return posixpath.join(shared_root, COMMON_CODE, "smoke")


def plugins_code_dir(shared_root):
    """Platform plugins beside the snapshots: <shared_root>/common/code/plugins."""
    return posixpath.join(shared_root, COMMON_CODE, "plugins")


def user_code_dir(shared_root):
    """People's own code (reward functions): <shared_root>/user/code."""
    return posixpath.join(shared_root, USER_CODE)


def regression_dir(shared_root):
    """Regression reports: <shared_root>/regression."""
    return posixpath.join(shared_root, REGRESSION)


def acceptance_code_dir(shared_root):
    """The site acceptance's measuring code (acceptance.yml): <shared_root>/common/code/acceptance."""
    return posixpath.join(shared_root, COMMON_CODE, "acceptance")


def tiny_assets_dir(shared_root):
    """The tiny model and data the acceptance's SFT trains on (the lab's too): <shared_root>/common/tiny."""
    return posixpath.join(shared_root, "common", "tiny")


def acceptance_dir(shared_root):
    """Acceptance reports, one folder per run: <shared_root>/acceptance (made by root, 0755, on its first run)."""
    return posixpath.join(shared_root, ACCEPTANCE)


def paths(shared_root):
    """All of the above for one shared root, and the layout, for playbooks and roles (the ray_verl_paths filter)."""
    return {"jobs": posixpath.join(shared_root, JOBS), "verl_code": posixpath.dirname(verl_code_dir(shared_root, "x")),
            "smoke_code": smoke_code_dir(shared_root), "plugins_code": plugins_code_dir(shared_root),
            "user_code": user_code_dir(shared_root), "regression": regression_dir(shared_root),
            "acceptance_code": acceptance_code_dir(shared_root), "tiny_assets": tiny_assets_dir(shared_root),
            "acceptance": acceptance_dir(shared_root),
            "marker_file": MARKER_FILE, "layout": dict(LAYOUT)}


# What a terminal would act on rather than show: escape sequences (OSC such as a clipboard write and the other string
# commands, up to their terminator or the end of the line, never past a newline; CSI such as clear screen; any other
# ESC with its final byte), the C0 controls but tab and newline, DEL, the C1 controls, and the bidirectional
# overrides that make text read other than it is. Alternatives without nested repetition: linear in the length.
_UNPRINTABLE = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNPRINTABLE_ONE_LINE = re.compile(r"[\t\n]|" + _UNPRINTABLE.pattern)
_SPACES = "\t\n\r\x0b\x0c"


def printable(text, keep_newlines=True):
    """text with everything a terminal would act on removed (see _UNPRINTABLE): tabs and newlines stay, or, with
    keep_newlines false, they (and CR, VT, FF) become spaces. Whatever prints text from a job or the shared root
    goes through this or one_line: a job's log must not clear the operator's screen or write to their clipboard."""
    text = str("" if text is None else text)
    if keep_newlines:
        return _UNPRINTABLE.sub("", text)
    return _UNPRINTABLE_ONE_LINE.sub(lambda m: " " if m.group() in _SPACES else "", text)


def one_line(text, width=None):
    """text on one line (whitespace runs become one space, control characters and escape sequences removed: see
    printable), cut to width with '...'."""
    line = " ".join(printable(text, keep_newlines=False).split())
    if width is not None and len(line) > width:
        line = line[: width - 3] + "..."
    return line


# A job record's folders (jobs/<submission_id>/...) and verl's metrics file in it (its file logger writes it).
RECORD_LAYOUT = ("config", "logs", "checkpoints", "debug")
METRICS_FILE = "metrics.jsonl"


def record_paths(output_dir):
    """Every file and folder of one job record (jobs/<id>/), by name."""
    join = posixpath.join
    return {
        "dir": output_dir,
        "job_spec": join(output_dir, "config", "job_spec.json"),
        "runtime_env": join(output_dir, "config", "runtime_env.json"),
        "submit_cmd": join(output_dir, "config", "submit_cmd.txt"),
        "env_names": join(output_dir, "config", "env_var_names.json"),
        "submit_out": join(output_dir, "logs", "ray_job_submit.out"),
        "driver_log": join(output_dir, "logs", "driver.log"),
        "checkpoints": join(output_dir, "checkpoints"),
        # verl's own loggers write these (jobspec/render.py sets VERL_FILE_LOGGER_PATH and TENSORBOARD_DIR to them);
        # logs/metrics.state.json is how much of metrics.jsonl a follower has read (jobs/evidence/progress.py).
        "metrics": join(output_dir, METRICS_FILE),
        "tensorboard": join(output_dir, "tensorboard"),
        "metrics_state": join(output_dir, "logs", "metrics.state.json"),
        "status_pre": join(output_dir, "debug", "ray_status_pre.txt"),
        "status_post": join(output_dir, "debug", "ray_status_post.txt"),
        "job_list_post": join(output_dir, "debug", "ray_job_list_post.txt"),
        "nodes": join(output_dir, "debug", "nodes.json"),
        "actors": join(output_dir, "debug", "actors.json"),
        "failure": join(output_dir, "debug", "failure.txt"),
        # Ray's error logs of a failed job's workers and the raylet logs of their nodes.
        "debug_logs": join(output_dir, "debug", "logs"),
        "status": join(output_dir, "status.json"),
        "preflight": join(output_dir, "preflight.json"),
        # The reason of a stop, left before Ray is asked (see step.stop_for).
        "stop_request": join(output_dir, ".stop_request"),
    }
