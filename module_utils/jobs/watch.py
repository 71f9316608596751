"""action=watch: one pass over every open record on the shared root, so that nobody has to follow a job.

For each record that is not final: a job Ray says ended is finalised; a running job past its own timeouts is
stopped and finalised; a running job's progress is tracked and a hang is handled (follow.look); a job the
restarted head forgot is finalised (reconcile). Failed jobs whose spec retries their diagnosis are returned, for
the action plugin to submit the next attempt. Every step is the same one a wait would take, under the record's
locks, so a watcher is safe beside a wait of the same job and beside another watcher. A record that cannot be
read is reported, never changed; when Ray cannot be read the whole pass fails (fail closed: nothing is judged).
"""

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs import client as jc
from ansible.module_utils.jobs import driver_log, evidence, follow, reconcile
from ansible.module_utils.jobs.job import Failed, Job
from ansible.module_utils.jobs.record import now_ms
from ansible.module_utils.jobs.status import RecordError


def retry_due(status):
    """Whether the action plugin should submit this final record's next attempt (its spec retries its kind; the
    plugin's attempt action counts the attempts made)."""
    policy, kind = status.retries or {}, (status.diagnosis or {}).get("kind")
    if status.state != "FAILED" or kind not in (policy.get("on") or []) or not policy.get("max"):
        return False
    # A job stopped for its own time limits, by a person or by Slurm is not retried; one stopped as hung is.
    return status.reason not in conventions.OWN_STOP_REASONS or status.reason == conventions.HUNG_REASON


def one(module, job, head_started):
    """Bring one open record up to date; returns what happened: (verb, status)."""
    status = job.status()
    if status.final:
        return "final", status
    if status.rebuilt:
        return "unreadable", status  # never judged from a guess (Record.status rebuilt it)
    info = job.info()
    if info is None:
        started = reconcile.forgotten_since(job, status, head_started)
        if started is None or module.check_mode:
            return "unknown", status
        return "finalized", reconcile.finalize_forgotten(job, status, started)[0]
    if module.check_mode:
        return "open", status
    summary = jc.summary(info)
    reason = follow.overdue(summary, status, now_ms())
    if reason:
        info = follow.stop_for(job, status, reason)
        if info is None:
            return "open", status
    if jc.is_terminal(info) or status.reason == "PENDING_TIMEOUT":
        return "finalized", evidence.finalize(job, info, status)
    log = driver_log.refresh_log(job)
    status.state = summary["status"]
    ended = follow.look(job, status, info, log)
    if ended is not None:
        return "finalized", ended
    job.save_status(status)
    return "open", status


def watch(module, config):
    """The pass; returns the module result (lists of ids by what happened, and the attempts due)."""
    unreadable = []
    open_ids = reconcile.open_records(config.shared_root, unreadable, tidy=not module.check_mode)
    result = {"changed": False, "finalized": [], "ended": {}, "open": [], "hung": [], "unreadable": unreadable,
              "retry": [], "errors": []}
    if not open_ids:
        return dict(result, msg="no open job records" + (f"; {len(unreadable)} unreadable" if unreadable else ""))
    probe = Job(module, config, open_ids[0], conventions.job_dir(config.shared_root, open_ids[0]))
    head_started = probe.client.head_started_ms()  # Ray unreadable: the pass fails here, having changed nothing
    for sid in open_ids:
        try:
            job = Job(module, config, sid, conventions.job_dir(config.shared_root, sid), client=probe.client)
            verb, status = one(module, job, head_started)
        except RecordError as exc:
            result["unreadable"].append(f"{sid}: {exc}")
            continue
        except Failed as exc:
            result["errors"].append(str(exc))
            continue
        result["changed"] = result["changed"] or job.changed
        if verb == "finalized":
            result["finalized"].append(sid)
            result["ended"][sid] = status.state + (f" ({status.reason})" if status.reason else "") + (
                f": {status.diagnosis['kind']}" if status.diagnosis else "")
            if retry_due(status):
                result["retry"].append(sid)
        elif verb == "unreadable":
            result["unreadable"].append(f"{sid}: {status.rebuilt}")
        else:
            result["open"].append(sid)
            if status.stall and not status.final:
                result["hung"].append({"submission_id": sid, "summary": status.stall.get("summary"),
                                       "since": status.stall.get("since")})
    result["msg"] = (f"{len(open_ids)} open record(s): {len(result['finalized'])} finalised, "
                     f"{len(result['hung'])} hung, {len(result['retry'])} to retry, "
                     f"{len(result['unreadable'])} unreadable, {len(result['open'])} still open")
    return result
