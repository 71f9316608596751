"""action=watch: one pass over every open record on the shared root, so that nobody has to follow a job.

Each record that is not final takes one step (step.py), the same one a wait takes, under the record's locks, so a
watcher is safe beside a wait of the same job and beside another watcher. Failed jobs the retry rule (retry.py)
retries are returned, for the action plugin to submit the next attempt: those finalised now and those whose retry
an earlier pass or follower could not submit (open_index.RETRY), until it is submitted, a person must decide, or
RETRY_PENDING_S has passed. What one record holds costs that record
only: a record that cannot be read is reported, never changed, and any error in one record's step is one line in
the pass's `errors` while the pass goes on. When Ray cannot be read the whole pass fails (fail closed: nothing is
judged).
"""

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs import attempts, open_index, reconcile, retry, step
from ansible.module_utils.jobs.job import Failed, Job
from ansible.module_utils.jobs.record import Record, now_ms, status_of
from ansible.module_utils.jobs.status import RecordError

RETRY_PENDING_S = 24 * 3600  # a retry not submitted for this long after its attempt ended is a person's call


def one(module, job, head_started):
    """Bring one open record up to date (step.py); returns what happened: (verb, status)."""
    status = job.status()
    if status.rebuilt and not status.final:
        return step.UNREADABLE, status  # never judged from a guess (Record.status rebuilt it)
    done = step.step(job, status, check_mode=module.check_mode, head_started=head_started)
    return done.verb, done.status


def watch(module, config):
    """The pass; returns the module result (lists of ids by what happened, and the attempts due)."""
    unreadable = []
    open_ids = reconcile.open_records(config.shared_root, unreadable, tidy=not module.check_mode)
    result = {"changed": False, "finalized": [], "ended": {}, "open": [], "hung": [], "unreadable": unreadable,
              "retry": [], "errors": []}
    if not open_ids:
        pending(module, config, result)
        return dict(result, msg="no open job records" + (f"; {len(unreadable)} unreadable" if unreadable else "")
                    + (f"; {len(result['retry'])} to retry" if result["retry"] else ""))
    probe = Job(module, config, open_ids[0], conventions.job_dir(config.shared_root, open_ids[0]))
    head_started = probe.client.head_started_ms()  # Ray unreadable: the pass fails here, having changed nothing
    for sid in open_ids:
        job = None
        try:
            job = Job(module, config, sid, conventions.job_dir(config.shared_root, sid), client=probe.client)
            verb, status = one(module, job, head_started)
        except RecordError as exc:
            result["unreadable"].append(f"{sid}: {exc}")
            continue
        except Failed as exc:
            result["errors"].append(str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - one record's content never stops the pass for the others
            text = job.redact(str(exc)) if job is not None else "(before its record was read)"
            result["errors"].append(f"{sid}: {type(exc).__name__}: {conventions.one_line(text, 300)}")
            continue
        result["changed"] = result["changed"] or job.changed
        if verb == "finalized":
            result["finalized"].append(sid)
            result["ended"][sid] = status.state + (f" ({status.reason})" if status.reason else "") + (
                f": {status.diagnosis.kind}" if status.diagnosis else "")
            if retry.due(status, 0)[0]:  # the plugin counts the attempts made
                result["retry"].append(sid)
        elif verb == "unreadable":
            result["unreadable"].append(f"{sid}: {status.rebuilt}")
        else:
            result["open"].append(sid)
            if status.stall and not status.final:
                result["hung"].append({"submission_id": sid, "summary": status.stall.summary,
                                       "since": status.stall.since})
    pending(module, config, result)
    result["msg"] = (f"{len(open_ids)} open record(s): {len(result['finalized'])} finalised, "
                     f"{len(result['hung'])} hung, {len(result['retry'])} to retry, "
                     f"{len(result['unreadable'])} unreadable, {len(result['open'])} still open")
    return result


def pending(module, config, result, now=None):
    """Add to result["retry"] each record of the retry index whose retry is still due (the attempt it would resume is
    the newest of its chain, retries remain); take out of the index the ones that are not (tidy, not in check mode),
    and the ones pending longer than RETRY_PENDING_S (one line in errors: a person decides)."""
    jobs = conventions.paths(config.shared_root)["jobs"]
    now = now_ms() if now is None else now
    for sid in open_index.listed(jobs, open_index.RETRY) or []:
        if sid in result["retry"]:
            continue
        try:
            status = status_of(config.shared_root, sid)
            linked = attempts.chain(config, sid)[1]
            due = (status is not None and not status.rebuilt and linked[-1] == sid
                   and retry.due(status, len(linked) - 1)[0])
        except Exception as exc:  # noqa: BLE001 - one record's content never stops the pass for the others
            result["errors"].append(f"{sid}: pending retry: {type(exc).__name__}: {conventions.one_line(exc, 200)}")
            continue
        ended = (status.updated_at or status.end_time or now) if status is not None else now  # finalised at
        if due and now - ended > RETRY_PENDING_S * 1000:
            result["errors"].append(f"{sid}: its retry was due but not submitted for {RETRY_PENDING_S // 3600} h: "
                                    f"left to a person (job.yml -e id={sid} -e do=resume)")
            due = False
        if due:
            result["retry"].append(sid)
        elif not module.check_mode:
            Record(conventions.job_dir(config.shared_root, sid), sid).retry_decided()
