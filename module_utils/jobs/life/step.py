"""One step of a job's life: bring one open record up to date with Ray. The follower (action=wait, so submit.yml -e
wait=true and job.yml -e do=wait), job.yml's status and logs, and the watcher's pass all take this step, so a job
that is followed and one nobody follows end the same way, with the same record.

A step, in order: Ray forgot the job (its head restarted) → finalised; the head came back meanwhile → the outage is
noted; the job's own pending_s or max_run_s passed → it is stopped; Ray says it ended → finalised with its evidence;
else (look=True) the driver log is copied, progress tracked, and a hang found takes the stacks and, per the spec,
stops it. Every write is under the record's locks (record.py), so steps of one job by several runs are safe.
"""

import time

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.evidence import driver_log, evidence, hang
from ansible.module_utils.jobs.life import reconcile
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record import record
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.record.record import now_ms
from ansible.module_utils.jobs.record.status import QUEUED

# What a step did: the record was final already, this step finalised it, it stays open, Ray does not know the job
# and its head has run since before it was submitted (nothing judged), or the record cannot be trusted.
FINAL, FINALIZED, OPEN, UNKNOWN, UNREADABLE = "final", "finalized", "open", "unknown", "unreadable"
# How long a stop waits for Ray to report the job ended (Ray may never stop a job whose driver was not placed).
STOP_WAIT_S = {"PENDING_TIMEOUT": 10}
STOP_WAIT_DEFAULT_S = 30


class Step:
    """What one step found: its verb, the record's status after it, Ray's JobInfo (None: unknown to Ray) and the
    driver log's text this step saw ("" when it did not look)."""

    def __init__(self, verb, status, info=None, log=""):
        self.verb, self.status, self.info, self.log = verb, status, info, log


def step(job, status, check_mode=False, head_started=None, last_seen_ms=None, look=True, act=True):
    """One step for the open record of job, whose status the caller read (job.status()).

    head_started: the head's start (ms) when the caller knows it (the watcher reads it once per pass).
    last_seen_ms: when a follower last saw the job through the head (a head outage is noted from it).
    act: whether this step may stop the job (its timeouts, a hang); job.yml's status and logs only look."""
    if status.final:
        return Step(FINAL, status)
    if status.state == QUEUED:  # not in Ray yet: the queue's admission moves it on (submit.admit), nothing else
        return Step(OPEN, status)
    if status.rebuilt and status.rebuilt.startswith(record.UNREADABLE):
        # status.json is there but could not be read (EIO, ESTALE on NFS: it may pass): nothing is judged from the
        # guess Record.status rebuilt. One that was read and not trusted is kept aside and rebuilt with Ray's help.
        return Step(UNREADABLE, status)
    info = job.info()
    if info is None:
        if status.rebuilt:  # no status.json to say it was submitted: never finalised from a guess
            return Step(UNREADABLE, status)
        started = reconcile.forgotten_since(job, status, head_started or job.client.head_started_ms())
        if started is None or check_mode:
            return Step(UNKNOWN, status)
        return Step(FINALIZED, reconcile.finalize_forgotten(job, status, started)[0])
    if check_mode:
        return Step(OPEN, status, info)
    summary = jc.summary(info)
    if last_seen_ms and evidence.note_outage(
            status, summary["start_time"], head_started or job.client.head_started_ms(), last_seen_ms, "wait"):
        job.save_status(status)
    # A stop already asked (by a person, Slurm, or for a reason of ours) is never overwritten by another reason:
    # Ray may take a while to stop the job, and a person's stop must not turn into a retried hang.
    stopping = status.reason in conventions.OWN_STOP_REASONS or job.record.stop_request()
    reason = overdue(summary, status, now_ms()) if act and not stopping else None
    if reason:
        status.state = summary["status"]  # what Ray said before the stop, kept if Ray forgets the job meanwhile
        info = stop_for(job, status, reason)
        if info is None:  # Ray forgot the job while it stopped (its head restarted): the next step says so
            job.save_status(status)
            return Step(OPEN, status)
        summary = jc.summary(info)
    if jc.is_terminal(info) or status.reason == "PENDING_TIMEOUT":
        return Step(FINALIZED, evidence.finalize(job, info, status), info)
    if not look:
        return Step(OPEN, status, info)
    log = driver_log.refresh_log(job)
    status.state = summary["status"]
    ended = look_for_hang(job, status, info, log) if act and not stopping else None
    if ended is not None:
        return Step(FINALIZED, ended, info, log)
    job.save_status(status)
    return Step(OPEN, status, info, log)


def overdue(summary, status, now):
    """The reason to stop a job its own timeouts no longer allow, or None."""
    pending_s = status.timeouts.pending_s or conventions.DEFAULT_PENDING_S
    if summary["status"] == "PENDING" and status.submitted_at and now - status.submitted_at > pending_s * 1000:
        return "PENDING_TIMEOUT"
    max_run_s = status.timeouts.max_run_s
    if (summary["status"] == "RUNNING" and max_run_s and summary["start_time"]
            and now - summary["start_time"] > max_run_s * 1000):
        return "DEADLINE_EXCEEDED"
    return None


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


def look_for_hang(job, status, info, log):
    """A running job's progress (hang.track); a hang found takes the job's stacks and then reports it or stops it
    (reason HUNG), per its spec. Returns the final status when the job was stopped and finalised, else None."""
    if jc.summary(info)["status"] != "RUNNING":
        return None
    if status.stall and status.stall.action == "stop":
        # Found hung before, and the stop failed then (a stop that worked leaves reason HUNG): ask Ray again.
        info = stop_for(job, status, conventions.HUNG_REASON)
        return evidence.finalize(job, info, status) if jc.is_terminal(info) else None
    now = now_ms()
    hang.track(status, log, now)
    stall = hang.hung(status, now)
    if stall is None:
        return None
    try:
        from ansible.module_utils.jobs.evidence import (
            stacks,  # only when a job is hung: it reads every process of the job
        )

        taken = stacks.dump(job, now)
    except Exception as exc:  # noqa: BLE001 - the verdict stands without stacks; the record says why
        taken = {"dir": None, "summary": f"no stacks: {conventions.one_line(job.redact(str(exc)), 200)}"}
    stall.stacks, stall.summary = taken.get("dir"), taken.get("summary")
    status.stall = stall
    job.save_status(status)
    if stall.action != "stop":
        return None
    info = stop_for(job, status, conventions.HUNG_REASON)
    return evidence.finalize(job, info, status) if jc.is_terminal(info) else None
