"""Submitting a job: checks, verl's config composed and checked in the job's Python (preflight), the record, then
Ray's submit_job.

Idempotent: when the id exists (in Ray or on disk) nothing is submitted or overwritten. A record without
status.json is a submit that was interrupted: the same command completes it (submitting only if Ray has no job).
"""

import dataclasses
import json
import os
import time

from ansible.module_utils.base import conventions
from ansible.module_utils.base.redaction import REDACTED
from ansible.module_utils.jobs.evidence import evidence
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.record.job import Failed, Job
from ansible.module_utils.jobs.record.record import (
    LockTimeout,
    Record,
    create_exclusive,
    ensure_layout,
    now_ms,
    record_lock,
)
from ansible.module_utils.jobs.record.status import NEW, QUEUED, Queue, StatusFile
from ansible.module_utils.jobs.submission import admission, attempts, preflight
from ansible.module_utils.jobspec import model as js
from ansible.module_utils.jobspec import render
from ansible.module_utils.jobspec.fields import TRAINERS
from ansible.module_utils.queue import model as qm


def submit(module, config):
    """action=submit: the JobSpec the action plugin resolved (module.params), by its submitter."""
    return submit_spec(module, config, module.params["spec"], module.params["preflight"])


def submitter_of(module, given=None):
    """Who submits: given (a chain's first submitter), else the submitter option (the action plugin's), else
    admission.AROUND (the module called alone); one line naming the field when it is not a name."""
    name = given or module.params.get("submitter") or admission.AROUND
    if not conventions.matches(conventions.NAME_RULE, name):
        raise Failed(f"submitter: must be {conventions.NAME_RULE[1]}")
    return name


def queue_settings(module):
    """The site's ray_queue_quotas and ray_queue_preempting (module options), checked: one line naming the field."""
    p = module.params
    try:
        qm.quotas_of(p.get("queue_quotas"))
        qm.preempting_of(p.get("queue_preempting"))
    except qm.QueueError as exc:
        raise Failed(str(exc)) from None
    return p.get("queue_quotas"), p.get("queue_preempting")


def submit_spec(module, config, spec, preflight_on, submitter=None):
    """Submit a resolved JobSpec (a dict): the action's, or the next attempt's (chain.py, preflight off): at once when
    the queue admits it, else written QUEUED (admission.py)."""
    known = spec
    submitter = submitter_of(module, submitter)
    settings = queue_settings(module)
    try:
        spec = js.check_cluster(js.JobSpec.from_dict(spec), config)
    except js.JobSpecError as exc:
        raise Failed(str(exc)) from None
    check_paths(spec, config)
    mark = os.path.join(config.shared_root, conventions.SHARED_ROOT_MARK)
    if not os.path.isfile(mark):
        # Without the storage the record would land on the head's own disk and the workers would not see it.
        raise Failed(f"shared_root: {config.shared_root} on this head is not the shared storage (no {mark}): "
                     "is it mounted? run up.yml; nothing was submitted")
    job = Job(module, config, spec.submission_id, spec.output_dir)
    # The checkpoint an attempt resumes from is found here, on the head, where the shared root is.
    resume = attempts.resume_point(spec, config) if spec.resume_from and not job.record.has_status() else None
    resume_path = resume["path"] if resume else None  # None also when there was no checkpoint yet
    runtime_env = render.render_runtime_env(spec, config)
    entrypoint = render.render_entrypoint(spec, config, resume_path)
    options = render.entrypoint_options(spec)
    job.learn_secrets(runtime_env)
    # Rendered from the runtime_env redacted by name: a secret with a quote (shell- or JSON-escaped in the
    # command) or shorter than four characters would survive a search for its value afterwards.
    command = render.submit_command(spec, config, job.redact(runtime_env))
    # What --check shows is exactly what is submitted: this one rendering (redacted).
    shown = dict(entrypoint=job.redact(entrypoint), runtime_env=job.redact(runtime_env),
                 entrypoint_options=options, submit_cmd=job.redact(command))
    if resume:
        shown["resumed_from"] = resume

    def existing():
        info = job.info()
        status = job.status()
        if info is not None and not status.final and not status.reason:
            status.state = jc.summary(info)["status"]
        return dict(job.result(status, f"{job.sid} exists already: not submitted again"), existed=True, **shown)

    info = job.info()
    resuming = os.path.isdir(spec.output_dir) and not job.record.has_status()
    if not resuming and (os.path.exists(spec.output_dir) or info is not None):
        return existing()
    check_code(spec)
    nodes = None  # the cluster's nodes, asked once: the preflight's checks, then the record's snapshot
    if preflight_on and info is None and spec.workload in TRAINERS:
        nodes = cluster_nodes(job)
        facts = compose(module, spec, config, runtime_env, resume_path, nodes) or {}
        shown["preflight"] = ("passed: the verdict kept for the same code, trainer, overrides and env"
                              if facts.get("kept") else f"passed on {facts.get('where')}")
    if module.check_mode:
        what = "record would be completed" if resuming else f"would be submitted{noted(spec)}"
        return dict(job.result(StatusFile(job.sid, state=NEW), f"{job.sid} {what}"), changed=True, existed=resuming,
                    **shown)
    create_exclusive(spec.output_dir)  # the loser of a race for this id waits on the lock below
    try:
        # The queue's lock first, then the record's: the order every admission takes them in.
        with admission.queue_lock(config.shared_root), record_lock(spec.output_dir):
            # Whoever held the lock before may have submitted this id and written its status meanwhile.
            if job.record.has_status():
                return existing()
            if resume:
                attempts.link(config, resume["root"], job.sid)
                # the attempt it resumes is decided: no watcher pass takes its retry up again
                Record(conventions.job_dir(config.shared_root, spec.resume_from), spec.resume_from).retry_decided()
            info = job.info()
            part = admission.queue_part(known, submitter, now_ms())
            if info is not None:  # an interrupted submit Ray accepted: completed as it was
                return submit_locked(job, spec, config, info, entrypoint, runtime_env, options, shown, nodes, part)
            asked = admit_locked(module, config, job.client, settings, {job.sid: known}, new=(job.sid, part, known))
            mine = asked["new"]
            if mine is None and asked["unasked"] and not asked["waiting"]:
                # Nobody waits and the queue cannot be asked (Ray's resource view unreadable): submitted as before
                # the queue, saying so, rather than left waiting for an admission that may never come.
                part.update(words=f"submitted without the queue's decision: {asked['unasked']}", admitted_at=now_ms())
                out = submit_locked(job, spec, config, None, entrypoint, runtime_env, options, shown, nodes, part)
            elif mine is not None and (mine["verdict"] == qm.ADMIT or mine["reason"] == qm.NEVER_FITS):
                # One that could not run even on an idle cluster (a resource no uncordoned worker offers, more nodes
                # than are up) is no job for the queue to order: Ray holds it PENDING, as before the queue, and its
                # pending_s ends it with the resources named, where the queue would have kept it waiting unbounded.
                handed = ": handed to Ray, whose pending_s bounds its wait" if mine["verdict"] != qm.ADMIT else ""
                part.update(reason=mine["reason"], words=mine["words"] + handed, admitted_at=now_ms())
                out = submit_locked(job, spec, config, None, entrypoint, runtime_env, options, shown, nodes, part)
            else:
                out = enqueue(job, spec, shown, runtime_env, part, mine, asked)
            return dict(out, queue_lines=asked["lines"])
    except (LockTimeout, admission.QueueBusy) as exc:
        raise Failed(f"{job.sid}: {exc}") from None


def enqueue(job, spec, shown, runtime_env, part, mine, asked):
    """Write the record of a job that waits: complete as a submitted one's (its spec, runtime_env and submit command),
    QUEUED with its place and reason, open, so nothing is lost if the control host goes away."""
    write_files(job, spec, shown, runtime_env)
    if mine is not None:
        part.update(position=mine["position"], reason=mine["reason"], words=mine["words"])
    else:  # the queue could not be asked: it waits for the next admission, saying why
        part.update(words=f"the queue could not be asked now ({asked['unasked']}); the next admission will")
    status = new_status(job, spec, part, shown)
    status.state = QUEUED
    job.save_status(status)
    if mine is not None and mine["verdict"] == qm.PREEMPT:
        admission.ask_preempt(job.config.shared_root, mine["victims"], job.sid)
    return dict(job.result(status, admission.line(job.sid, status.queue)), existed=False,
                queue=status.to_dict()["queue"], **shown)


def admit_locked(module, config, client, settings, known=None, new=None):
    """One admission (the caller holds the queue's lock): the queue, what runs, the workers and the use read; the
    decision core asked; each queued entry admitted is submitted, each that waits gets its place and reason, a
    preemption's victims are asked (phase 1: recorded, they run on); a QUEUED job past its timeouts.queue_s ends
    FAILED (QUEUE_TIMEOUT). new: (id, queue part, spec) of a submission deciding with the queue (not submitted here).

    Returns {"new": the new entry's decision or None, "admitted": ids submitted, "ended": ids ended, "lines": what
    to print, "unasked": why the queue could not be asked, or None}."""
    out = {"new": None, "admitted": [], "ended": [], "lines": [], "unasked": None, "waiting": 0}
    state = admission.State()
    try:
        admission.read(client, config, state)
    except Exception as exc:  # noqa: BLE001 - Ray's resources, the cordons: nothing is admitted from a guess
        out["unasked"] = conventions.one_line(str(exc), 200) or type(exc).__name__
        out["lines"].append(f"the queue was not asked: {out['unasked']}")
        out["waiting"] = len(state.queued)
        return out
    out["lines"] += state.problems
    now = state.now_ms
    for q in list(state.queued):
        if admission.expired(q, now):
            state.queued.remove(q)
            ended = admission.end_queued(q.record, state, conventions.QUEUE_TIMEOUT_REASON,
                                         f"waited in the queue longer than its timeouts.queue_s "
                                         f"({q.status.timeouts.queue_s}s): {q.status.queue.words or ''}".rstrip(": "))
            if ended.final:
                out["ended"].append(q.sid)
                out["lines"].append(f"{q.sid}: FAILED ({ended.reason}): {ended.message}")
    ready = []
    for q in state.queued:
        if q.sid in state.ray_ids:  # a submission to Ray whose record write was cut short: completed, not decided
            if complete_queued(module, config, client, q):
                out["lines"].append(f"{q.sid}: Ray had it; its record was completed")
            continue
        try:  # a job its record cannot submit now takes nobody's place (it would be admitted, and fail, each time)
            q.resolved = resolved_queued(module, config, q, (known or {}).get(q.sid))
        except (Failed, js.JobSpecError) as exc:
            why = conventions.one_line(str(exc), 300)
            admission.waits(q, {"position": None, "reason": qm.HELD, "words": qm.REASON_WORDS[qm.HELD].format(why=why)})
            out["lines"].append(f"{q.sid}: held: {why}")
            continue
        ready.append(q)
    state.queued = ready
    extra = []
    if new is not None:
        sid, part, spec = new
        extra.append(admission.entry(sid, Queue.of(part), spec, state.gpus))
    try:
        decisions = state.decide(*settings, extra=extra)
    except qm.QueueError as exc:  # data the queue cannot take (read_queued leaves bad records out): nothing admitted
        out["unasked"] = str(exc)
        out["lines"].append(f"the queue was not asked: {exc}")
        out["waiting"] = len(state.queued)
        return out
    if new is not None:
        out["new"] = decisions.get(new[0])
    for q in sorted(state.queued, key=lambda q: decisions[q.sid]["position"]):
        decision = decisions[q.sid]
        if decision["verdict"] == qm.ADMIT:
            try:
                if submit_queued(module, config, client, q, decision):
                    out["admitted"].append(q.sid)
                    out["lines"].append(f"{q.sid}: admitted ({decision['words']}), submitted")
                continue
            except (Failed, js.JobSpecError, OSError) as exc:  # Ray refused it, the share failed: said, not fatal
                decision = dict(decision, words=f"admitted, not submitted: {conventions.one_line(str(exc), 300)}")
                out["lines"].append(f"{q.sid}: {decision['words']}")
        elif decision["verdict"] == qm.PREEMPT:
            admission.ask_preempt(config.shared_root, decision["victims"], q.sid)
        admission.waits(q, decision)
    return out


def admit(module, config, client, known=None):
    """Ask the queue once under its lock (a follower's wait, the watcher's pass): admission.py reads, this submits."""
    settings = queue_settings(module)
    try:
        with admission.queue_lock(config.shared_root):
            return admit_locked(module, config, client, settings, known)
    except admission.QueueBusy as exc:
        return {"new": None, "admitted": [], "ended": [], "lines": [str(exc)], "unasked": str(exc), "waiting": 0}


def spec_of_queued(q, known, secret_env, own=None):
    """The spec a queued job is submitted with: the one its own submitter's run resolved (known), else its record's,
    whose secret env values ("<redacted>") come from what the control host passed down: the site's jobspec_defaults
    for any job, this run's -e env.NAME values only for the job this run follows (own), never another's (one
    person's key must not reach another person's job). A secret found in neither is an error naming env.NAME: the job
    is held until a run that has it asks."""
    if isinstance(known, dict) and known.get("submission_id") == q.sid:
        return known
    spec = dict(q.spec)
    env = dict(spec.get("env") or {}) if isinstance(spec.get("env"), dict) else {}
    if q.sid != own:
        secret_env = {"site": (secret_env or {}).get("site")} if isinstance(secret_env, dict) else None
    given = attempts.given_env(secret_env, spec.get("workload"))
    for key, value in env.items():
        if value == REDACTED:
            if key not in given:
                raise js.JobSpecError(f"env.{key}", "is a secret its record does not keep: follow the job with -e "
                                      f"env.{key}=VALUE (job.yml -e do=wait), or set it in jobspec_defaults", value)
            env[key] = given[key]
    spec["env"] = env
    if REDACTED in json.dumps(spec):
        raise js.JobSpecError("spec", f"the record of {q.sid} holds a redacted value outside env", REDACTED)
    return spec


def resolved_queued(module, config, q, known):
    """The JobSpec a QUEUED job would be submitted with now, checked against the cluster (JobSpecError, Failed)."""
    own = module.params.get("submission_id")
    return js.check_cluster(js.JobSpec.from_dict(spec_of_queued(q, known, module.params.get("secret_env"), own)),
                            config)


def complete_queued(module, config, client, q):
    """A QUEUED record whose id Ray knows (the run that submitted it was cut short before its status was written):
    its status completed from Ray's, under its lock, as an interrupted submit's is. True when it was."""
    job = Job(module, config, q.sid, q.record.dir, client=client)
    with record_lock(q.record.dir):
        status, info = job.status(), job.info()
        if status.final or status.state != QUEUED or info is None:
            return False
        summary = jc.summary(info)
        status.state, status.resumed = summary["status"], "the record of an interrupted submit was completed"
        status.submitted_at = summary["start_time"] or now_ms()
        status.queue.position, status.queue.admitted_at = None, status.submitted_at
        job.save_status(status)
    return True


def submit_queued(module, config, client, q, decision):
    """Submit a QUEUED job the queue admitted (its spec resolved before the decision, q.resolved), exactly as a
    direct submit does (then PENDING/RUNNING), under its record's lock: one that a stop or its queue_s ended
    meanwhile, or that Ray already has, is left to what did that. True when it was submitted."""
    spec = q.resolved
    job = Job(module, config, q.sid, q.record.dir, client=client)
    resume = attempts.resume_point(spec, config) if spec.resume_from else None
    runtime_env = render.render_runtime_env(spec, config)
    entrypoint = render.render_entrypoint(spec, config, resume["path"] if resume else None)
    options = render.entrypoint_options(spec)
    job.learn_secrets(runtime_env)
    shown = dict(entrypoint=job.redact(entrypoint), runtime_env=job.redact(runtime_env), entrypoint_options=options,
                 submit_cmd=job.redact(render.submit_command(spec, config, job.redact(runtime_env))))
    with record_lock(q.record.dir):
        status = job.status()
        if status.final or status.state != QUEUED or job.info() is not None:
            return False
        if resume:
            status.resumed_from = resume
        status.queue.position, status.queue.reason = None, decision["reason"]
        status.queue.words, status.queue.admitted_at = decision["words"], now_ms()
        to_ray(job, spec, config, status, entrypoint, runtime_env, options, shown)
    return True


def write_files(job, spec, shown, runtime_env):
    """The record's files of what was asked (the caller holds the record's lock and saw no status.json)."""
    ensure_layout(spec.output_dir)
    open_index.add(spec.output_dir)  # open until its status.json is final: readers find it without a scan
    job.record.changed = True
    job.record.write_json(job.rec["job_spec"], job.redact(spec.to_dict()))
    job.record.write_json(job.rec["runtime_env"], shown["runtime_env"])
    job.record.write_text(job.rec["submit_cmd"], shown["submit_cmd"] + "\n")
    job.record.write_json(job.rec["env_names"], sorted(runtime_env.get("env_vars", {})))


def new_status(job, spec, part, shown=None):
    """The first status.json of a record: the spec's facts, its queue part, and an attempt's links."""
    status = StatusFile(job.sid, state="PENDING", spec=spec.name, workload=spec.workload, code_path=spec.code_path,
                        code_id=spec.code_id, record=spec.output_dir,
                        timeouts=dataclasses.asdict(spec.timeouts), queue=part,
                        retries={"max": spec.retries.max, "on": list(spec.retries.on),
                                 "cordon": spec.retries.cordon})
    if "resumed_from" in (shown or {}):
        root, linked = attempts.chain(job.config, shown["resumed_from"]["root"])
        status.attempt_of = root
        status.attempt = linked.index(job.sid) if job.sid in linked else len(linked)
        status.resumed_from = shown["resumed_from"]
    return status


def submit_locked(job, spec, config, info, entrypoint, runtime_env, options, shown, nodes=None, part=None):
    """Write the record and submit; the caller holds the record's lock and saw no status.json.
    nodes: the node list the preflight asked for seconds ago (None: the snapshot asks); part: its queue part."""
    write_files(job, spec, shown, runtime_env)
    status = new_status(job, spec, part, shown)
    if info is not None:
        evidence.snapshot(job, "pre", nodes)
        # Ray accepted it before the interruption: finish the record, submit nothing. Ray's start_time is when
        # it accepted the submission, so the pending timeout still counts from then.
        summary = jc.summary(info)
        status.state, status.resumed = summary["status"], "the record of an interrupted submit was completed"
        if summary["start_time"]:
            status.submitted_at = summary["start_time"]
        job.save_status(status)
        return dict(job.result(status, f"{job.sid}: record of an interrupted submit completed (Ray has the job)"),
                    existed=True, **shown)
    return to_ray(job, spec, config, status, entrypoint, runtime_env, options, shown, nodes)


def to_ray(job, spec, config, status, entrypoint, runtime_env, options, shown, nodes=None):
    """Submit to Ray and write what it said (PENDING, or FAILED with SUBMISSION_FAILED); the record's files are
    written and the caller holds its lock. pending_s counts from here: submitted_at is the submission to Ray."""
    evidence.snapshot(job, "pre", nodes)
    status.state = "PENDING"
    started = time.monotonic()
    status.submitted_at = now_ms()
    try:
        returned = job.client.submit(entrypoint=entrypoint, submission_id=job.sid, runtime_env=runtime_env,
                                     metadata={k: str(v) for k, v in spec.metadata.items()}, **options)
    except Exception as exc:  # noqa: BLE001 - record every submission failure, then report it
        job.record.write_text(job.rec["submit_out"], job.redact(f"submission of {job.sid} failed: {exc}\n"))
        status.state, status.final, status.reason = "FAILED", True, "SUBMISSION_FAILED"
        status.message = job.redact(str(exc))
        job.save_status(status)
        first = (job.redact(str(exc)).splitlines() or [type(exc).__name__])[0]
        raise Failed(f"{job.sid}: submission failed: {first}",
                     **job.result(status, evidence.final_line(job, status))) from None
    status.phases = {"submit_s": round(time.monotonic() - started, 3)}
    job.record.write_text(job.rec["submit_out"],
                          f"submitted {returned} to {config.dashboard_url} in {status.phases.submit_s}s\n"
                          f"entrypoint: {shown['entrypoint']}\nentrypoint options: {options}\n")
    job.save_status(status)
    return dict(job.result(status, f"{job.sid} submitted{noted(spec)}"), existed=False, **shown)


def noted(spec):
    """' (what the submitter should know)' of a spec, else '': its retries start from step 0 (js.restart_note)."""
    note = js.restart_note(spec)
    return f" ({note})" if note else ""


def check_paths(spec, config):
    """The record and the checkpoints resolve, symlinks followed, inside the shared root, before anything is
    written: a symlink planted on the share must not make root write elsewhere."""
    root = os.path.realpath(config.shared_root)
    for field in ("output_dir", "checkpoint_dir"):
        path = getattr(spec, field)
        real = os.path.realpath(path)
        if not js.is_inside(real, root):
            raise Failed(f"jobspec field '{field}': must resolve inside shared_root {root} "
                         f"(symlinks followed: {real}), got {path!r}")


def check_code(spec):
    """A code_id must name a snapshot that exists: a typo must not fall back to other code."""
    if spec.code_id is not None and not os.path.isfile(os.path.join(spec.code_path, conventions.MARKER_FILE)):
        root = os.path.dirname(spec.code_path)
        have = sorted(d for d in os.listdir(root) if not d.startswith(".")) if os.path.isdir(root) else []
        raise Failed(f"jobspec field 'code_id': no code snapshot at {spec.code_path} "
                     f"(snapshots here: {', '.join(have) or 'none'}), got {spec.code_id!r}")


def cluster_nodes(job):
    """The cluster's nodes (the state API), or None when they cannot be read: the placement check is then skipped,
    and the record's snapshot says why."""
    try:
        return job.client.nodes()
    except Exception:  # noqa: BLE001 - the checks that need nodes are best effort; Ray's own errors come later
        return None


def compose(module, spec, config, runtime_env, resume_path=None, nodes=None):
    """Let verl's hydra compose the job's config with the snapshot's code (`--cfg job`) before submitting, in the
    job's own Python (on the head, else on a worker), and check what it will ask: flash attention and its library,
    CPUs per GPU bundle (module_utils/jobs/submission/preflight.py).

    Every override verl's config lacks (with where the setting lives now) and every refusal of verl's own start-up
    checks fail here in one message; nothing is created then. A verdict that passed is kept (verdicts.py).
    """
    return preflight.run(module, spec, config, runtime_env, resume_path, nodes)
