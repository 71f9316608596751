"""The final record of a job that ended: its logs, the cluster's state, and why it failed.

What takes time (logs, snapshots, the wait for a dead node) is gathered first; the verdict is then committed under
the record's status lock (Record.save_status), worked out again if a stop gave its reason meanwhile, and not
written at all if another run finalised the record first.
"""

import contextlib
import os
import time

from ansible.module_utils.base import conventions, files
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.evidence import blame, driver_log, goodput, hang, progress, worker_logs
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record.record import json_text, now_ms, read_json
from ansible.module_utils.jobs.record.status import Merge, Outage, final_state
from ansible.module_utils.jobspec.fields import TRAINERS
from ansible.module_utils.verl import diagnosis
from ansible.module_utils.verl.metrics import last_step_line

# How long a failed job with no known signature waits for its driver's node to be declared DEAD.
NODE_DEATH_WAIT_S = 30
# What the diagnosis reads of the record's driver.log: its end, where a failure says why.
DIAGNOSIS_CAP = 8 << 20


def snapshot(job, when, nodes=None):
    """Cluster state into debug/: `ray status` and the node list (pre and post), the job list (post).
    nodes: a node list the caller asked for moments ago (else one is asked for)."""
    try:
        nodes = job.client.nodes() if nodes is None else nodes
        text = job.client.status_text() + "\n\nNodes:\n" + "\n".join(rc.describe_nodes(nodes)) + "\n"
    except Exception as exc:  # noqa: BLE001 - a snapshot must not hide the job's own state
        text, nodes = f"cluster status unavailable: {exc}\n", []
    job.record.write_text(job.rec["status_pre" if when == "pre" else "status_post"], text)
    if when == "pre":
        return nodes
    try:
        # Other jobs' entrypoints may carry their owners' secrets: only this job's is kept.
        lines = [f"{j['submission_id']}\t{j['status']}\t"
                 + (j["entrypoint"] if j["submission_id"] == job.sid else "(another job's entrypoint not kept)")
                 for j in job.client.jobs()]
    except Exception as exc:  # noqa: BLE001
        lines = [f"job list unavailable: {exc}"]
    job.record.write_text(job.rec["job_list_post"], job.redact("\n".join(lines) + "\n"))
    return nodes


def finalize(job, info, status):
    """Write the final record of a job Ray says ended: logs, snapshots, failure details, status.json.

    Returns the record's final status (another run's, when it finalised the record first)."""
    recorded = job.status()
    if recorded.final:
        return recorded
    status.reason = status.reason or recorded.reason
    log = driver_log.refresh_log(job, final=True)
    nodes = snapshot(job, "post")
    summary = jc.summary(info)
    if summary["job_id"]:  # the workers' logs into logs/workers/, before the cluster that holds them is gone
        with contextlib.suppress(Exception):  # best effort, as blame and goodput: it never stops a finalize
            worker_logs.copy(job, "final", {summary["driver_node_id"]}, summary["job_id"], nodes or None)
    note_outage(status, summary["start_time"], job.client.head_started_ms(nodes), None, "finalize")
    driver = next((n for n in nodes if n["node_id"] == summary["driver_node_id"]), None)
    spec = read_json(job.rec["job_spec"])
    status.ray_status = summary["status"]
    status.final = True
    status.message = job.redact(summary["message"] or "")
    status.error_type = summary["error_type"]
    status.driver_exit_code = summary["driver_exit_code"]
    status.driver_node_id = summary["driver_node_id"]
    status.driver_node_ip = driver["node_ip"] if driver else None
    status.driver_on_worker = (not driver["is_head_node"]) if driver else None
    status.start_time, status.end_time = summary["start_time"], summary["end_time"]
    took_steps(job, status, log, spec)
    status.preflight = job.record.preflight(job.redact) or status.preflight  # known fields, bounded, redacted
    status.phases = phases(status.submitted_at, summary["start_time"], summary["end_time"], status.phases.submit_s)
    evidence = None  # a failure's logs and cluster state, gathered once
    while True:
        state = status.state = final_state(summary["status"], status.reason)
        status.ended_short = ended_short(state, status.steps, spec)
        files, status.blame = {}, []
        if state != "SUCCEEDED":
            if evidence is None:
                evidence = (log_sources(job, log, collect_logs(job, summary)), actors_text(job))
            sources, actors = evidence
            status.diagnosis = classify(job, sources, status)
            # Only a failure can be a dead node's: a stopped job's driver node is alive, and waiting for it
            # to die would hold every stop for NODE_DEATH_WAIT_S.
            if status.diagnosis.kind == "unknown" and state == "FAILED":
                found, nodes = driver_node_death(job, summary, nodes)
                status.diagnosis = found or status.diagnosis
            try:
                status.blame = blame.find(job, status, summary, nodes, actors)
            except Exception:  # noqa: BLE001 - evidence of a shape not foreseen blames no one; the record is finalised
                status.blame = []
            files = {job.rec["nodes"]: json_text(nodes), job.rec["actors"]: actors,
                     job.rec["failure"]: job.redact(
                         f"state: {state} (ray: {summary['status']})\nreason: {status.reason}\n"
                         f"error_type: {summary['error_type']}\ndriver_exit_code: {summary['driver_exit_code']}\n"
                         f"message: {summary['message']}\n")}
        saved = job.save_status(status, files)
        if saved is Merge.WRITE:  # the chain's account, in its first job's record (another finaliser did it else)
            goodput.record(getattr(job.config, "shared_root", None), status)
        if saved is not Merge.REASON_GIVEN:
            return status


def took_steps(job, status, log, spec):
    """The record's steps and losses: a verl job's from its metrics.jsonl (exact; none when verl's file logger wrote
    none, and metrics_note says so), a job that is not verl's from its console step lines (SFT's train/loss and
    PPO/GRPO's actor/pg_loss are both `loss`: verl.metrics.SUMMARY_KEYS)."""
    metrics, parsed = getattr(log, "metrics", None), log.parsed
    source = (metrics or progress.new_state()) if status.workload in TRAINERS else parsed
    status.last_step = job.redact(conventions.one_line(step_text(log, spec), 300)) if step_text(log, spec) else None
    status.steps = source["last_loss"][0] if source["last_loss"] else None
    status.first_loss = source["first_loss"][1] if source["first_loss"] else None
    status.last_loss = source["last_loss"][1] if source["last_loss"] else None
    status.metrics_note = progress.note(metrics, status.workload, parsed["last_step"])


def step_text(log, spec):
    """The newest step as a person reads it (progress.readable): from verl's metrics, else (a verl job whose
    metrics.jsonl has no row) from its console's step and loss; a job that is not verl's shows its console step line."""
    metrics = getattr(log, "metrics", None)
    total = spec.get("total_training_steps") if isinstance(spec, dict) else None
    parsed = getattr(log, "parsed", None)
    shown = None
    if metrics is not None or (isinstance(spec, dict) and spec.get("workload") in TRAINERS):
        shown = ((metrics and progress.readable(metrics, total))
                 or progress.readable(progress.from_console(parsed), total))
    if shown is None:
        shown = parsed["last_line"] if parsed is not None else last_step_line(log or "")
    return shown


def note_outage(status, job_started_ms, head_started_ms, last_seen_ms, seen_by):
    """Add to status.outages the head outage a job lived through: its head started after the job did, and Ray
    still knows the job (a head that came back to the GCS store's tables). Returns whether it was added.

    last_seen_ms: the last time the job was seen through the old head (a follower's last good poll; else the
    record's last write), so `seconds` is the longest the head can have been away."""
    if not (head_started_ms and job_started_ms and head_started_ms > job_started_ms):
        return False
    if any(o.to == head_started_ms for o in status.outages):
        return False
    seen = min(max(last_seen_ms or status.updated_at or job_started_ms, job_started_ms), head_started_ms)
    status.outages.append(Outage(from_=seen, to=head_started_ms, seconds=round((head_started_ms - seen) / 1000, 1),
                                 seen_by=seen_by))
    return True


def ended_short(state, steps, spec):
    """Why a job that SUCCEEDED stopped before the step its spec (config/job_spec.json) asked for, or None.

    verl exits 0 when its data runs out before total_training_steps, and, in 0.9.1, when it resumes from a checkpoint
    saved at an epoch's end it skips the next epoch (verl#7401): the record says so rather than call it done."""
    wanted = spec.get("total_training_steps") if isinstance(spec, dict) else None
    if state != "SUCCEEDED" or not isinstance(wanted, int) or isinstance(wanted, bool) or steps is None:
        return None
    if steps >= wanted:
        return None
    return (f"ended at step {steps} of the {wanted} its spec asked for (total_training_steps): the data ran out "
            "first (total_epochs), or verl skipped an epoch resuming from a checkpoint saved at an epoch's end "
            "(verl#7401)")


def phases(submitted_ms, start_ms, end_ms, submit_s):
    """Seconds spent submitting, waiting for resources, and running."""
    out = {"submit_s": round(submit_s, 3) if submit_s is not None else None}
    if submitted_ms and start_ms:
        out["pending_s"] = round(max(0, start_ms - submitted_ms) / 1000, 3)
    if start_ms and end_ms:
        out["running_s"] = round(max(0, end_ms - start_ms) / 1000, 3)
    if submitted_ms and end_ms:
        out["total_s"] = round(max(0, end_ms - submitted_ms) / 1000, 3)
    return out


def actors_text(job):
    """debug/actors.json's content: the cluster's actors, or why they could not be listed."""
    try:
        return json_text(job.client.actors())
    except Exception as exc:  # noqa: BLE001 - the record must not hide the job's own state
        return f"unavailable: {exc}\n"


def driver_node_death(job, summary, nodes):
    """A driver whose node died leaves no words of it when Ray cannot serve that node's logs any more: the node's
    state says it. A killed raylet's node turns DEAD after Ray's health checks, so wait a little.
    Returns the diagnosis (or None) and the newest node list."""
    node_id = summary["driver_node_id"]
    deadline = time.monotonic() + NODE_DEATH_WAIT_S
    while node_id:
        node = next((n for n in nodes if n["node_id"] == node_id), None)
        if node is not None and node["state"] == "DEAD":
            return {"kind": "node_died",
                    "evidence": {"file": "debug/nodes.json",
                                 "line": f"the driver's node {node_id} ({node['node_ip']}) is DEAD"},
                    "hint": diagnosis.HINTS["node_died"]}, nodes
        if time.monotonic() >= deadline:
            return None, nodes
        time.sleep(3)
        try:
            nodes = job.client.nodes()
        except Exception:  # noqa: BLE001 - no answer, no evidence
            return None, nodes
    return None, nodes


def collect_logs(job, summary):
    """A failed job's workers' error logs and the raylet logs of the nodes it ran on, copied to debug/logs/
    (bounded, redacted); returns them as (name, text)."""
    try:
        actors = job.client.actors()
        node_ids = {a["node_id"] for a in actors if a.get("job_id") == summary["job_id"]} | {summary["driver_node_id"]}
        collected = job.client.job_logs(node_ids, summary["job_id"])
    except Exception:  # noqa: BLE001 - the diagnosis must not hide the job's own state
        collected = []
    if collected:
        os.makedirs(job.rec["debug_logs"], exist_ok=True)
    for name, text in collected:
        job.record.write_text(os.path.join(job.rec["debug_logs"], os.path.basename(name)), job.redact(text))
    return collected


def log_sources(job, log, collected):
    """The logs a failure is judged from, as (the record's file, text): the end of the record's driver log (bounded,
    whatever the log's size; else what this look saw of Ray's) and the logs collected (collect_logs)."""
    try:
        kept = files.read_text(job.rec["driver_log"], DIAGNOSIS_CAP, tail=True, base=job.rec["dir"])
    except (OSError, files.RecordError):
        kept = None
    text = conventions.printable(kept) if kept else log
    return [("logs/driver.log", text), *((f"debug/logs/{os.path.basename(n)}", t) for n, t in collected)]


def classify(job, sources, status):
    """Why the job failed (module_utils/verl/diagnosis.py), from its logs (log_sources) and its status."""
    found = diagnosis.classify(sources, {"reason": status.reason, "error_type": status.error_type,
                                         "message": status.message})
    if found is None:
        return {"kind": "unknown", "evidence": None,
                "hint": "no known signature: read logs/driver.log and debug/ (failure.txt, logs/)"}
    if found["kind"] == "hung":  # the evidence is what the stacks showed, not the reason's own word
        found["evidence"] = hang.evidence(status)
    return job.redact(found)


def progress_line(job, info, status, log_text):
    """`<id>: RUNNING for 125s; step:3 - ...`: state, time in that state, verl's newest step line."""
    summary = jc.summary(info)
    since = summary["start_time"] if summary["status"] != "PENDING" else status.submitted_at
    elapsed = f" for {int((now_ms() - since) / 1000)}s" if since else ""
    step = step_text(log_text, read_json(job.rec["job_spec"]))
    idle = hang.idle_note(status, now_ms()) if summary["status"] == "RUNNING" else ""
    board = conventions.tensorboard_link(job.config.tensorboard_url, job.sid) if getattr(log_text, "metrics", None) \
        else None
    # The step line is already printable (verl.metrics.shown_step_line); the whole line goes through one_line, so
    # nothing from the job or the record reaches the operator's terminal as a control character.
    line = (f"{job.sid}: {summary['status']}{elapsed}" + (f"; {step}" if step else "") + idle
            + (f"; {board}" if board else ""))
    return conventions.one_line(job.redact(line))


def final_line(job, status):
    """`<id>: FAILED (HUNG); blamed: 198.18.0.12 (w2): unreadable rank while others wait in a collective`; a chain
    of attempts' ends with its goodput: `; goodput 72% (lost: detection 60 s, restart 40 s, recomputed 12 s)`."""
    blamed = ", ".join(f"{b.node_ip}{f' ({b.host})' if b.host else ''}: {b.why}" for b in status.blame)
    try:
        account = goodput.shown(getattr(job.config, "shared_root", None), status)
    except Exception:  # noqa: BLE001 - the line is printed whatever a chain's records hold
        account = ""
    return conventions.one_line(f"{job.sid}: {status.state}" + (f" ({status.reason})" if status.reason else "")
                                + (f"; {status.ended_short}" if status.ended_short else "")
                                + (f"; blamed: {conventions.one_line(blamed, 400)}" if blamed else "")
                                + (f"; {account}" if account else ""))
