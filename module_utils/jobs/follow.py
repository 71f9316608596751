"""Following a job: wait (with its timeouts), stop, status and logs, each bringing the record up to date."""

import time

from ansible.module_utils.base import conventions, files
from ansible.module_utils.base.files import RecordError
from ansible.module_utils.jobs import client as jc
from ansible.module_utils.jobs import driver_log, evidence, hang, reconcile
from ansible.module_utils.jobs.job import Failed
from ansible.module_utils.jobs.record import now_ms

# Lines of the driver log that action=logs returns, out of at most its last LOG_TAIL_BYTES.
LOG_TAIL_LINES = 100
LOG_TAIL_BYTES = 1 << 20
# How long a stop waits for Ray to report the job ended (Ray may never stop a job whose driver was not placed).
STOP_WAIT_S = {"PENDING_TIMEOUT": 10}
STOP_WAIT_DEFAULT_S = 30


def stop_for(job, status, reason):
    """Stop a job we gave up on and say why in its record (a record another run finalised stays as it is).

    The reason is left in the record before Ray is asked: a wait polling meanwhile (one whose controller was
    interrupted goes on for up to poll_s on the head) can see the job STOPPED before this run writes status.json,
    and finalises it with this reason rather than without one. A run killed while asking leaves the file behind;
    it only ever explains a job Ray reports STOPPED."""
    requested = job.record.request_stop(reason)
    try:
        job.client.stop(job.sid)
    except Exception as exc:  # noqa: BLE001 - a stop that failed is not recorded as one
        if requested:
            job.record.withdraw_stop_request(reason)
        raise Failed(f"{job.sid}: stopping the job failed, its record is unchanged: "
                     f"{conventions.one_line(job.redact(str(exc)), 200)}") from None
    status.reason = reason
    job.save_status(status)
    if requested:  # status.json says it now
        job.record.withdraw_stop_request(reason)
    # Ray may not stop a job whose driver was never placed (ray#31008); it fails such a job itself at
    # RAY_JOB_START_TIMEOUT_SECONDS. We record our verdict without waiting for that.
    deadline = time.monotonic() + STOP_WAIT_S.get(reason, STOP_WAIT_DEFAULT_S)
    while time.monotonic() < deadline:
        info = job.info()
        if jc.is_terminal(info):
            return info
        time.sleep(1)
    return job.info()


def overdue(summary, status, now):
    """The reason to stop a job its own timeouts no longer allow, or None."""
    timeouts = status.timeouts or {}
    pending_s = timeouts.get("pending_s") or conventions.DEFAULT_PENDING_S
    if summary["status"] == "PENDING" and status.submitted_at and now - status.submitted_at > pending_s * 1000:
        return "PENDING_TIMEOUT"
    max_run_s = timeouts.get("max_run_s")
    if (summary["status"] == "RUNNING" and max_run_s and summary["start_time"]
            and now - summary["start_time"] > max_run_s * 1000):
        return "DEADLINE_EXCEEDED"
    return None


def follow(module, job):
    """action=wait: follow the job for up to poll_s seconds, enforcing its pending_s and max_run_s."""
    status = job.status()
    if status.final:
        return job.result(status, f"{evidence.final_line(job, status)} (final)")
    if module.check_mode:
        return job.result(status, f"{job.sid}: not followed in check mode")
    deadline = time.monotonic() + module.params["poll_s"]
    while True:
        info = job.info()
        if info is None:
            if status.rebuilt:  # no status.json to say it was submitted: never finalised from a guess
                raise Failed(f"{job.sid}: Ray does not know this job and its {status.rebuilt}; the record is unchanged",
                             **job.result(status, f"{job.sid}: unknown to Ray"))
            status = reconcile.forgotten(job, status)
            return job.result(status, evidence.final_line(job, status))
        summary = jc.summary(info)
        if module.params.get("last_seen_ms") and evidence.note_outage(
                status, summary["start_time"], job.client.head_started_ms(), module.params["last_seen_ms"], "wait"):
            module.params["last_seen_ms"] = None  # noted once
            job.save_status(status)
        reason = overdue(summary, status, now_ms())
        if reason:
            info = stop_for(job, status, reason)
            if info is None:  # Ray forgot the job while it stopped (its head restarted): the next poll says so
                break
            summary = jc.summary(info)
        if jc.is_terminal(info) or status.reason == "PENDING_TIMEOUT":
            status = evidence.finalize(job, info, status)
            return job.result(status, evidence.final_line(job, status))
        if time.monotonic() >= deadline:
            break
        time.sleep(1)
    log = driver_log.refresh_log(job)
    status.state = summary["status"]
    ended = look(job, status, info, log)
    if ended is not None:
        return job.result(ended, evidence.final_line(job, ended))
    job.save_status(status)
    return job.result(status, evidence.progress_line(job, info, status, log))


def look(job, status, info, log):
    """A running job's progress (hang.track); a hang found takes the job's stacks and then reports it or stops it
    (reason HUNG), per its spec. Returns the final status when the job was stopped and finalised, else None."""
    if jc.summary(info)["status"] != "RUNNING":
        return None
    now = now_ms()
    hang.track(status, log, now)
    stall = hang.hung(status, now)
    if stall is None:
        return None
    try:
        from ansible.module_utils.jobs import stacks  # only when a job is hung: it reads every process of the job

        taken = stacks.dump(job, now)
    except Exception as exc:  # noqa: BLE001 - the verdict stands without stacks; the record says why
        taken = {"dir": None, "summary": f"no stacks: {conventions.one_line(job.redact(str(exc)), 200)}"}
    stall.update(stacks=taken.get("dir"), summary=taken.get("summary"))
    status.stall = stall
    job.save_status(status)
    if stall["action"] != "stop":
        return None
    info = stop_for(job, status, conventions.HUNG_REASON)
    return evidence.finalize(job, info, status) if jc.is_terminal(info) else None


def stop(module, job):
    """action=stop: stop a running job for stop_reason and finalise its record once Ray says it stopped."""
    status, info = job.status(), job.info()
    running = info is not None and not jc.is_terminal(info)
    if running and not module.check_mode:
        info = stop_for(job, status, module.params["stop_reason"])
        if jc.is_terminal(info):
            status = evidence.finalize(job, info, status)
        elif info is not None:  # Ray has not stopped it yet: a later status or wait finalises the record
            status.state = jc.summary(info)["status"]
            job.save_status(status)
    # In check mode, say that a stop would change the job.
    return dict(job.result(status, f"{job.sid}: {'stopped' if running else 'not running'}"), changed=running)


def refresh(module, job):
    """action=status/logs: bring the record up to date with Ray (finalising it when the job ended). Returns the status,
    the driver log (evidence.refresh_log's, "" when not looked at) and Ray's JobInfo (None: Ray does not know it)."""
    status, info = job.status(), job.info()
    log = ""
    if info is None and not status.final and not status.rebuilt and not module.check_mode:
        status = reconcile.forgotten(job, status)
    if info is not None and not module.check_mode:
        if not status.final:
            if jc.is_terminal(info):
                status = evidence.finalize(job, info, status)
            else:
                status.state = jc.summary(info)["status"]
                job.save_status(status)
        log = driver_log.refresh_log(job)
    return status, log, info


def status_action(module, job):
    status, log, info = refresh(module, job)
    if status.final:
        return job.result(status, evidence.final_line(job, status))
    if log and info is not None:  # a job Ray runs: the line a follower prints (step N of M, loss, ...)
        return job.result(status, evidence.progress_line(job, info, status, log))
    return job.result(status, f"{job.sid}: {status.state}")


def logs_action(module, job):
    """action=logs: the record brought up to date (Ray's log copied into it), then the log's tail. The record's
    logs/driver.log is checked as a small regular file (files.read_small): a symlink or a FIFO there is named and
    nothing is shown (what was read meanwhile may have come through it); else the record's log, which refresh brought
    up to date with Ray's (its whole lines; in check mode, or when Ray has no log, as the record had it)."""
    status, log, _ = refresh(module, job)
    try:
        kept = files.read_text(job.rec["driver_log"], LOG_TAIL_BYTES, tail=True, base=job.rec["dir"])
    except (OSError, RecordError) as exc:
        return dict(job.result(status, f"{job.sid}: {status.state}; not shown: {conventions.one_line(str(exc), 300)}"),
                    log_tail="")
    text = conventions.printable(kept or "")
    if log and not log.endswith("\n"):  # the line the driver is writing: Ray's, not yet in the record
        text += log.rsplit("\n", 1)[-1]
    tail = "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
    return dict(job.result(status, f"{job.sid}: {status.state}"), log_tail=job.redact(tail))
