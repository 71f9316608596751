"""Linked attempts: a first job and the attempts <first>-r1, -r2, ... that resume it from its newest whole checkpoint.

The first job's status.json lists its `attempts`; each attempt's names its first job (`attempt_of`) and the
checkpoint it resumed from (`resumed_from`). Checkpoints are searched over the job's and its attempts' dirs
(module_utils/verl/checkpoints.py), and the next attempt's spec is built, on the head, where the shared root is.
"""

import json
import os

from ansible.module_utils.base import conventions
from ansible.module_utils.base.redaction import REDACTED
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.record.record import Record, paths, read_json, status_of
from ansible.module_utils.jobspec import model as js
from ansible.module_utils.jobspec.fields import TRAINERS
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


def next_id(job, root, linked):
    """The id of the attempt after linked's last: <root>-r<n>."""
    found = f"{root}-r{len(linked)}"
    try:
        return conventions.check_id(f"{job.sid}: the attempt's id", found)
    except ValueError as exc:
        raise Failed(str(exc)) from None


def spec_of_next(job, attempt_id, root, known, secret_env, ray_config):
    """The resolved JobSpec of attempt_id, which resumes job, built here on the head (jobspec.attempt_layer, resolve).

    known: the chain's spec as the follower resolved it (secrets included), used when it is the root's. Otherwise the
    spec is job's record's, whose secret env values are "<redacted>": each is taken from secret_env, what the control
    host passed down (no_log): this run's -e env.NAME values (`cli`) over the site's jobspec_defaults env for the
    workload (`site`: all, trainers, the workload). A secret found in neither is an error naming env.NAME."""
    if isinstance(known, dict) and known.get("submission_id") == root:
        return js.resolve(js.attempt_layer(known, attempt_id, job.sid)[1], name=known.get("name"),
                          ray_config=ray_config)
    spec = read_json(job.rec["job_spec"], base=job.rec["dir"])
    if not isinstance(spec, dict):
        raise Failed(f"{job.sid}: its record has no readable {job.rec['job_spec']}")
    name, layer = js.attempt_layer(spec, attempt_id, job.sid)
    env = dict(layer.get("env") or {}) if isinstance(layer.get("env"), dict) else {}
    given = given_env(secret_env, layer.get("workload"))
    for key, value in env.items():
        if value != REDACTED:
            continue
        if key not in given:
            raise js.JobSpecError(f"env.{key}", "is a secret the record does not keep: pass it again with "
                                  f"-e env.{key}=VALUE (or set it in jobspec_defaults)", value)
        env[key] = given[key]
    layer["env"] = env
    if REDACTED in json.dumps(layer):
        raise js.JobSpecError("spec", f"the record of {job.sid} holds a redacted value outside env: resubmit it with "
                              f"submit.yml and -e resume_from={job.sid}", REDACTED)
    return js.resolve(layer, name=name, ray_config=ray_config)


def given_env(secret_env, workload):
    """The secret env values the control host gave for a workload: the site's (all < trainers < the workload's),
    then this run's -e values over them."""
    secret_env = secret_env if isinstance(secret_env, dict) else {}
    site = secret_env.get("site") if isinstance(secret_env.get("site"), dict) else {}
    out = {}
    for key in ["all", *(["trainers"] if workload in TRAINERS else []), workload]:
        part = site.get(key) if isinstance(key, str) else None
        out.update({str(k): str(v) for k, v in (part if isinstance(part, dict) else {}).items()})
    cli = secret_env.get("cli") if isinstance(secret_env.get("cli"), dict) else {}
    out.update({str(k): str(v) for k, v in cli.items()})
    return out
