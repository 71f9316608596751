"""The ray_job module run as Ansible runs it, against a fake Ray cluster (SDK, state API, dashboard): the fakes
and helpers the ray_job tests share (their fixtures are in conftest.py); and RecordJob, a job on a record of its own
for the tests of module_utils/jobs that run without the module."""

import datetime
import fnmatch
import importlib.util
import json
import os
import types

import pytest
import ray_job
from ansible.errors import AnsibleUndefinedVariable
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cordons import cordons
from ansible.module_utils.jobs.evidence import evidence
from ansible.module_utils.jobs.life import follow, step
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.submission import admission
from ansible.module_utils.jobs.submission import submit as jsubmit
from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.testing import patch_module_args
from ray.job_submission import JobStatus

SECRET = "wandb-0123456789abcdef"
NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)  # noqa: UP017
SID = "smoke-20250102T030405Z-abc123"
HEAD = {"node_id": "n-head", "node_ip": "10.0.0.10", "node_name": "head", "is_head_node": True, "state": "ALIVE",
        "resources_total": {"CPU": 0.0}}
WORKER = {"node_id": "n-w1", "node_ip": "10.0.0.11", "node_name": "w1", "is_head_node": False, "state": "ALIVE",
          "resources_total": {"CPU": 8.0, "GPU": 2.0, "worker_node": 1.0}}
# A worker that takes several jobs' drivers at once, for tests of several jobs the queue must not hold back.
ROOMY = {**WORKER, "resources_total": {**WORKER["resources_total"], "worker_node": 4.0}}
LOG = f"""\
smoke_probe: WANDB_API_KEY={SECRET}
step:1 - train/loss:6.0625 - train/grad_norm:4.10 - train/lr:0.001
step:2 - train/loss:5.5 - train/grad_norm:3.90 - train/lr:0.001
step:3 - train/loss:5.0 - train/grad_norm:3.10 - train/lr:0.001
done
"""
SMOKE = {"workload": "smoke", "timeouts": {"pending_s": 120, "max_run_s": 300},
         "metadata": {"purpose": "cluster smoke test"}}
# A verl job: its runtime env points verl's file logger at the record's metrics.jsonl (jobspec/render.py).
GRPO = {"workload": "grpo", "model_path": "/private/common/models/qwen", "train_files": "/private/datasets/t.parquet",
        "total_training_steps": 2, "timeouts": {"pending_s": 120, "max_run_s": 300}}
GRPO_SID = "grpo-20250102T030405Z-abc123"
RECORD_FILES = ("config/job_spec.json", "config/runtime_env.json", "config/submit_cmd.txt",
                "config/env_var_names.json", "logs/ray_job_submit.out", "debug/ray_status_pre.txt", "status.json")


class Clock:
    """time.time/monotonic/sleep of the module: sleeping only moves the clock."""

    def __init__(self):
        self.now = 1_735_787_045.0

    def time(self):
        return self.now

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeRay:
    """A JobSubmissionClient (and the jobs it knows) shaped like Ray's."""

    def __init__(self, clock):
        self.clock = clock
        self.jobs, self.logs = {}, {}
        self.served = 0  # characters of driver logs Ray served
        self.submitted, self.stopped, self.clients = [], [], []
        self.submit_error = None
        self.stop_to = "STOPPED"  # what stop_job makes of a job; None: it keeps its state
        self.node_files, self.nodes_down, self.tails = {}, set(), []  # {node_id: {log name: text}}; what was read
        self.groups, self.busy_ips = [], set()  # placement groups; workers whose GPUs a stopped job still holds
        # The GCS's resource view (rc.node_resources): each node's available resources, by node id (absent: all of
        # its total), the nodes listed, and what each job's placement groups hold ({job_id: {node_id: resources}}).
        self.free, self.nodes, self.bundles = {}, [HEAD, WORKER], {}
        self.resource_error = None

    def node_resources(self, gcs_address, timeout=10):
        if self.resource_error:
            raise self.resource_error
        return [{"node_id": n["node_id"], "node_ip": n["node_ip"], "total": dict(n["resources_total"]),
                 "available": dict(self.free.get(n["node_id"], n["resources_total"]))} for n in self.nodes
                if n.get("state") == "ALIVE"]

    def job_bundles(self, url):
        return {job: {node: dict(held) for node, held in nodes.items()} for job, nodes in self.bundles.items()}

    def client(self, dashboard_url, token):
        self.clients.append((dashboard_url, token))
        return self

    def get_job_info(self, sid):
        if sid not in self.jobs:
            raise RuntimeError(f"Request failed with status code 404: Job {sid} does not exist.")
        return self.jobs[sid]

    def submit_job(self, **kwargs):
        self.submitted.append(kwargs)
        if self.submit_error:
            raise self.submit_error
        sid = kwargs["submission_id"]
        self.jobs[sid] = types.SimpleNamespace(
            submission_id=sid, job_id=None, status=JobStatus.PENDING, entrypoint=kwargs["entrypoint"],
            message="Job has not started yet.", error_type=None, driver_node_id=None, driver_exit_code=None,
            start_time=None, end_time=None, runtime_env=kwargs["runtime_env"], metadata=kwargs["metadata"],
            **{key: kwargs.get(key) for key in ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_resources")})
        return sid

    def set(self, sid, status, **fields):
        job = self.jobs[sid]
        job.status = JobStatus(status)
        for key, value in fields.items():
            setattr(job, key, value)

    def stop_job(self, sid):
        self.stopped.append(sid)
        if self.stop_to:
            self.set(sid, self.stop_to, end_time=int(self.clock.now * 1000))
        return True

    def log_metrics(self, sid, step, data):
        """What verl's file logger does in the job's driver: one line a log call, {"step": N, "data": {...}} (orjson's
        compact form), appended to the VERL_FILE_LOGGER_PATH the job's runtime env names (the record's metrics.jsonl
        on the shared root). Returns the line's bytes."""
        line = file_logger_line(step, data)
        self.write_metrics(sid, line)
        return line

    def write_metrics(self, sid, data):
        """Append raw bytes to the job's metrics.jsonl, as a driver (or anyone who can write the share) could."""
        with open(self.jobs[sid].runtime_env["env_vars"]["VERL_FILE_LOGGER_PATH"], "ab") as handle:
            handle.write(data)

    def get_job_logs(self, sid):
        self.served += len(self.logs.get(sid, ""))
        return self.logs.get(sid, "")

    def log_tail(self, url, sid, node_id, lines):
        """Ray's state API: the log's last `lines` lines (a 404-like error for a job without a log)."""
        if sid not in self.logs:
            raise RuntimeError(f"no log of {sid}")
        text = "".join(self.logs[sid].splitlines(keepends=True)[-lines:])
        self.served += len(text)
        return text

    def log_chunks(self, url, sid, node_id):
        """Ray's state API: the whole log, streamed in chunks."""
        if sid not in self.logs:
            raise RuntimeError(f"no log of {sid}")
        data = self.logs[sid].encode("utf-8")
        self.served += len(self.logs[sid])
        return (data[i:i + 7] for i in range(0, len(data), 7))  # chunks that split lines and characters

    def list_jobs(self):
        return list(self.jobs.values())

    def list_groups(self, url):
        """Ray's placement groups (the cordons' holds among them)."""
        return list(self.groups)

    def hold(self, address, changes, ray_module=None):
        """cordons/cordons.apply: remove and create holds; a new one is placed at once unless its IP is busy."""
        gone = {g["placement_group_id"] for g in changes["remove"]}
        self.groups = [g for g in self.groups if g["placement_group_id"] not in gone]
        for ip, node in changes["create"]:
            self.groups.append({"name": f"ray-verl-cordon-{ip}-{node['node_id']}", "placement_group_id": f"pg-{ip}",
                                "state": "PENDING" if ip in self.busy_ips else "CREATED"})
        return len(changes["create"]) + len(changes["remove"])

    def node_logs(self, url, node_id, timeout=10, glob="*"):
        """Ray's state API: a node's log names, by category (worker_out, worker_err, ...), those glob matches; a node
        in `down` does not answer."""
        if node_id in self.nodes_down:
            raise RuntimeError(f"Ray's log API: node {node_id} is not reachable")
        names = [n for n in self.node_files.get(node_id, {}) if fnmatch.fnmatchcase(n, glob)]
        return {"worker_out": [n for n in names if n.endswith(".out")],
                "worker_err": [n for n in names if n.endswith(".err")],
                "other": [n for n in names if not n.endswith((".out", ".err"))]}

    def node_log_tail(self, url, node_id, filename, lines, timeout=10, max_bytes=None):
        """Ray's state API: a log's last `lines` lines on a node, at most max_bytes of them."""
        text = self.node_files[node_id][filename]
        data = "".join(text.splitlines(keepends=True)[-lines:]).encode()
        self.tails.append((node_id, filename))
        return data[-max_bytes:].decode(errors="replace") if max_bytes else data.decode()


def fake_ray(monkeypatch):
    """A FakeRay on its own clock, patched in where the module reaches Ray (the `ray` fixture's; a test that runs a
    scenario twice makes a second one)."""
    clock = Clock()
    fake = FakeRay(clock)
    monkeypatch.setattr(rc, "job_client", fake.client)
    monkeypatch.setattr(rc, "list_nodes", lambda url: list(fake.nodes))
    monkeypatch.setattr(rc, "node_resources", fake.node_resources)
    monkeypatch.setattr(rc, "job_bundles", fake.job_bundles)
    monkeypatch.setattr(rc, "cluster_status_text", lambda url, token: "======== Autoscaler status ========")
    monkeypatch.setattr(rc, "list_actor_summaries", lambda url, limit=1000: [])
    monkeypatch.setattr(rc, "list_alive_actor_nodes", lambda url: [])
    monkeypatch.setattr(rc, "job_log_tail", fake.log_tail)
    monkeypatch.setattr(rc, "job_log_chunks", fake.log_chunks)
    monkeypatch.setattr(rc, "node_logs", fake.node_logs)  # the nodes' own logs: never a request from a unit test
    monkeypatch.setattr(rc, "node_log_tail", fake.node_log_tail)
    monkeypatch.setattr(cordons, "list_groups", fake.list_groups)  # the cordons' holds (around.py)
    monkeypatch.setattr(cordons, "apply", fake.hold)
    for module in (evidence, follow, jr, step, jsubmit, admission):
        monkeypatch.setattr(module, "time", clock)

    def no_process(self, args, **kwargs):
        raise AssertionError(f"unexpected command {args}")

    monkeypatch.setattr(AnsibleModule, "run_command", no_process)
    # The module clears proxies and RAY_ADDRESS in its own process: give them back afterwards.
    for name in (*rc._STRAY_ENV, "NO_PROXY", "no_proxy", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(name, "")
    return fake


def make_spec(ray_config, **cli):
    cli.setdefault("env", {"WANDB_API_KEY": SECRET})
    return jobspec.resolve(SMOKE, name="smoke", ray_config=ray_config, cli=cli, now=NOW, token="abc123").to_dict()


def file_logger_line(step, data):
    """One line of verl's file logger (verl/utils/tracking.py FileLogger.log: orjson.dumps({"step", "data"}) +
    "\\n")."""
    return json.dumps({"step": step, "data": data}, separators=(",", ":")).encode() + b"\n"


class RecordJob:
    """A job as module_utils/jobs sees it (runner's Job: sid, rec, record, config, client, redact) on a record made in
    directory, for the tests of module_utils/jobs without the module; its driver's log is `text`."""

    def __init__(self, directory, sid="j-1", tensorboard_url=None):
        jr.create_exclusive(directory)
        self.sid, self.text = sid, ""
        self.rec = jr.paths(directory)
        self.record = jr.Record(directory, sid)
        self.config = types.SimpleNamespace(tensorboard_url=tensorboard_url)
        self.client = types.SimpleNamespace(logs=lambda sid: self.text)

    @staticmethod
    def redact(value):
        return value

    def write_metrics(self, data):
        """Append bytes to the record's metrics.jsonl (verl's file logger, or whoever can write the share)."""
        with open(self.rec["metrics"], "ab") as handle:
            handle.write(data)

    def log_metrics(self, step, data):
        self.write_metrics(file_logger_line(step, data))


def make_verl_spec(ray_config, **cli):
    """A GRPO job (total_training_steps 2): submit it with preflight=False (the preflight would run verl)."""
    return jobspec.resolve(GRPO, name="grpo", ray_config=ray_config, cli=cli, now=NOW, token="abc123").to_dict()


def run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ray_job.main()
    out = json.loads(capsys.readouterr().out)
    out.pop("invocation", None)  # the module's own arguments, echoed back
    return exc.value.code, out


def submit(capsys, ray_config, spec=None, **args):
    return run(capsys, spec=spec or make_spec(ray_config), ray_config=ray_config, **args)


def record(ray_config, sid=SID):
    return os.path.join(ray_config["shared_root"], "jobs", sid)


def files(directory):
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, directory)] = handle.read()
    return found


def status_json(ray_config):
    with open(os.path.join(record(ray_config), "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


# ------------------------------------------------------------------ the action plugin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("ray_job_action", os.path.join(ROOT, "action_plugins", "ray_job.py"))
action = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(action)


def module_result(capsys, **args):
    """One run of library/ray_job.py in this process, as _execute_module would return it."""
    with patch_module_args(args), pytest.raises(SystemExit):
        ray_job.main()
    out = json.loads(capsys.readouterr().out)
    out.pop("invocation", None)
    return out


class Templar:
    """The inventory as the action sees it through resolve_variable_expression."""

    def __init__(self, variables):
        self.variables = variables

    def resolve_variable_expression(self, name):
        if name not in self.variables:
            raise AnsibleUndefinedVariable(name)
        return self.variables[name]


def make_action(args, variables, executor, check_mode=False):
    task = types.SimpleNamespace(args=args, async_val=0, check_mode=check_mode, action="ray_job")
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/tmp"))
    plugin = action.ActionModule(task, connection, types.SimpleNamespace(check_mode=check_mode), None,
                                 Templar(variables), None)
    plugin._execute_module = executor
    return plugin
