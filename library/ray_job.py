#!/usr/bin/python
"""Ansible module: submit, wait for, inspect and stop Ray jobs, keeping each job's record."""

DOCUMENTATION = r"""
---
module: ray_job
short_description: Submit and follow Ray jobs through the Job Submission SDK, with a durable record
description:
  - Submits a resolved JobSpec (module_utils/jobspec.py) with an explicit submission id and the driver
    pinned to a worker through entrypoint resources, and writes the job's record under its output_dir
    (config/, logs/, checkpoints/, debug/, status.json) on the shared root.
  - Idempotent. When the id already exists (in Ray or on disk) nothing is submitted or overwritten
    and the job's state is reported with changed=false.
  - O(action=wait) follows a job for up to O(poll_s) seconds per call, enforcing the spec's pending
    timeout and maximum run time (the job is stopped and recorded as FAILED), refreshing logs/driver.log,
    and finalising status.json and the debug snapshots when the job ends.
  - Whenever it refreshes logs/driver.log it also writes verl's per-step metrics so far (parsed from the
    console logger's C(step:N - key:value) lines, module_utils/verl_metrics.py) to metrics.jsonl and a
    plot of them to metrics.svg in the record.
  - A record that is not final for a job Ray no longer knows, submitted before the head's node started, is a
    job the head forgot when it restarted; O(action=wait), O(action=status) and O(action=logs) finalise it as
    FAILED (reason HEAD_RESTARTED), keeping all it holds. O(action=reconcile) does that for every record on the
    shared root (up.yml runs it after healing). When the head cannot be read, nothing is finalised.
  - A job whose spec sets C(retries) and that failed for one of C(retries.on)'s reasons (its record's diagnosis)
    is resubmitted by the action as a linked attempt C(<id>-r1), C(-r2), ... up to C(retries.max), resuming
    verl from the newest whole checkpoint over the job's and its attempts' checkpoint dirs
    (module_utils/checkpoints.py); the first job's status.json lists its C(attempts), each attempt's names
    C(attempt_of) and C(resumed_from). O(action=resume) does the same by hand (O(action=attempt) is its module
    half, which names the next attempt and returns the record's spec, changing nothing).
  - Runs on the head with a Python that has Ray; clears RAY_ADDRESS and proxy variables first.
  - Its action plugin (action_plugins/ray_job.py) runs on the control host first. It takes the spec by name
    (O(spec)), layers the site's C(jobspec_defaults), O(overrides) and, with O(extra_vars=true), this run's
    C(-e) values, validates, and calls this module with the resolved JobSpec. With O(wait=true) (or
    O(action=wait)) it follows the job with repeated O(action=wait) calls of O(poll_s) seconds each, printing
    one progress line per call, until the job's record is final. It also fills O(ray_config), O(token_path)
    and the interpreter (C(ray_python)) from the inventory when the task does not set them.
options:
  action:
    description:
      - What to do. C(resume) is the action plugin's only (it calls the module's C(attempt), then C(submit));
        C(attempt) is the module's only.
    type: str
    choices: [submit, wait, status, stop, logs, reconcile, resume, attempt]
    default: submit
  spec:
    description:
      - To the action, the name of a spec file (C(jobspecs/<spec>.yaml)); with O(extra_vars=true) it defaults to
        C(-e spec=NAME). The module itself receives the resolved JobSpec. Required for submit.
    type: raw
  overrides:
    description: (action) JobSpec field values layered over the spec file and the site defaults, e.g. a suite entry's.
    type: dict
    default: {}
  extra_vars:
    description: (action) Layer this run's C(-e) field values over the spec (and take O(spec) from C(-e spec=NAME)).
    type: bool
    default: false
  wait:
    description: (action) After submitting, follow the job until its record is final.
    type: bool
    default: false
  specs_dir:
    description: (action) Where spec files are; default the project's C(jobspecs/).
    type: path
  suite:
    description:
      - (action) Take the spec and overrides from the entry O(entry) of C(suites/<suite>.yaml), read here on the
        control host, so that an entry's secret env values never pass through Ansible's variables.
    type: str
  entry:
    description: (action) The suite entry's name (with O(suite)).
    type: str
  suites_dir:
    description: (action) Where suite files are; default the project's C(suites/).
    type: path
  python:
    description: (action) Python with Ray on the head that runs the module; default C(ray_python).
    type: str
  submission_id:
    description: The job, for every action but submit (where it overrides the spec's submission_id).
    type: str
  stop_reason:
    description: For O(action=stop), the reason its record gives; C(SLURM_ALLOCATION_ENDING) is the Slurm batch entry point's.
    type: str
    choices: [STOPPED_BY_USER, SLURM_ALLOCATION_ENDING]
    default: STOPPED_BY_USER
  output_dir:
    description: The job's record directory; default C(<shared_root>/jobs/<submission_id>).
    type: path
  poll_s:
    description:
      - Longest time one O(action=wait) module call follows the job before it returns its progress line;
        the action prints one line per call.
    type: int
    default: 20
  preflight:
    description:
      - Before submitting a verl workload, compose its hydra config with the job's code (C(--cfg job)) on
        this host, so a misspelled override fails with verl's message before the cluster allocates anything.
    type: bool
    default: true
extends_documentation_fragment:
  - ray_connection
  - ray_connection.ray_config
attributes:
  check_mode:
    support: full
    details: In check mode submit only renders the entrypoint, runtime_env and submit command.
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Submit | Submit the spec named by -e spec=NAME and follow it
  ray_job:
    extra_vars: true
    wait: true
  register: submitted

- name: Regression | Run a suite entry
  ray_job:
    suite: lab
    entry: sft
    submission_id: nightly-1-sft
    wait: true

- name: Job | Stop a job
  ray_job:
    action: stop
    submission_id: sft-20261122T120000Z-a1b2c3

- name: Records | Finalise the records of jobs a restarted head forgot
  ray_job:
    action: reconcile
"""

RETURN = r"""
submission_id:
  description: The job's id.
  returned: for every action but reconcile
  type: str
state:
  description: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED (a job stopped for a timeout is FAILED).
  returned: for every action but reconcile
  type: str
done:
  description: The job has ended and its record is final.
  returned: for every action but reconcile
  type: bool
existed:
  description: (submit) The id existed already; nothing was submitted.
  returned: when action=submit
  type: bool
record:
  description: The job's record directory.
  returned: for every action but reconcile
  type: str
progress:
  description: One line saying where the job is (state, time in that state, newest verl step line; secrets redacted).
  returned: always
  type: str
entrypoint:
  description: The entrypoint (secrets redacted).
  returned: when action=submit
  type: str
runtime_env:
  description: The runtime_env (secrets redacted).
  returned: when action=submit
  type: dict
entrypoint_options:
  description: The driver's resource options (entrypoint_num_cpus, entrypoint_resources, ...) that are not zero.
  returned: when action=submit
  type: dict
submit_cmd:
  description: The equivalent C(ray job submit) command (secrets redacted).
  returned: when action=submit
  type: str
status:
  description: The job's status.json.
  returned: for every action but reconcile
  type: dict
log_tail:
  description: The end of the driver log (action=logs).
  returned: when action=logs
  type: str
finalized:
  description: (reconcile) Ids whose records were finalised as FAILED (HEAD_RESTARTED); in check mode, would be.
  returned: when action=reconcile
  type: list
  elements: str
open:
  description: (reconcile) Ids of the records that are not final and that Ray still knows.
  returned: when action=reconcile
  type: list
  elements: str
"""

import contextlib
import datetime
import os
import tempfile
import time

from ansible.module_utils import checkpoints as ck
from ansible.module_utils import conventions, diagnosis
from ansible.module_utils import job_record as jr
from ansible.module_utils import jobspec as js
from ansible.module_utils import jobspec_render as render
from ansible.module_utils import ray_cluster as rc
from ansible.module_utils import verl_metrics as vm
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ray_connection import argument_spec
from ansible.module_utils.redaction import DEFAULT_SECRET_ENV_NAMES, is_secret_name, redact

# How long a failed job with no known signature waits for its driver's node to be declared DEAD.
NODE_DEATH_WAIT_S = 30
# Lines of the driver log that action=logs returns.
LOG_TAIL_LINES = 100


class Failed(Exception):
    """Ends an action with module.fail_json(msg, **result)."""

    def __init__(self, msg, **result):
        super().__init__(msg)
        self.result = result


class Job:
    """One job: its Ray client, its record and how to redact what we write."""

    def __init__(self, module, config, sid, output_dir, client=None):
        self.module = module
        self.config = config
        self.sid = sid
        self.rec = jr.paths(output_dir)
        self.token = rc.read_token(module.params["token_path"])
        self.client = client or rc.job_client(config.dashboard_url, self.token)
        self.secret_names = tuple(config.secret_env_names)
        self.secrets = [self.token] if self.token else []
        self.changed = False  # whether this run wrote anything into the record

    def learn_secrets(self, runtime_env):
        """Remember the job's secret env values, so they are hidden inside any text (logs, commands)."""
        env_vars = (runtime_env or {}).get("env_vars") or {}
        self.secrets += [v for k, v in env_vars.items() if is_secret_name(k, self.secret_names) and v]

    def redact(self, obj):
        return redact(obj, self.secret_names, extra_values=self.secrets)

    def write_text(self, path, text):
        """Write a record file when its content differs (so `changed` says whether the record changed)."""
        try:
            with open(path, encoding="utf-8") as handle:
                if handle.read() == text:
                    return
        except (OSError, UnicodeDecodeError):
            pass
        jr.write_text(path, text)
        self.changed = True

    def write_json(self, path, obj):
        self.write_text(path, jr.json_text(obj))

    def info(self):
        """Ray's JobInfo, or None when Ray does not know the id (404)."""
        try:
            info = self.client.get_job_info(self.sid)
        except RuntimeError as exc:
            if "404" in str(exc) or "does not exist" in str(exc):
                return None
            raise
        self.learn_secrets(getattr(info, "runtime_env", None))
        return info

    def status(self):
        data = jr.read_json(self.rec["status"])
        return data if isinstance(data, dict) else {}

    def rebuilt_status(self):
        """status.json lost or unreadable: what the record still says (config/job_spec.json), no submit time.

        Without submitted_at the pending timeout is not enforced: a lost file must never stop a healthy job."""
        spec = jr.read_json(self.rec["job_spec"])
        spec = spec if isinstance(spec, dict) else {}
        timeouts = spec.get("timeouts") if isinstance(spec.get("timeouts"), dict) else {}
        return {"submission_id": self.sid, "spec": spec.get("name"), "workload": spec.get("workload"),
                "state": "UNKNOWN", "final": False, "reason": None, "record": self.rec["dir"],
                "rebuilt": "status.json was missing or unreadable",
                "timeouts": {"pending_s": timeouts.get("pending_s", 600), "max_run_s": timeouts.get("max_run_s")}}

    def save_status(self, status, files=None):
        """Write status.json (and, for a final record, its files {path: text}) under the record's status lock.

        Several runs write one record: a wait whose controller was interrupted (Slurm's scancel) goes on
        polling on the head while a stop gives its reason and finalises. So a final record is never written
        over, and a reason another run recorded is never dropped. Returns None when written (or nothing
        changed); "final" when another run had finalised the record (`status` now holds its status, nothing
        was written); "reason" when a final status lacks the reason another run gave meanwhile (`status`
        gets that reason, nothing was written: the caller works it into the state and saves again)."""
        def same(old):
            return ({k: v for k, v in old.items() if k != "updated_at"}
                    == {k: v for k, v in status.items() if k != "updated_at"})

        if not files and same(self.status()):
            return None
        with jr.record_lock(self.rec["dir"], name=jr.STATUS_LOCK_FILE):
            old = self.status()
            if old.get("final"):
                status.clear()
                status.update(old)
                return "final"
            # A reason given by another run: in status.json, or, for a job Ray STOPPED, in the stop request
            # of a run that has not written status.json yet (one that failed on its own keeps its own
            # diagnosis, and its retries, even if an interrupted stop left the file behind).
            given = not status.get("reason") and (
                old.get("reason") or (status.get("final") and status.get("ray_status") == "STOPPED"
                                      and self.stop_request()))
            if given:
                status["reason"] = given
                if status.get("final"):
                    return "reason"
            for path, text in (files or {}).items():
                self.write_text(path, text)
            if same(old):
                return None
            status["updated_at"] = jr.now_ms()
            self.write_json(self.rec["status"], status)
        return None

    def request_stop(self, reason):
        """Leave a stop's reason in the record before Ray is asked; best effort, a stop never waits on it."""
        try:
            jr.write_text(self.rec["stop_request"], reason + "\n")
        except OSError:
            return False
        return True

    def withdraw_stop_request(self, reason):
        """Remove this run's stop request (not one another stop of the job left meanwhile)."""
        if self.stop_request() == reason:
            with contextlib.suppress(OSError):
                os.remove(self.rec["stop_request"])

    def stop_request(self):
        try:
            with open(self.rec["stop_request"], encoding="utf-8") as handle:
                reason = handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
        # Only a reason this module gives is taken from the file (it sits on storage others can write).
        return reason if reason in conventions.OWN_STOP_REASONS else None

    def refresh_log(self):
        """The driver log: Ray's, written into the record; when Ray has none (the driver's node died, the head
        forgot the job), what the record kept, which is never replaced by nothing."""
        try:
            text = self.client.get_job_logs(self.sid)
        except Exception:  # noqa: BLE001 - logs are best effort while a job starts
            text = ""
        if text:
            self.write_text(self.rec["driver_log"], self.redact(text))
            self.write_metrics(text)
            return text
        try:
            with open(self.rec["driver_log"], encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def write_metrics(self, log_text):
        """verl's per-step metrics so far: metrics.jsonl and metrics.svg in the record (issue 11)."""
        rows = vm.parse_log(log_text)
        if rows:
            self.write_text(os.path.join(self.rec["dir"], vm.METRICS_FILE), self.redact(vm.jsonl(rows)))
            self.write_text(os.path.join(self.rec["dir"], vm.PLOT_FILE), self.redact(vm.plot_svg(rows, self.sid)))

    def snapshot(self, when):
        """Cluster state into debug/: `ray status` and the job list (and more on failure)."""
        try:
            text = rc.cluster_status_text(self.config.dashboard_url, self.token)
            nodes = rc.list_nodes(self.config.dashboard_url)
            text += "\n\nNodes:\n" + "\n".join(rc.describe_nodes(nodes)) + "\n"
        except Exception as exc:  # noqa: BLE001 - a snapshot must not hide the job's own state
            text, nodes = f"cluster status unavailable: {exc}\n", []
        self.write_text(self.rec["status_pre" if when == "pre" else "status_post"], text)
        if when == "pre":
            return nodes
        try:
            jobs = [rc.job_summary(j) for j in self.client.list_jobs()]
            # Other jobs' entrypoints may carry their owners' secrets: only this job's is kept.
            lines = [f"{j['submission_id']}\t{j['status']}\t" + (j["entrypoint"] if j["submission_id"] == self.sid
                                                                  else "(another job's entrypoint not kept)")
                     for j in jobs]
        except Exception as exc:  # noqa: BLE001
            lines = [f"job list unavailable: {exc}"]
        self.write_text(self.rec["job_list_post"], self.redact("\n".join(lines) + "\n"))
        return nodes

    def finalize(self, info, status):
        """Write the final record: logs, snapshots, failure details, status.json.

        What takes time (logs, snapshots, the wait for a dead node) is done first; the verdict is then
        committed under the status lock, worked out again if a stop gave its reason meanwhile, and not
        written at all if another run finalised the record first (its record stands)."""
        recorded = self.status()
        if recorded.get("final"):
            return recorded
        status["reason"] = status.get("reason") or recorded.get("reason")
        log = self.refresh_log()
        nodes = self.snapshot("post")
        job = rc.job_summary(info)
        driver = next((n for n in nodes if n["node_id"] == job["driver_node_id"]), None)
        # SFT prints train/loss; PPO/GRPO print actor/pg_loss, which verl_metrics names loss too.
        losses = jr.step_losses(log) or [(r["step"], r["loss"]) for r in vm.parse_log(log) if "loss" in r]
        status.update({
            "ray_status": job["status"], "final": True,
            "message": self.redact(job["message"] or ""), "error_type": job["error_type"],
            "driver_exit_code": job["driver_exit_code"], "driver_node_id": job["driver_node_id"],
            "driver_node_ip": driver["node_ip"] if driver else None,
            "driver_on_worker": (not driver["is_head_node"]) if driver else None,
            "start_time": job["start_time"], "end_time": job["end_time"],
            "last_step": self.redact(jr.last_step_line(log)),
            "steps": losses[-1][0] if losses else None,
            "first_loss": losses[0][1] if losses else None,
            "last_loss": losses[-1][1] if losses else None,
        })
        preflight = jr.read_json(self.rec["preflight"])
        if preflight is not None:
            status["preflight"] = preflight
        status["phases"] = jr.phases(status.get("submitted_at"), job["start_time"], job["end_time"],
                                     status.get("phases", {}).get("submit_s"))
        evidence = None  # a failure's logs and cluster state, gathered once
        while True:
            reason = status.get("reason")
            state = status["state"] = jr.final_state(job["status"], reason)
            files = {}
            if state != "SUCCEEDED":
                if evidence is None:
                    evidence = (self.collect_logs(job), self.actors_text())
                collected, actors = evidence
                status["diagnosis"] = self.classify(log, collected, status)
                # Only a failure can be a dead node's: a stopped job's driver node is alive, and waiting for it
                # to die would hold every stop for NODE_DEATH_WAIT_S.
                if status["diagnosis"]["kind"] == "unknown" and state == "FAILED":
                    found, nodes = self.driver_node_death(job, nodes)
                    status["diagnosis"] = found or status["diagnosis"]
                files = {self.rec["nodes"]: jr.json_text(nodes), self.rec["actors"]: actors,
                         self.rec["failure"]: self.redact(
                             f"state: {state} (ray: {job['status']})\nreason: {reason}\n"
                             f"error_type: {job['error_type']}\ndriver_exit_code: {job['driver_exit_code']}\n"
                             f"message: {job['message']}\n")}
            if self.save_status(status, files) != "reason":
                return status

    def actors_text(self):
        """debug/actors.json's content: the cluster's actors, or why they could not be listed."""
        try:
            return jr.json_text(rc.list_actor_summaries(self.config.dashboard_url))
        except Exception as exc:  # noqa: BLE001 - the record must not hide the job's own state
            return f"unavailable: {exc}\n"

    def head_started_ms(self):
        """When the head's node started (the cluster's node list), or None when that cannot be told."""
        heads = [n for n in rc.list_nodes(self.config.dashboard_url) if n["is_head_node"] and n["state"] == "ALIVE"]
        return heads[0].get("start_time_ms") if len(heads) == 1 else None

    def forgotten_since(self, status, head_started):
        """head_started, if the head started after this job was submitted: Ray forgot the job when the head
        restarted. None when it cannot be shown (the caller then changes nothing: fail closed)."""
        submitted = status.get("submitted_at")
        if not submitted:  # a resumed or rebuilt record: the record's own files say when it was written
            try:
                submitted = int(os.stat(self.rec["job_spec"]).st_mtime * 1000)
            except OSError:
                return None
        return head_started if head_started and head_started > submitted else None

    def finalize_forgotten(self, status, head_started_ms):
        """The record of a job the restarted head forgot: FAILED, with everything already in it kept.
        Returns its status and whether this run finalised it (not another run, first)."""
        self.snapshot("post")
        when = datetime.datetime.fromtimestamp(head_started_ms / 1000, datetime.timezone.utc).strftime(  # noqa: UP017
            "%Y-%m-%dT%H:%M:%SZ")
        message = (f"Ray's head started again at {when}, after this job was submitted, and no longer knows it; "
                   "the job's driver and workers ended with the old cluster")
        status.update(state="FAILED", final=True, reason="HEAD_RESTARTED", message=message,
                      last_state=status.get("state"), head_started_at=head_started_ms)
        status["diagnosis"] = diagnosis.classify([], status) or {"kind": "unknown", "evidence": None, "hint": ""}
        done = self.save_status(status, {self.rec["failure"]: f"state: FAILED\nreason: HEAD_RESTARTED\n"
                                                              f"message: {message}\n"})
        return status, done is None

    def forgotten(self, status):
        """Ray does not know this job: finalise its record if the head restarted since, else fail naming why."""
        started = self.forgotten_since(status, self.head_started_ms())
        if started is None:
            raise Failed(f"{self.sid}: Ray does not know this job, and its head has run since before the job was "
                         "submitted; the record is unchanged (another cluster's record?)",
                         **self.result(status, f"{self.sid}: unknown to Ray"))
        return self.finalize_forgotten(status, started)[0]

    def driver_node_death(self, job, nodes):
        """A driver whose node died leaves no words of it when Ray cannot serve that node's logs any more: the
        node's state says it. A killed raylet's node turns DEAD after Ray's health checks, so wait a little.
        Returns the diagnosis (or None) and the newest node list."""
        node_id = job["driver_node_id"]
        deadline = time.monotonic() + NODE_DEATH_WAIT_S
        while node_id:
            node = next((n for n in nodes if n["node_id"] == node_id), None)
            if node is not None and node["state"] == "DEAD":
                return {"kind": "node_died",
                        "evidence": {"file": "debug/nodes.json",
                                     "line": f"the driver's node {node_id} ({node['node_ip']}) is DEAD"},
                        "hint": {k: h for k, _, h in diagnosis.SIGNATURES}["node_died"]}, nodes
            if time.monotonic() >= deadline:
                return None, nodes
            time.sleep(3)
            try:
                nodes = rc.list_nodes(self.config.dashboard_url)
            except Exception:  # noqa: BLE001 - no answer, no evidence
                return None, nodes
        return None, nodes

    def collect_logs(self, job):
        """A failed job's workers' error logs and the raylet logs of the nodes it ran on, copied to
        debug/logs/ (bounded, redacted); returns them as (name, text)."""
        try:
            actors = rc.list_actor_summaries(self.config.dashboard_url)
            node_ids = {a["node_id"] for a in actors if a.get("job_id") == job["job_id"]} | {job["driver_node_id"]}
            collected = rc.collect_job_logs(self.config.dashboard_url, node_ids, job["job_id"])
        except Exception:  # noqa: BLE001 - the diagnosis must not hide the job's own state
            collected = []
        if collected:
            os.makedirs(self.rec["debug_logs"], exist_ok=True)
        for name, text in collected:
            self.write_text(os.path.join(self.rec["debug_logs"], os.path.basename(name)), self.redact(text))
        return collected

    def classify(self, log, collected, status):
        """Why the job failed (module_utils/diagnosis.py), from its driver log and the logs collected."""
        found = diagnosis.classify([("logs/driver.log", log), *((f"debug/logs/{n}", t) for n, t in collected)],
                                   status)
        if found is None:
            return {"kind": "unknown", "evidence": None,
                    "hint": "no known signature: read logs/driver.log and debug/ (failure.txt, logs/)"}
        return self.redact(found)

    def result(self, status, progress, **extra):
        state = status.get("state", "UNKNOWN")
        return dict(changed=self.changed, submission_id=self.sid, state=state, done=bool(status.get("final")),
                    record=self.rec["dir"], status=status, progress=self.redact(progress), **extra)


def progress_line(job, info, status, log_text):
    """`<id>: RUNNING for 125s; step:3 - ...`: state, time in that state, verl's newest step line."""
    summary = rc.job_summary(info)
    since = summary["start_time"] if summary["status"] != "PENDING" else status.get("submitted_at")
    elapsed = f" for {int((jr.now_ms() - since) / 1000)}s" if since else ""
    step = jr.last_step_line(log_text or "")
    return f"{job.sid}: {summary['status']}{elapsed}" + (f"; {step}" if step else "")


def final_line(job, status):
    return f"{job.sid}: {status['state']}" + (f" ({status['reason']})" if status.get("reason") else "")


def submit(module, config):
    try:
        spec = js.check_cluster(js.JobSpec.from_dict(module.params["spec"]), config)
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
    resume = resume_point(spec, config) if spec.resume_from and not job.status().get("submission_id") else None
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
        if info is not None and not status.get("final") and not status.get("reason"):
            status["state"] = rc.job_summary(info)["status"]
        return dict(job.result(status, f"{job.sid} exists already: not submitted again"), existed=True, **shown)

    info = job.info()
    # A record without status.json is a submit that was interrupted: the same command completes it.
    resuming = os.path.isdir(spec.output_dir) and not job.status().get("submission_id")
    if not resuming and (os.path.exists(spec.output_dir) or info is not None):
        return existing()
    check_code(spec)
    if module.params["preflight"] and info is None:
        compose(module, spec, config, runtime_env, resume_path)
    if module.check_mode:
        what = "record would be completed" if resuming else "would be submitted"
        return dict(job.result({"state": "NEW"}, f"{job.sid} {what}"), changed=True, existed=resuming, **shown)
    jr.create_exclusive(spec.output_dir)  # the loser of a race for this id waits on the lock below
    try:
        with jr.record_lock(spec.output_dir):
            # Whoever held the lock before may have submitted this id and written its status meanwhile.
            if job.status().get("submission_id"):
                return existing()
            if resume:
                link_attempt(config, resume["root"], job.sid)
            return submit_locked(job, spec, config, job.info(), entrypoint, runtime_env, options, shown)
    except jr.LockTimeout as exc:
        raise Failed(f"{job.sid}: {exc}") from None


def record_status(config, sid):
    """The status.json of job sid's record, or {} (none, or unreadable)."""
    status = jr.read_json(jr.paths(conventions.job_dir(config.shared_root, sid))["status"])
    return status if isinstance(status, dict) else {}


def chain(config, sid):
    """(root id, [root, attempts...]) of the jobs linked with sid: a first job and its resuming attempts."""
    root = record_status(config, sid).get("attempt_of")
    root = root if conventions.matches(conventions.ID_RULE, root) else sid
    attempts = record_status(config, root).get("attempts", [])
    return root, [root, *(a for a in attempts if conventions.matches(conventions.ID_RULE, a) and a != root)]


def resume_point(spec, config):
    """Where a job with resume_from starts: the newest whole checkpoint over the linked jobs' checkpoint dirs."""
    if not os.path.isdir(conventions.job_dir(config.shared_root, spec.resume_from)):
        raise Failed(f"jobspec field 'resume_from': no job record at "
                     f"{conventions.job_dir(config.shared_root, spec.resume_from)}")
    resumed = record_status(config, spec.resume_from)
    if not resumed.get("final"):
        raise Failed(f"jobspec field 'resume_from': {spec.resume_from} has not ended ({resumed.get('state')}): "
                     "stop it first")
    root, linked = chain(config, spec.resume_from)
    dirs = []
    for sid in linked:
        rec = jr.paths(conventions.job_dir(config.shared_root, sid))
        old = jr.read_json(rec["job_spec"])
        directory = old.get("checkpoint_dir") if isinstance(old, dict) else None
        if not (isinstance(directory, str) and js.is_inside(directory, config.shared_root)):
            directory = rec["checkpoints"]
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


def link_attempt(config, root, sid):
    """Name the attempt in the first job's status.json (`attempts`), under that record's locks."""
    rec = jr.paths(conventions.job_dir(config.shared_root, root))
    with jr.record_lock(rec["dir"]), jr.record_lock(rec["dir"], name=jr.STATUS_LOCK_FILE):
        status = jr.read_json(rec["status"])
        if isinstance(status, dict) and sid not in status.get("attempts", []):
            status["attempts"] = [*status.get("attempts", []), sid]
            jr.write_json(rec["status"], status)


def submit_locked(job, spec, config, info, entrypoint, runtime_env, options, shown):
    """Write the record and submit; the caller holds the record's lock and saw no status.json."""
    jr.ensure_layout(spec.output_dir)
    job.changed = True
    job.write_json(job.rec["job_spec"], job.redact(spec.to_dict()))
    job.write_json(job.rec["runtime_env"], shown["runtime_env"])
    job.write_text(job.rec["submit_cmd"], shown["submit_cmd"] + "\n")
    job.write_json(job.rec["env_names"], sorted(runtime_env.get("env_vars", {})))
    job.snapshot("pre")
    status = {"submission_id": job.sid, "spec": spec.name, "workload": spec.workload, "state": "PENDING",
              "final": False, "reason": None, "code_path": spec.code_path, "code_id": spec.code_id,
              "record": spec.output_dir, "timeouts": {"pending_s": spec.timeouts.pending_s,
                                                      "max_run_s": spec.timeouts.max_run_s},
              "retries": {"max": spec.retries.max, "on": list(spec.retries.on)}}
    if "resumed_from" in shown:
        root, linked = chain(config, shown["resumed_from"]["root"])
        status.update(attempt_of=root, attempt=linked.index(job.sid) if job.sid in linked else len(linked),
                      resumed_from=shown["resumed_from"])
    if info is not None:
        # Ray accepted it before the interruption: finish the record, submit nothing. Ray's start_time is when
        # it accepted the submission, so the pending timeout still counts from then.
        summary = rc.job_summary(info)
        status.update(state=summary["status"], resumed="the record of an interrupted submit was completed")
        if summary["start_time"]:
            status["submitted_at"] = summary["start_time"]
        job.save_status(status)
        return dict(job.result(status, f"{job.sid}: record of an interrupted submit completed (Ray has the job)"),
                    existed=True, **shown)
    started = time.monotonic()
    status["submitted_at"] = jr.now_ms()
    try:
        returned = job.client.submit_job(entrypoint=entrypoint, submission_id=job.sid, runtime_env=runtime_env,
                                         metadata={k: str(v) for k, v in spec.metadata.items()}, **options)
    except Exception as exc:  # noqa: BLE001 - record every submission failure, then report it
        job.write_text(job.rec["submit_out"], job.redact(f"submission of {job.sid} failed: {exc}\n"))
        status.update(state="FAILED", final=True, reason="SUBMISSION_FAILED", message=job.redact(str(exc)))
        job.save_status(status)
        first = (job.redact(str(exc)).splitlines() or [type(exc).__name__])[0]
        raise Failed(f"{job.sid}: submission failed: {first}", **job.result(status, final_line(job, status))) from None
    status["phases"] = {"submit_s": round(time.monotonic() - started, 3)}
    job.write_text(job.rec["submit_out"],
                   f"submitted {returned} to {config.dashboard_url} in {status['phases']['submit_s']}s\n"
                   f"entrypoint: {shown['entrypoint']}\nentrypoint options: {options}\n")
    job.save_status(status)
    return dict(job.result(status, f"{job.sid} submitted"), existed=False, **shown)


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


def compose(module, spec, config, runtime_env, resume_path=None):
    """Let verl's hydra compose the job's config with the snapshot's code (`--cfg job`) before submitting.

    A misspelled override fails here in seconds with verl's own message; nothing is created then.
    """
    argv = render.compose_command(spec, config, resume_path)
    if argv is None:
        return
    env = dict(os.environ)
    env.update(runtime_env.get("env_vars", {}))
    env.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory(prefix="verl-compose-") as cwd:
        rc_, out, err = module.run_command(argv, cwd=cwd, environ_update=env)
    if rc_ != 0:
        lines = [line.strip() for line in (err or out).strip().splitlines() if line.strip()]
        hint = " | ".join(lines[-6:])
        raise Failed(f"{spec.submission_id}: verl rejected the job's config (nothing submitted): {hint}",
                     compose_cmd=" ".join(argv))


def stop_for(job, status, reason):
    """Stop a job we gave up on and say why in its record (a record another run finalised stays as it is).

    The reason is left in the record before Ray is asked: a wait polling meanwhile (one whose controller
    was interrupted goes on for up to poll_s on the head) can see the job STOPPED before this run writes
    status.json, and finalises it with this reason rather than without one. A run killed while asking leaves
    the file behind; it only ever explains a job Ray reports STOPPED."""
    requested = job.request_stop(reason)
    try:
        job.client.stop_job(job.sid)
    except Exception as exc:  # noqa: BLE001 - a stop that failed is not recorded as one
        if requested:
            job.withdraw_stop_request(reason)
        raise Failed(f"{job.sid}: stopping the job failed, its record is unchanged: "
                     f"{conventions.one_line(job.redact(str(exc)), 200)}") from None
    status["reason"] = reason
    job.save_status(status)
    if requested:  # status.json says it now
        job.withdraw_stop_request(reason)
    # Ray may not stop a job whose driver was never placed (ray#31008); it fails such a job
    # itself at RAY_JOB_START_TIMEOUT_SECONDS. We record our verdict without waiting for that.
    deadline = time.monotonic() + (10 if reason == "PENDING_TIMEOUT" else 30)
    while time.monotonic() < deadline:
        info = job.info()
        if info is not None and rc.job_summary(info)["status"] in rc.TERMINAL_JOB_STATES:
            return info
        time.sleep(1)
    return job.info()


def follow(module, job):
    """action=wait: follow the job for up to poll_s seconds, enforcing its pending_s and max_run_s."""
    status = job.status()
    if not status.get("submission_id"):
        status = job.rebuilt_status()
    if status.get("final"):
        return job.result(status, f"{final_line(job, status)} (final)")
    if module.check_mode:
        return job.result(status, f"{job.sid}: not followed in check mode")
    timeouts = status.get("timeouts", {})
    deadline = time.monotonic() + module.params["poll_s"]
    while True:
        info = job.info()
        if info is None:
            if status.get("rebuilt"):  # no status.json to say it was submitted: never finalised from a guess
                raise Failed(f"{job.sid}: Ray does not know this job and its status.json is lost; the record is "
                             "unchanged", **job.result(status, f"{job.sid}: unknown to Ray"))
            status = job.forgotten(status)
            return job.result(status, final_line(job, status))
        summary = rc.job_summary(info)
        now = jr.now_ms()
        if (summary["status"] == "PENDING" and status.get("submitted_at")
                and now - status["submitted_at"] > timeouts.get("pending_s", 600) * 1000):
            info = stop_for(job, status, "PENDING_TIMEOUT")
        elif (summary["status"] == "RUNNING" and timeouts.get("max_run_s") and summary["start_time"]
              and now - summary["start_time"] > timeouts["max_run_s"] * 1000):
            info = stop_for(job, status, "DEADLINE_EXCEEDED")
        if rc.job_summary(info)["status"] in rc.TERMINAL_JOB_STATES or status.get("reason") == "PENDING_TIMEOUT":
            status = job.finalize(info, status)
            return job.result(status, final_line(job, status))
        if time.monotonic() >= deadline:
            break
        time.sleep(1)
    log = job.refresh_log()
    status["state"] = summary["status"]
    job.save_status(status)
    return job.result(status, progress_line(job, info, status, log))


def stop(module, job):
    status, info = job.status(), job.info()
    running = info is not None and rc.job_summary(info)["status"] not in rc.TERMINAL_JOB_STATES
    if running and not module.check_mode:
        info = stop_for(job, status, module.params["stop_reason"])
        if info is not None and rc.job_summary(info)["status"] in rc.TERMINAL_JOB_STATES:
            status = job.finalize(info, status)
        else:  # Ray has not stopped it yet: a later status or wait finalizes the record
            status["state"] = rc.job_summary(info)["status"] if info is not None else status.get("state")
            job.save_status(status)
    # In check mode, say that a stop would change the job.
    return dict(job.result(status, f"{job.sid}: {'stopped' if running else 'not running'}"), changed=running)


def refresh(module, job):
    """action=status/logs: bring the record up to date with Ray (finalising it when the job ended)."""
    status, info = job.status(), job.info()
    if not status.get("submission_id"):  # lost or unreadable: what the rest of the record says
        status = job.rebuilt_status()
    log = ""
    if info is None and not status.get("final") and not status.get("rebuilt") and not module.check_mode:
        status = job.forgotten(status)
    if info is not None and not module.check_mode:
        if not status.get("final"):
            if rc.job_summary(info)["status"] in rc.TERMINAL_JOB_STATES:
                status = job.finalize(info, status)
            else:
                status["state"] = rc.job_summary(info)["status"]
                job.save_status(status)
        log = job.refresh_log()
    return status, log


def status_action(module, job):
    status, _ = refresh(module, job)
    return job.result(status, final_line(job, status) if status.get("final") else f"{job.sid}: {status.get('state')}")


def logs_action(module, job):
    status, log = refresh(module, job)
    if not log and os.path.exists(job.rec["driver_log"]):
        with open(job.rec["driver_log"], encoding="utf-8") as handle:
            log = handle.read()
    tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
    return dict(job.result(status, f"{job.sid}: {status.get('state')}"), log_tail=job.redact(tail))


def attempt_action(module, job):
    """action=attempt: the id and spec of the next attempt resuming this job (nothing changes).

    Returns `newest`, the last linked attempt: when it is another job, the caller follows that one instead
    (a re-run of a retried job must not start one more attempt)."""
    status, _ = refresh(module, job)
    root, linked = chain(job.config, job.sid)
    plan = {"root": root, "newest": linked[-1], "attempts_made": len(linked) - 1}
    if linked[-1] != job.sid:
        newest = record_status(job.config, linked[-1])
        if not newest.get("final") or newest.get("state") == "SUCCEEDED":
            raise Failed(f"{job.sid}: its attempt {linked[-1]} is {newest.get('state')}: follow that one "
                         f"(job.yml -e id={linked[-1]} -e do=wait)", **job.result(status, ""), **plan)
    elif not status.get("final") or status.get("state") == "SUCCEEDED":
        why = "it succeeded" if status.get("state") == "SUCCEEDED" else "it has not ended (stop it first)"
        raise Failed(f"{job.sid}: {status.get('state')}: nothing to resume, {why}", **job.result(status, ""), **plan)
    next_id = f"{root}-r{len(linked)}"
    if not conventions.matches(conventions.ID_RULE, next_id):
        raise Failed(f"{job.sid}: the attempt's id {next_id!r} would not be {conventions.ID_RULE[1]}")
    spec = jr.read_json(job.rec["job_spec"])
    if not isinstance(spec, dict):
        raise Failed(f"{job.sid}: its record has no readable {job.rec['job_spec']}")
    return dict(job.result(status, f"{job.sid}: the next attempt is {next_id}"), next_id=next_id, job_spec=spec,
                **plan)


ACTIONS = {"wait": follow, "stop": stop, "status": status_action, "logs": logs_action, "attempt": attempt_action}


def reconcile(module, config):
    """action=reconcile: finalise every record whose job the restarted head forgot (see Job.forgotten_since)."""
    jobs_dir = conventions.paths(config.shared_root)["jobs"]
    open_ids = []
    for sid in sorted(os.listdir(jobs_dir)) if os.path.isdir(jobs_dir) else []:
        status = record_status(config, sid)
        # Records without status.json are interrupted submits: the same submit command completes them.
        if status.get("submission_id") == sid and not status.get("final"):
            open_ids.append(sid)
    result = {"changed": False, "finalized": [], "open": []}
    if not open_ids:  # the usual case costs no call to Ray
        return dict(result, msg="no open job records")
    probe = Job(module, config, open_ids[0], conventions.job_dir(config.shared_root, open_ids[0]))
    known = {rc.job_summary(j)["submission_id"] for j in probe.client.list_jobs()}
    head_started = probe.head_started_ms() if set(open_ids) - known else None  # one node list for all
    for sid in open_ids:
        if sid in known:
            result["open"].append(sid)
            continue
        job = Job(module, config, sid, conventions.job_dir(config.shared_root, sid), client=probe.client)
        status = job.status()
        started = job.forgotten_since(status, head_started)
        if started is None:
            result["open"].append(sid)  # unknown to Ray for another reason: left as it is
            continue
        if not module.check_mode and not job.finalize_forgotten(status, started)[1]:
            continue  # another run finalised it first
        result["finalized"].append(sid)
    result["changed"] = bool(result["finalized"])
    verb = "would be finalised" if module.check_mode else "finalised"
    result["msg"] = (f"{len(result['finalized'])} record(s) of jobs the restarted head forgot {verb} as FAILED"
                     + (f": {', '.join(result['finalized'])}" if result["finalized"] else "")
                     + f"; {len(result['open'])} open")
    return result


def run(module):
    """Carry out the module's action; returns its result or raises Failed."""
    p = module.params
    try:
        config = js.RayConfig.from_dict(p["ray_config"])
    except js.JobSpecError as exc:
        raise Failed(str(exc)) from None
    rc.prepare_client_env(p["token_path"])
    if p["action"] == "submit":
        return submit(module, config)
    if p["action"] == "reconcile":
        return reconcile(module, config)
    sid = p["submission_id"]
    if not conventions.matches(conventions.ID_RULE, sid):
        raise Failed(f"jobspec field 'submission_id': must be {conventions.ID_RULE[1]}, got {sid!r}")
    output_dir = conventions.job_dir(config.shared_root, sid)
    if p["output_dir"] not in (None, output_dir):
        raise Failed(f"jobspec field 'output_dir': must be {output_dir}, got {p['output_dir']!r}")
    if not os.path.isdir(output_dir):
        raise Failed(f"submission_id '{sid}': no job record at {output_dir}", submission_id=sid)
    return ACTIONS[p["action"]](module, Job(module, config, sid, output_dir))


def connection_problem(exc, p):
    """One line for a failure outside the module: the dashboard address, the token file when it was refused, or
    the record's file the system would not write (requests' connection errors are OSErrors without a filename)."""
    url = (p["ray_config"] or {}).get("dashboard_url")
    text = conventions.one_line(str(exc), 200)
    filename = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    if filename and filename == p["token_path"]:
        return f"cannot read the Ray token file {p['token_path']}: {exc.strerror}"
    if filename:  # disk full, permission denied...: a retry of the same command completes what was begun
        return f"cannot write the job record at {filename}: {exc.strerror}; fix that and run the same command again"
    if any(sign in text for sign in ("401", "403", "Unauthorized", "Forbidden", "authentication")):
        return f"Ray at {url} refused the token from {p['token_path'] or '(no token file)'}: {text}"
    return f"cannot talk to Ray's job API at {url}: {type(exc).__name__}: {text}"


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(
            ray_config=True,
            action=dict(type="str", choices=["submit", "wait", "status", "stop", "logs", "reconcile", "attempt"], default="submit"),
            spec=dict(type="raw"),
            submission_id=dict(type="str"),
            output_dir=dict(type="path"),
            stop_reason=dict(type="str", choices=list(conventions.STOP_REASONS), default="STOPPED_BY_USER"),
            poll_s=dict(type="int", default=20),
            preflight=dict(type="bool", default=True),
        ),
        required_if=[("action", "submit", ("spec",)), ("action", "wait", ("submission_id",)),
                     ("action", "status", ("submission_id",)), ("action", "stop", ("submission_id",)),
                     ("action", "logs", ("submission_id",)), ("action", "attempt", ("submission_id",))],
        supports_check_mode=True,
    )
    p = module.params
    if p["spec"] is not None and not isinstance(p["spec"], dict):
        module.fail_json(msg="spec: the module takes a resolved JobSpec (a dict); run it through its action plugin")
    # Secret env values must not come back in the module's own `invocation` output either.
    secret_names = tuple((p["ray_config"] or {}).get("secret_env_names") or DEFAULT_SECRET_ENV_NAMES)
    for env in ((p["spec"] or {}).get("env") or {},
                ((p["ray_config"] or {}).get("runtime_env") or {}).get("env_vars") or {}):
        module.no_log_values.update(str(v) for k, v in env.items() if is_secret_name(k, secret_names) and v)
    try:
        result = run(module)
    except Failed as exc:
        module.fail_json(msg=str(exc), **exc.result)
    except jr.LockTimeout as exc:  # an OSError, but not the dashboard's
        module.fail_json(msg=str(exc))
    except Exception as exc:  # noqa: BLE001 - Ray's client: one line naming the address or the token file
        module.fail_json(msg=connection_problem(exc, p))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
