"""action=watch: one pass over every open record on the shared root, so that nobody has to follow a job.

Each record that is not final takes one step (step.py), the same one a wait takes, under the record's locks, so a
watcher is safe beside a wait of the same job and beside another watcher. Then, for each record it finalised FAILED
and each whose retry an earlier pass or follower could not submit (open_index.RETRY), the chain's engine (chain.py)
decides and submits the next attempt, in this same module call: a pass that retries a job costs one call to the head.
A retry pending longer than RETRY_PENDING_S is a person's call. What one record holds costs that record only: a
record that cannot be read is reported, never changed, and any error in one record's step or retry is one line in
the pass's `errors` while the pass goes on. When Ray cannot be read the whole pass fails (fail closed: nothing is
judged).
"""

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.life import chain, reconcile, step
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.record.job import Failed, Job
from ansible.module_utils.jobs.record.status import FAILED, RecordError
from ansible.module_utils.jobs.submission import submit

RETRY_PENDING_S = 24 * 3600  # a retry not submitted for this long after its attempt ended is a person's call


def one(module, job, head_started):
    """Bring one open record up to date (step.py); returns what happened: (verb, status)."""
    done = step.step(job, job.status(), check_mode=module.check_mode, head_started=head_started)
    return done.verb, done.status


def watch(module, config):
    """The pass; returns the module result (lists of ids by what happened, and the attempts due)."""
    unreadable, unproven = [], []
    # Records without a trusted status.json are stepped too, as a follower's wait steps them: step.py rebuilds one Ray
    # knows with its help and never judges one it does not (reported unreadable, unchanged).
    open_ids = reconcile.open_records(config.shared_root, None, tidy=not module.check_mode, unproven=unproven)
    open_ids = sorted(open_ids + unproven)
    result = {"changed": False, "finalized": [], "ended": {}, "open": [], "hung": [], "unreadable": unreadable,
              "retry": [], "outcomes": {}, "lines": [], "errors": []}
    if not open_ids:
        retries(module, config, result, [], None)
        return dict(result, msg="no open job records" + (f"; {len(unreadable)} unreadable" if unreadable else "")
                    + (f"; {len(result['retry'])} to retry" if result["retry"] else ""))
    probe = Job(module, config, open_ids[0], conventions.job_dir(config.shared_root, open_ids[0]))
    head_started = probe.client.head_started_ms()  # Ray unreadable: the pass fails here, having changed nothing
    failed = []  # finalised FAILED now: the engine decides their retry
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
        if verb == step.FINALIZED:
            result["finalized"].append(sid)
            result["ended"][sid] = status.state + (f" ({status.reason})" if status.reason else "") + (
                f": {status.diagnosis.kind}" if status.diagnosis else "")
            if status.state == FAILED:
                failed.append(sid)
        elif verb == step.UNREADABLE:
            result["unreadable"].append(f"{sid}: {status.rebuilt}")
        elif status.rebuilt:
            result["unreadable"].append(f"{sid}: {status.rebuilt}; rebuilt with what Ray knows of it")
            result["open"].append(sid)
        else:
            result["open"].append(sid)
            if status.stall and not status.final:
                result["hung"].append({"submission_id": sid, "summary": status.stall.summary,
                                       "since": status.stall.since})
    retries(module, config, result, failed, probe.client)
    if not module.check_mode:  # once per pass: what ended in it, or elsewhere, may let queued jobs start
        asked = submit.admit(module, config, probe.client)
        result["queue_lines"], result["admitted"] = asked["lines"], asked["admitted"]
        result["lines"] += asked["lines"]
        result["changed"] = result["changed"] or bool(asked["admitted"] or asked["ended"])
    result["msg"] = (f"{len(open_ids)} open record(s): {len(result['finalized'])} finalised, "
                     f"{len(result['hung'])} hung, {len(result['retry'])} to retry, "
                     f"{len(result['unreadable'])} unreadable, {len(result['open'])} still open")
    return result


def retries(module, config, result, failed, client):
    """The engine (chain.py) for each record finalised FAILED in this pass and each of the retry index: the retry rule
    decides, and a due retry is submitted here. result gains each one's `outcomes`, the due ones in `retry`, the
    attempts submitted in `attempts`, the refused in `not_retried`, and the lines to print."""
    jobs = conventions.paths(config.shared_root)["jobs"]
    for sid in dict.fromkeys([*failed, *(open_index.listed(jobs, open_index.RETRY) or [])]):
        job = None
        try:
            job = Job(module, config, sid, conventions.job_dir(config.shared_root, sid), client=client)
            if client is None:
                client = job.client  # one client for the pass
            went = chain.next_step(module, job, None, module.params["secret_env"], stale_after_s=RETRY_PENDING_S)
        except Failed as exc:
            outcome = exc.result.get("outcome")
            if outcome is None:
                result["errors"].append(str(exc))
                continue
            result["outcomes"][sid] = outcome
            result["retry"].append(sid)
            result["lines"] += [*exc.result.get("lines", []), str(exc)]
            result.setdefault("not_retried", []).append(sid)
            result["changed"] = result["changed"] or bool(exc.result.get("changed"))
            continue
        except Exception as exc:  # noqa: BLE001 - one record's content never stops the pass for the others
            # its type only: the text of an error over a record's content may quote a value of it (a secret)
            line = (f"{sid}: not retried in this pass ({type(exc).__name__} reading its record); a later pass tries "
                    f"again: job.yml -e id={sid} -e do=status")
            result["errors"].append(line)
            result["lines"].append(line)
            continue
        result["outcomes"][sid] = went["outcome"]
        result["changed"] = result["changed"] or bool(went.get("changed"))
        if went["outcome"] == chain.SUBMITTED:
            result["retry"].append(sid)
            result["lines"] += went["lines"]
            if went.get("follow"):  # check mode submits nothing
                result.setdefault("attempts", []).append(went["follow"])
