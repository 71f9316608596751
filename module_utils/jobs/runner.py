"""Carrying out one ray_job action on the head, and the one-line message of a failure outside it."""

import os

from ansible.module_utils.base import conventions
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs import options
from ansible.module_utils.jobs.evidence import stacks
from ansible.module_utils.jobs.life import chain, follow, reconcile, watch
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record.job import Failed, Job
from ansible.module_utils.jobs.record.record import LockTimeout
from ansible.module_utils.jobs.record.status import RecordError
from ansible.module_utils.jobs.submission import submit
from ansible.module_utils.jobspec import model as js

# Where Ray's client raises from (its SDK, HTTP and its libraries): an error raised there is Ray's, whatever its type.
_RAY_PACKAGES = ("ray", "requests", "urllib3", "aiohttp")
ACTIONS = {"wait": follow.wait_action, "stop": follow.stop, "status": follow.status_action, "logs": follow.logs_action,
           "next": chain.next_action, "resume": chain.resume_action, "stacks": stacks.stacks_action}


def run(module):
    """Carry out the module's action; returns its result or raises Failed."""
    p = module.params
    try:
        config = js.RayConfig.from_dict(p["ray_config"])
    except js.JobSpecError as exc:
        raise Failed(str(exc)) from None
    if options.ACTIONS[p["action"]][0] == "action":
        raise Failed(f"action={p['action']} is the action plugin's: run ray_job as a task (not the module alone)")
    rc.prepare_client_env(p["token_path"])
    if p["action"] == "submit":
        return submit.submit(module, config)
    if p["action"] == "reconcile":
        return reconcile.reconcile(module, config)
    if p["action"] == "watch":
        return watch.watch(module, config)
    try:
        sid = conventions.check_id("submission_id", p["submission_id"])
    except ValueError as exc:
        raise Failed(str(exc)) from None
    output_dir = conventions.job_dir(config.shared_root, sid)
    if p["output_dir"] not in (None, output_dir):
        raise Failed(f"output_dir: must be {output_dir} (the record of submission_id {sid})")
    if not os.path.isdir(output_dir):
        raise Failed(f"submission_id '{sid}': no job record at {output_dir}", submission_id=sid)
    return ACTIONS[p["action"]](module, Job(module, config, sid, output_dir))


def from_ray(exc):
    """Whether exc came from talking to Ray: an OSError (connection, timeout, a file), the plain RuntimeError Ray's SDK
    raises for an HTTP error, or anything raised inside Ray's client and its libraries (_RAY_PACKAGES)."""
    if isinstance(exc, OSError) or type(exc) is RuntimeError:
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return any(f"{os.sep}{pkg}{os.sep}" in where for pkg in _RAY_PACKAGES)


def internal_error(exc):
    """One line for an error of the module itself (a TypeError, a KeyError...): never "cannot talk to Ray"."""
    tb, where = exc.__traceback__, ""
    while tb is not None:
        where = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return (f"ray_job failed on the head, not in Ray: {type(exc).__name__} at {where or '?'}: "
            f"{conventions.one_line(str(exc), 200)} (a bug of ray_job: report it with the record's id)")


def connection_problem(exc, p):
    """One line for a failure outside the module: the dashboard address, the token file when it was refused, or the
    record's file the system would not write (requests' connection errors are OSErrors without a filename); an error
    that is not Ray's is the module's own (internal_error)."""
    if not from_ray(exc):
        return internal_error(exc)
    url = (p["ray_config"] or {}).get("dashboard_url")
    text = conventions.one_line(str(exc), 200)
    filename = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    if filename and filename == p["token_path"]:
        return f"cannot read the Ray token file {p['token_path']}: {exc.strerror}"
    if filename:  # disk full, permission denied...: a retry of the same command completes what was begun
        return f"cannot write the job record at {filename}: {exc.strerror}; fix that and run the same command again"
    if any(sign in text for sign in ("401", "403", "Unauthorized", "Forbidden", "authentication")):
        return f"Ray at {url} refused the token from {p['token_path'] or '(no token file)'}: {text}"
    return f"{jc.UNREACHABLE} at {url}: {type(exc).__name__}: {text}"


def main(module):
    """Run the action and exit the module with its result or a one-line failure."""
    try:
        result = run(module)
    except Failed as exc:
        module.fail_json(msg=str(exc), **exc.result)
    except (LockTimeout, RecordError) as exc:  # one line naming the record's file (files.UnsafeFile is a RecordError)
        module.fail_json(msg=str(exc))
    except Exception as exc:  # noqa: BLE001 - Ray's client: one line naming the address or the token file
        msg = connection_problem(exc, module.params)
        # A head that does not answer may be coming back (a GCS store): the follower decides how long to wait, reading
        # this message with jc.head_down.
        module.fail_json(msg=msg)
    module.exit_json(**result)
