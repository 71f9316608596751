"""Linked attempts: a first job and the attempts <first>-r1, -r2, ... that resume it from its newest whole checkpoint.

The first job's status.json lists its `attempts`; each attempt's names its first job (`attempt_of`) and the
checkpoint it resumed from (`resumed_from`). Checkpoints are searched over the job's and its attempts' dirs
(module_utils/verl/checkpoints.py), on the head, where the shared root is.
"""

import os

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.follow import refresh
from ansible.module_utils.jobs.job import Failed
from ansible.module_utils.jobs.record import Record, paths, read_json, status_of
from ansible.module_utils.jobspec import model as js
from ansible.module_utils.verl import checkpoints as ck


def chain(config, sid):
    """(root id, [root, attempts...]) of the jobs linked with sid: a first job and its resuming attempts. A link counts
    only when both records list it (the first job's `attempts` names the attempt, the attempt's `attempt_of` names the
    first job): a record on the share cannot join another's chain by naming it."""
    mine = status_of(config.shared_root, sid)
    root = mine.attempt_of if mine is not None else None
    first = status_of(config.shared_root, root) if conventions.matches(conventions.ID_RULE, root) else None
    if first is None or sid not in (first.attempts or []):
        root, first = sid, mine
    members = [root]
    for other in (first.attempts if first is not None else None) or []:
        if not conventions.matches(conventions.ID_RULE, other) or other in members:
            continue
        theirs = mine if other == sid else status_of(config.shared_root, other)
        # one whose status.json is not written yet (being submitted) or lost cannot say: the first job's word stands
        if theirs is not None and (theirs.attempt_of == root or theirs.rebuilt):
            members.append(other)
    return root, members


def resume_point(spec, config):
    """Where a job with resume_from starts: the newest whole checkpoint over the linked jobs' checkpoint dirs."""
    resumed = status_of(config.shared_root, spec.resume_from)
    if resumed is None:
        raise Failed(f"jobspec field 'resume_from': no job record at "
                     f"{conventions.job_dir(config.shared_root, spec.resume_from)}")
    if resumed.rebuilt:
        raise Failed(f"jobspec field 'resume_from': {spec.resume_from}'s record cannot be trusted ({resumed.rebuilt})")
    if not resumed.final:
        raise Failed(f"jobspec field 'resume_from': {spec.resume_from} has not ended ({resumed.state}): stop it first")
    root, linked = chain(config, spec.resume_from)
    dirs, shared = [], os.path.realpath(config.shared_root)
    for sid in linked:
        rec = paths(conventions.job_dir(config.shared_root, sid))
        old = read_json(rec["job_spec"], base=rec["dir"])
        directory = old.get("checkpoint_dir") if isinstance(old, dict) else None
        if not (isinstance(directory, str) and js.is_inside(directory, config.shared_root)):
            directory = rec["checkpoints"]
        if not js.is_inside(os.path.realpath(directory), shared):  # a symlink on the share leads off it
            raise Failed(f"jobspec field 'resume_from': {sid}'s checkpoint dir {directory} leads outside the shared "
                         "root (a symlink): resume refused")
        if directory not in dirs:
            dirs.append(directory)
    world = spec.resources.nnodes * max(spec.resources.n_gpus_per_node, 1)
    try:
        found = ck.newest_whole(dirs, world)
    except ck.NoCheckpoint:
        # It died before its first save (a collective that never connected): the attempt starts over.
        return {"root": root, "submission_id": spec.resume_from, "path": None, "step": None, "skipped": []}
    except ck.CheckpointError as exc:
        raise Failed(f"jobspec field 'resume_from': {exc}") from None
    return {"root": root, "submission_id": spec.resume_from, "path": found["path"], "step": found["step"],
            "skipped": [f"{os.path.basename(p)}: {why}" for p, why in found["skipped"]]}


def link(config, root, sid):
    """Name attempt sid in the first job's status.json (`attempts`)."""
    Record(conventions.job_dir(config.shared_root, root), root).link_attempt(sid)


def attempt_action(module, job):
    """action=attempt: the id and spec of the next attempt resuming this job (nothing changes).

    Returns `newest`, the last linked attempt: when it is another job, the caller follows that one instead
    (a re-run of a retried job must not start one more attempt)."""
    status, _, _ = refresh(module, job)
    root, linked = chain(job.config, job.sid)
    plan = {"root": root, "newest": linked[-1], "attempts_made": len(linked) - 1}
    if linked[-1] != job.sid:
        newest = status_of(job.config.shared_root, linked[-1])
        if newest is None or not newest.final or newest.state == "SUCCEEDED":
            state = newest.state if newest is not None else None
            raise Failed(f"{job.sid}: its attempt {linked[-1]} is {state}: follow that one "
                         f"(job.yml -e id={linked[-1]} -e do=wait)", **job.result(status, ""), **plan)
    elif status.rebuilt and not status.final:
        raise Failed(f"{job.sid}: nothing to resume, its {status.rebuilt}", **job.result(status, ""), **plan)
    elif not status.final or status.state == "SUCCEEDED":
        why = "it succeeded" if status.state == "SUCCEEDED" else "it has not ended (stop it first)"
        raise Failed(f"{job.sid}: {status.state}: nothing to resume, {why}", **job.result(status, ""), **plan)
    next_id = f"{root}-r{len(linked)}"
    try:
        conventions.check_id(f"{job.sid}: the attempt's id", next_id)
    except ValueError as exc:
        raise Failed(str(exc)) from None
    spec = read_json(job.rec["job_spec"], base=job.rec["dir"])
    if not isinstance(spec, dict):
        raise Failed(f"{job.sid}: its record has no readable {job.rec['job_spec']}")
    return dict(job.result(status, f"{job.sid}: the next attempt is {next_id}"), next_id=next_id, job_spec=spec,
                **plan)
