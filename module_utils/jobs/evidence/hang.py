"""Hung jobs: a running job whose training progress stopped moving.

Whoever follows a job (a wait's polls, a watcher's passes) tracks its progress in status.json's `progress`: the last
verl step seen and when it moved, the driver log's size and when it grew, and recent seconds per step. A job whose
step has not moved for its stall_s (a job without steps: whose log has not grown) is hung. stall_s is the spec's
timeouts.stall_s, or STALL_FACTOR times the job's median step with a floor (conventions.STALL_FLOOR_S), so a slow
but moving job is never called hung. Then, before anything is stopped, the stacks of every process of the job go
into debug/stacks/ and `stall` says what they show; the spec decides whether the job is stopped (FAILED, reason
HUNG, retried when retries.on has hung) or only reported.

Every number taken here is bounded where it is read (files.bounded_*): a step from the metrics or the console, the
times, sizes and step times status.json's `progress` holds. One out of bounds reads as unknown, never raises.
"""

import statistics

from ansible.module_utils.base import conventions, files
from ansible.module_utils.jobs.record.status import Progress, Stall
from ansible.module_utils.verl.metrics import fold, new_state

# Seconds per step kept for the median (the most recent ones).
RECENT_STEPS = 20
# A progress line says how long the job has gone without a new step once that is this long.
IDLE_SHOWN_S = 60


def last_step(log):
    """The newest verl step: what verl's metrics.jsonl says (a log from driver_log.refresh_log carries it as `metrics`),
    else the last console step line's number, or None.

    A log from driver_log.refresh_log carries its parse so far (`parsed`, verl.metrics.fold's state): nothing is
    searched again; a plain text is parsed once."""
    metrics = getattr(log, "metrics", None)
    if metrics is not None and files.bounded_step(metrics.get("last_step")) is not None:
        return metrics["last_step"]
    parsed = getattr(log, "parsed", None)
    if parsed is None:
        parsed = new_state()
        fold(parsed, log or "")
    return files.bounded_step(parsed["last_loss"][0] if parsed.get("last_loss") else parsed.get("last_step"))


def _ms(value):
    return files.bounded_int(value, files.MS_MAX)


def _list(value):
    return value if isinstance(value, list) else []


def _seconds(value):
    """A duration in seconds read from status.json: a number in 0..MS_MAX, else None."""
    value = files.bounded_number(value)
    return value if value is not None and 0 <= value <= files.MS_MAX else None


def track(status, log, now):
    """Fold what this look at the job saw (its driver log at `now`, ms) into status.progress."""
    old = status.progress
    step, size = last_step(log), files.bounded_int(getattr(log, "size", None))
    size = len(log or "") if size is None else size
    recent = [s for s in _list(old.step_s) if _seconds(s) is not None][-RECENT_STEPS:]
    seen, seen_at = files.bounded_step(old.step), _ms(old.step_at)
    if step is not None and (seen is None or step != seen):
        if seen is not None and seen_at is not None and step > seen:
            recent = (recent + [round((now - seen_at) / 1000 / (step - seen), 3)])[-RECENT_STEPS:]
        seen, seen_at = step, now
    grown = size != old.log_bytes
    status.progress = Progress(step=seen, step_at=now if seen_at is None else seen_at, log_bytes=size,
                               log_at=old.log_at if not grown and _ms(old.log_at) is not None else now, step_s=recent)
    return status.progress


def limit_s(status):
    """The job's stall_s: its spec's, else from its own step times (never below the floor)."""
    explicit = files.bounded_int(status.timeouts.stall_s, files.MS_MAX, low=1)
    if explicit is not None:
        return explicit
    recent = [s for s in _list(status.progress.step_s) if _seconds(s) is not None]
    median = statistics.median(recent) if recent else 0
    return max(conventions.STALL_FLOOR_S, round(conventions.STALL_FACTOR * median))


def idle_s(status, now):
    """(seconds without progress, what did not move): the step, or the log for a job without steps."""
    progress = status.progress
    what = "step" if progress.step is not None else "log line"
    since = _ms(progress.step_at if what == "step" else progress.log_at)
    return (now - (now if since is None else since)) / 1000, what


def idle_note(status, now):
    """What a progress line adds when the job has gone a while without progress ("" otherwise)."""
    idle, what = idle_s(status, now)
    if idle < IDLE_SHOWN_S:
        return ""
    return f"; no new {what} for {idle / 60:.0f} min (hung after {limit_s(status) / 60:.0f} min)"


def action(status):
    """What a hang does: stop (on_stall stop, or retries.on hung, which needs the job stopped) or report."""
    if "hung" in (status.retries.on or ()) and (status.retries.max or 0) > 0:
        return "stop"
    return status.timeouts.on_stall or "report"


def hung(status, now):
    """The stall to record when the job is hung now and was not found hung before for this same stall, else None."""
    idle, what = idle_s(status, now)
    limit = limit_s(status)
    if idle <= limit:
        return None
    since = status.progress.step_at if what == "step" else status.progress.log_at
    if status.stall.since == since:
        return None  # this stall is already recorded (and its stacks taken)
    return Stall(since=since, detected_at=now, limit_s=limit, step=status.progress.step, idle_s=round(idle), what=what,
                 action=action(status))


def evidence(status):
    """The diagnosis evidence of a job stopped as hung: where its stacks are and what they show."""
    stall = status.stall
    return {"file": stall.stacks or "status.json",
            "line": stall.summary or f"no new {stall.what or 'step'} for {stall.idle_s} s"}
