"""Records of jobs a restarted head forgot: Ray's job history lives in the head, the record on the shared root.

A record that is not final, for a job Ray no longer knows and submitted before the head's node started, belongs to
a job that ended with the old cluster: it is finalised as FAILED (reason HEAD_RESTARTED), keeping all it holds.
When the head cannot be read, or it ran since before the submit, nothing is changed (fail closed).
"""

import datetime
import os

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.evidence import evidence
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.record.job import Failed, Job
from ansible.module_utils.jobs.record.record import Record
from ansible.module_utils.jobs.record.status import QUEUED, Merge, RecordError
from ansible.module_utils.verl import diagnosis


def forgotten_since(job, status, head_started):
    """head_started, if the head started after this job was submitted: Ray forgot the job when the head restarted.
    None when it cannot be shown (the caller then changes nothing: fail closed)."""
    submitted = status.submitted_at
    if not submitted:  # a resumed or rebuilt record: the record's own files say when it was written
        try:
            submitted = int(os.stat(job.rec["job_spec"]).st_mtime * 1000)
        except OSError:
            return None
    return head_started if head_started and head_started > submitted else None


def finalize_forgotten(job, status, head_started_ms):
    """The record of a job the restarted head forgot: FAILED, with everything already in it kept.
    Returns its status and whether this run finalised it (not another run, first)."""
    evidence.snapshot(job, "post")
    when = datetime.datetime.fromtimestamp(head_started_ms / 1000, datetime.timezone.utc).strftime(  # noqa: UP017
        "%Y-%m-%dT%H:%M:%SZ")
    message = (f"Ray's head started again at {when}, after this job was submitted, and no longer knows it; "
               "the job's driver and workers ended with the old cluster")
    status.last_state = status.state
    status.state, status.final, status.reason, status.message = "FAILED", True, "HEAD_RESTARTED", message
    status.head_started_at = head_started_ms
    status.diagnosis = (diagnosis.classify([], {"reason": status.reason})
                        or {"kind": "unknown", "evidence": None, "hint": ""})
    done = job.save_status(status, {job.rec["failure"]: f"state: FAILED\nreason: HEAD_RESTARTED\nmessage: {message}\n"})
    return status, done is Merge.WRITE


def forgotten(job, status):
    """Ray does not know this job: finalise its record if the head restarted since, else fail naming why."""
    started = forgotten_since(job, status, job.client.head_started_ms())
    if started is None:
        raise Failed(f"{job.sid}: Ray does not know this job, and its head has run since before the job was "
                     "submitted; the record is unchanged (another cluster's record?)",
                     **job.result(status, f"{job.sid}: unknown to Ray"))
    return finalize_forgotten(job, status, started)[0]


def open_records(shared_root, unreadable=None, tidy=True, unproven=None):
    """Ids of the records on the shared root whose status.json is not final (a record without a trusted status.json
    is left alone: an interrupted submit, which the same submit command completes, or one nobody can vouch for;
    `unreadable`, a list, gets "<id>: <why>" for each untrusted one; `unproven`, a list, gets the ids of both kinds,
    for the watcher to step as a follower would: step.py never finalises one Ray does not know).

    Only the records the open index lists are read (open_index); without a complete index every record is, once,
    and the index is written (tidy: false, as in check mode, writes nothing, nor removes an entry left behind)."""
    jobs_dir = conventions.paths(shared_root)["jobs"]
    listed = open_index.listed(jobs_dir)
    if listed is not None:
        candidates = listed
    else:
        candidates = sorted(n for n in (os.listdir(jobs_dir) if os.path.isdir(jobs_dir) else [])
                            if conventions.matches(conventions.ID_RULE, n))
    found, unsure = [], []  # open; not provably final (no or no trusted status.json): indexed too, so seen again
    for sid in candidates:
        record = Record(conventions.job_dir(shared_root, sid), sid)
        try:
            status = record.read_status()
        except RecordError as exc:
            if unreadable is not None:
                unreadable.append(f"{sid}: {exc}")
            unsure.append(sid)
            continue
        if status is None:
            unsure.append(sid)
        elif not status.final:
            found.append(sid)
        elif status is not None and listed is not None and tidy:
            record.leave_index()  # final since: a run ended between writing status.json and leaving the index
    if unproven is not None:
        unproven += unsure
    if listed is None and tidy and os.path.isdir(jobs_dir):
        try:
            for sid in found + unsure:
                open_index.add(conventions.job_dir(shared_root, sid))
            open_index.mark_complete(jobs_dir)
        except (OSError, RecordError):
            pass  # the next reader scans again
    return found


def reconcile(module, config):
    """action=reconcile: finalise every record whose job the restarted head forgot (see forgotten_since)."""
    open_ids = open_records(config.shared_root, tidy=not module.check_mode)
    result = {"changed": False, "finalized": [], "open": []}
    if not open_ids:  # the usual case costs no call to Ray
        return dict(result, msg="no open job records")
    probe = Job(module, config, open_ids[0], conventions.job_dir(config.shared_root, open_ids[0]))
    known = {j["submission_id"]: j for j in probe.client.jobs()}
    head_started = probe.client.head_started_ms()  # one node list for all
    for sid in open_ids:
        job = Job(module, config, sid, conventions.job_dir(config.shared_root, sid), client=probe.client)
        if sid in known:
            result["open"].append(sid)
            # A head that came back to the GCS store's tables still knows the job: it lived through the outage.
            status = job.status()
            if (not module.check_mode and not status.rebuilt
                    and evidence.note_outage(status, known[sid]["start_time"], head_started, None, "reconcile")):
                job.save_status(status)
                result.setdefault("outages", []).append(sid)
            continue
        status = job.status()
        if status.state == QUEUED:  # never in Ray: it waits in the queue, whatever the head did
            result["open"].append(sid)
            continue
        started = forgotten_since(job, status, head_started)
        if started is None:
            result["open"].append(sid)  # unknown to Ray for another reason: left as it is
            continue
        if not module.check_mode and not finalize_forgotten(job, status, started)[1]:
            continue  # another run finalised it first
        result["finalized"].append(sid)
    result["changed"] = bool(result["finalized"] or result.get("outages"))
    verb = "would be finalised" if module.check_mode else "finalised"
    result["msg"] = (f"{len(result['finalized'])} record(s) of jobs the restarted head forgot {verb} as FAILED"
                     + (f": {', '.join(result['finalized'])}" if result["finalized"] else "")
                     + f"; {len(result['open'])} open"
                     + (f"; {len(result['outages'])} lived through the head's outage" if result.get("outages") else ""))
    return result
