"""Following a job: wait, stop, status and logs, each bringing the record up to date with one step (step.py)."""

import time

from ansible.module_utils.base import conventions, files
from ansible.module_utils.base.files import RecordError
from ansible.module_utils.jobs.evidence import driver_log, evidence
from ansible.module_utils.jobs.life import reconcile, step
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record import record
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.record.status import QUEUED
from ansible.module_utils.jobs.submission import admission, submit

# How often a follower of a QUEUED job asks the queue within one wait call (each ask reads Ray's resources).
ADMIT_EVERY_S = 5
# Lines of the driver log that action=logs returns, out of at most its last LOG_TAIL_BYTES.
LOG_TAIL_LINES = 100
LOG_TAIL_BYTES = 1 << 20


def wait_action(module, job):
    """action=wait: follow the job for up to poll_s seconds, a cheap step (Ray's state, the job's timeouts) each
    second and a whole one (progress, hang) at the end, as the watcher takes it (step.py)."""
    status = job.status()
    if status.final:
        return job.result(status, f"{evidence.final_line(job, status)} (final)")
    if module.check_mode:
        return job.result(status, f"{job.sid}: not followed in check mode")
    deadline = time.monotonic() + module.params["poll_s"]
    lines = []
    if status.state == QUEUED:
        status, lines = wait_queued(module, job, deadline)
        if status.final or status.state == QUEUED:
            line = evidence.final_line(job, status) if status.final else admission.line(job.sid, status.queue)
            return job.result(status, line, queue_lines=lines)
    last_seen_ms = module.params.get("last_seen_ms")
    while True:
        look = time.monotonic() >= deadline
        done = step.step(job, status, last_seen_ms=last_seen_ms, look=look)
        last_seen_ms, status = None, done.status  # an outage is noted on the first step
        if done.verb == step.UNREADABLE:
            known = "" if status.rebuilt.startswith(record.UNREADABLE) else "Ray does not know this job and "
            raise Failed(f"{job.sid}: {known}its {status.rebuilt}; the record is unchanged",
                         **job.result(status, f"{job.sid}: {status.rebuilt}"))
        if done.verb == step.UNKNOWN:
            status = reconcile.forgotten(job, status)  # fails naming why, unless the head restarted just now
            return job.result(status, evidence.final_line(job, status))
        if done.verb in (step.FINAL, step.FINALIZED):
            # What it held is free: the queue is asked once, so the next one starts (also when another run finalised
            # it: that run may have been a stop, which asks too, or a reconcile, which does not).
            if not module.check_mode:
                lines += submit.admit(module, job.config, job.client)["lines"]
            return job.result(status, evidence.final_line(job, status), queue_lines=lines)
        if done.info is None:  # Ray forgot the job while it was stopped: the next wait says so
            return job.result(status, f"{job.sid}: {status.state}")
        if look:
            return job.result(status, evidence.progress_line(job, done.info, status, done.log))
        time.sleep(1)


def wait_queued(module, job, deadline):
    """A follower of a QUEUED job asks the queue (submit.admit) every ADMIT_EVERY_S until it is admitted, ended
    (stopped, its queue_s) or the call's poll_s is over. Returns its status and what the admissions said."""
    known = module.params.get("spec")
    lines = []
    while True:
        asked = submit.admit(module, job.config, job.client, {job.sid: known} if isinstance(known, dict) else None)
        lines += [line for line in asked["lines"] if line not in lines]
        status = job.status()
        left = deadline - time.monotonic()
        if status.final or status.state != QUEUED or left <= 0:
            return status, lines
        time.sleep(min(ADMIT_EVERY_S, left))


def stop(module, job):
    """action=stop: stop a running job for stop_reason and finalise its record once Ray says it stopped; a QUEUED
    one is taken out of the queue with a final record (STOPPED, never submitted to Ray)."""
    status = job.status()
    if status.state == QUEUED and not status.final:
        if module.check_mode:
            return dict(job.result(status, f"{job.sid}: would be taken out of the queue"), changed=True)
        status = admission.end_queued(job.record, None, module.params["stop_reason"],
                                      "taken out of the queue before it was submitted to Ray")
        if status.final:
            return dict(job.result(status, f"{job.sid}: taken out of the queue: {status.state} ({status.reason})"),
                        changed=True)
    info = job.info()
    running = info is not None and not jc.is_terminal(info)
    if running and not module.check_mode:
        info = step.stop_for(job, status, module.params["stop_reason"])
        if jc.is_terminal(info):
            status = evidence.finalize(job, info, status)
        elif info is not None:  # Ray has not stopped it yet: a later status or wait finalises the record
            status.state = jc.summary(info)["status"]
            job.save_status(status)
    lines = []
    if running and not module.check_mode and jc.is_terminal(info):  # what it held is free: the next one starts
        lines = submit.admit(module, job.config, job.client)["lines"]
    # In check mode, say that a stop would change the job.
    return dict(job.result(status, f"{job.sid}: {'stopped' if running else 'not running'}"), changed=running,
                queue_lines=lines)


def refresh(module, job):
    """action=status/logs: one step (step.py) brings the record up to date with Ray. Returns the status, the driver
    log (driver_log.refresh_log's, "" when not looked at) and Ray's JobInfo (None: Ray does not know it)."""
    status = job.status()
    done = step.step(job, status, check_mode=module.check_mode, act=False)  # a look: it never stops the job
    status, info, log = done.status, done.info, done.log
    if done.verb == step.UNKNOWN and not module.check_mode:
        status = reconcile.forgotten(job, status)  # fails naming why, unless the head restarted just now
    if done.verb == step.FINAL:
        info = job.info()
    if info is not None and not module.check_mode and not log:
        log = driver_log.refresh_log(job)  # a final job's log, copied to its end
    return status, log, info


def status_action(module, job):
    status = job.status()
    if status.state == QUEUED and not status.final:  # its place and why it waits, as the last admission wrote them
        return dict(job.result(status, admission.line(job.sid, status.queue)), queue=status.to_dict()["queue"])
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
