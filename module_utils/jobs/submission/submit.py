"""Submitting a job: checks, verl's config composed and checked in the job's Python (preflight), the record, then
Ray's submit_job.

Idempotent: when the id exists (in Ray or on disk) nothing is submitted or overwritten. A record without
status.json is a submit that was interrupted: the same command completes it (submitting only if Ray has no job).
"""

import dataclasses
import os
import time

from ansible.module_utils.base import conventions
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
from ansible.module_utils.jobs.record.status import NEW, StatusFile
from ansible.module_utils.jobs.submission import attempts, preflight
from ansible.module_utils.jobspec import model as js
from ansible.module_utils.jobspec import render
from ansible.module_utils.jobspec.fields import TRAINERS


def submit(module, config):
    """action=submit: the JobSpec the action plugin resolved (module.params)."""
    return submit_spec(module, config, module.params["spec"], module.params["preflight"])


def submit_spec(module, config, spec, preflight_on):
    """Submit a resolved JobSpec (a dict): the action's, or the next attempt's (chain.py, preflight off)."""
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
        with record_lock(spec.output_dir):
            # Whoever held the lock before may have submitted this id and written its status meanwhile.
            if job.record.has_status():
                return existing()
            if resume:
                attempts.link(config, resume["root"], job.sid)
                # the attempt it resumes is decided: no watcher pass takes its retry up again
                Record(conventions.job_dir(config.shared_root, spec.resume_from), spec.resume_from).retry_decided()
            return submit_locked(job, spec, config, job.info(), entrypoint, runtime_env, options, shown, nodes)
    except LockTimeout as exc:
        raise Failed(f"{job.sid}: {exc}") from None


def submit_locked(job, spec, config, info, entrypoint, runtime_env, options, shown, nodes=None):
    """Write the record and submit; the caller holds the record's lock and saw no status.json.
    nodes: the node list the preflight asked for seconds ago (None: the snapshot asks)."""
    ensure_layout(spec.output_dir)
    open_index.add(spec.output_dir)  # open until its status.json is final: readers find it without a scan
    job.record.changed = True
    job.record.write_json(job.rec["job_spec"], job.redact(spec.to_dict()))
    job.record.write_json(job.rec["runtime_env"], shown["runtime_env"])
    job.record.write_text(job.rec["submit_cmd"], shown["submit_cmd"] + "\n")
    job.record.write_json(job.rec["env_names"], sorted(runtime_env.get("env_vars", {})))
    evidence.snapshot(job, "pre", nodes)
    status = StatusFile(job.sid, state="PENDING", spec=spec.name, workload=spec.workload, code_path=spec.code_path,
                        code_id=spec.code_id, record=spec.output_dir,
                        timeouts=dataclasses.asdict(spec.timeouts),
                        retries={"max": spec.retries.max, "on": list(spec.retries.on),
                                 "cordon": spec.retries.cordon})
    if "resumed_from" in shown:
        root, linked = attempts.chain(config, shown["resumed_from"]["root"])
        status.attempt_of = root
        status.attempt = linked.index(job.sid) if job.sid in linked else len(linked)
        status.resumed_from = shown["resumed_from"]
    if info is not None:
        # Ray accepted it before the interruption: finish the record, submit nothing. Ray's start_time is when
        # it accepted the submission, so the pending timeout still counts from then.
        summary = jc.summary(info)
        status.state, status.resumed = summary["status"], "the record of an interrupted submit was completed"
        if summary["start_time"]:
            status.submitted_at = summary["start_time"]
        job.save_status(status)
        return dict(job.result(status, f"{job.sid}: record of an interrupted submit completed (Ray has the job)"),
                    existed=True, **shown)
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
