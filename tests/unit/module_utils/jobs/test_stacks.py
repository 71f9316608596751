"""jobs/evidence/stacks.py and ray_job action=stacks: a job's processes and their Python stacks, through a fake
dashboard on 127.0.0.1 (job details, the state API, /worker/traceback answering as Ray and py-spy do)."""

import json
import os
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible.module_utils.jobs.evidence import stacks
from ansible.module_utils.jobs.record.job import Failed
from ray_job_harness import SECRET, SID, make_action, module_result, record, run, submit

TOKEN = "tok-0123456789abcdef"
JOB_ID = "02000000"
W1, W2 = "198.18.0.11", "198.18.0.12"
NODES = [{"node_id": "aa11", "node_ip": "198.18.0.10", "state": "ALIVE"},
         {"node_id": "bb22", "node_ip": W1, "state": "ALIVE"},
         {"node_id": "cc33", "node_ip": W2, "state": "ALIVE"}]
ACTORS = [
    {"actor_id": "x1", "class_name": "TrainingWorker", "state": "ALIVE", "job_id": JOB_ID, "node_id": "bb22",
     "pid": 4711},
    {"actor_id": "x2", "class_name": "TrainingWorker", "state": "ALIVE", "job_id": JOB_ID, "node_id": "cc33",
     "pid": 4712},
    {"actor_id": "x3", "class_name": "Evaluator", "state": "DEAD", "job_id": JOB_ID, "node_id": "cc33", "pid": 4650},
    {"actor_id": "x4", "class_name": "OtherJobs", "state": "ALIVE", "job_id": "03000000", "node_id": "bb22", "pid": 99},
]
DRIVER_PID = 3001
# What `py-spy dump` prints (py-spy 0.4, shortened file names), as Ray's /worker/traceback returns it.
GLOO_STACK = f"""\
Process 4711: ray::TrainingWorker.train_step WANDB_API_KEY={SECRET}
Python v3.11.7 (/opt/ray/.venv/bin/python3.11)

Thread 4711 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2501)
    wrapper (torch/distributed/c10d_logger.py:81)
    TorchGLOOGroup.allreduce (ray/util/collective/collective_group/torch_gloo_collective_group.py:217)
    allreduce (ray/util/collective/collective.py:329)
    train_step (train_probe.py:42)
    actor_method_executor (ray/_private/function_manager.py:689)
    Worker.main_loop (ray/_private/worker.py:946)
    <module> (ray/_private/workers/default_worker.py:289)
Thread 4790 (idle): "ray_print_logs"
    Condition.wait (threading.py:324)
    Queue.get (queue.py:180)
    Thread.run (threading.py:982)
"""
DRIVER_STACK = """\
Process 3001: python -m smoke_probe --steps 100
Python v3.11.7 (/opt/ray/.venv/bin/python3.11)

Thread 3001 (idle): "MainThread"
    Worker.get_objects (ray/_private/worker.py:1032)
    get (ray/_private/worker.py:2961)
    wrapper (ray/_private/client_mode_hook.py:104)
    auto_init_wrapper (ray/_private/auto_init_hook.py:22)
    fit (verl/trainer/ppo/ray_trainer.py:1103)
    <module> (smoke_probe.py:60)
"""
# What py-spy 0.4.3 printed for a `python -c` process: the command line spans lines, methods are Class.method, and
# time.sleep (C) is no frame.
PYSPY_SLEEPING = """\
Process 6275: .venv/bin/python -c
import time
def inner():
    time.sleep(60)
inner()

Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 6275 (idle): "MainThread"
    inner (<string>:4)
    <module> (<string>:5)
Thread 6278 (idle): "helper"
    <lambda> (<string>:7)
    Thread.run (threading.py:982)
"""
PROFILING_403 = ("Profiling is disabled by default for security reasons. To enable profiling, set the environment "
                 "variable RAY_DASHBOARD_ENABLE_PROFILING=1 on the Ray head node. See https://docs.ray.io/...")
PYSPY_FAILED = """Failed to execute `sudo -n /opt/ray/.venv/bin/py-spy dump -p 4712`.

=== stderr ===
Error: Failed to find python version from target process

=== stdout ===
"""


class Dashboard:
    """A fake Ray dashboard: routes[path] = (status, body) or a callable(query) giving one; tracebacks[pid] alike."""

    def __init__(self):
        self.routes, self.tracebacks, self.seen = {}, {}, []
        self.release = threading.Event()
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                dashboard.seen.append((url.path, query, self.headers.get("Authorization")))
                if url.path == "/worker/traceback":
                    answer = dashboard.tracebacks.get(int(query["pid"]), (500, "no such pid"))
                else:
                    answer = dashboard.routes.get(url.path, (404, "not found"))
                status, body = answer(query) if callable(answer) else answer
                if status is None:  # hangs (py-spy on a stopped process), until the test ends
                    dashboard.release.wait(30)
                    return
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def traceback_calls(self):
        return [q for path, q, _ in self.seen if path == "/worker/traceback"]


def listed(rows):
    return 200, {"result": True, "msg": "", "data": {"result": {"total": len(rows), "result": rows}}}


def actors_of(query):
    assert query == {"limit": "10000", "filter_keys": "job_id", "filter_predicates": "=", "filter_values": JOB_ID}
    return listed(ACTORS)  # a state API that ignored the filter: the other job's actor is still left out


@pytest.fixture
def dashboard(monkeypatch):
    fake = Dashboard()
    fake.routes.update({
        f"/api/jobs/{SID}": (200, {"submission_id": SID, "job_id": JOB_ID, "status": "RUNNING",
                                   "driver_node_id": "bb22", "runtime_env": {"env_vars": {"WANDB_API_KEY": SECRET}},
                                   "driver_info": {"id": "01000000", "node_ip_address": W1, "pid": str(DRIVER_PID)}}),
        "/api/v0/nodes": listed(NODES),
        "/api/v0/actors": actors_of,
    })
    # The driver: 403 (as Ray says it); one worker waits in gloo; the other never answers (SIGSTOPped).
    fake.tracebacks.update({DRIVER_PID: (403, PROFILING_403), 4711: (200, GLOO_STACK), 4712: (None, "")})
    monkeypatch.setattr(stacks, "TRACEBACK_TIMEOUT_S", 0.5)
    yield fake
    fake.close()


@pytest.fixture
def running(ray, ray_config, dashboard, capsys, tmp_path):
    """A submitted job Ray says is RUNNING, and the module's arguments for it (with a token)."""
    config = dict(ray_config, dashboard_url=dashboard.url)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    code, _ = submit(capsys, config)
    assert code == 0
    ray.set(SID, "RUNNING", start_time=int(ray.clock.now * 1000))
    return {"ray_config": config, "token_path": str(token), "submission_id": SID, "action": "stacks"}


def read_all(directory):
    found = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            found[name] = handle.read()
    return found


def test_stacks_of_a_running_job_go_into_its_record(running, dashboard, capsys):
    started = time.monotonic()
    code, out = run(capsys, **running)
    assert code == 0, out
    assert time.monotonic() - started < 10  # the stopped process cost its timeout, not the dump
    taken = out["stacks"]
    assert taken["dir"] == "debug/stacks/20250102T030405.000Z"
    assert taken["files"] == [f"{taken['dir']}/{name}" for name in (
        "198.18.0.11-3001-driver.txt", "198.18.0.11-4711-TrainingWorker.txt", "198.18.0.12-4712-TrainingWorker.txt")]
    assert taken["summary"] == (
        "driver: no stack (403: profiling is off on the head (RAY_DASHBOARD_ENABLE_PROFILING)); "
        "TrainingWorker pid 4711 on 198.18.0.11 waits in all_reduce (gloo); "
        "TrainingWorker pid 4712 on 198.18.0.12: no stack (timed out after 0.5s: stopped?)")
    assert taken["lines"][1] == "TrainingWorker pid 4711 on 198.18.0.11: waits in all_reduce (gloo)"
    assert [(p["role"], p["name"], p["pid"], p["node_ip"], p["state"]) for p in taken["processes"]] == [
        ("driver", "driver", 3001, W1, "RUNNING"), ("actor", "TrainingWorker", 4711, W1, "ALIVE"),
        ("actor", "TrainingWorker", 4712, W2, "ALIVE")]
    assert out["progress"] == f"{SID}: {taken['summary']} (in {taken['dir']})"
    assert out["changed"] is True and out["state"] == "RUNNING"

    written = read_all(os.path.join(record(running["ray_config"]), taken["dir"]))
    assert sorted(set(written) - {stacks.INDEX}) == [os.path.basename(f) for f in taken["files"]]
    # Beside the stacks, a record per process: what blame reads (a rank unread while others wait in a collective).
    index = json.loads(written[stacks.INDEX])
    assert [(r["role"], r["node_ip"], r["pid"], r["stack"], r["waits"], r["in"], r["file"]) for r in index] == [
        ("driver", W1, 3001, "none", None, None, taken["files"][0]),
        ("actor", W1, 4711, "taken", "collective", "all_reduce", taken["files"][1]),
        ("actor", W2, 4712, "none", None, None, taken["files"][2])]
    assert index[0]["profiling_off"] and not index[2]["profiling_off"]
    assert index[2]["why"] == "timed out after 0.5s: stopped?" and index[1]["what"] == "waits in all_reduce (gloo)"
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in written)
    gloo = written["198.18.0.11-4711-TrainingWorker.txt"]
    assert gloo.startswith("# TrainingWorker pid 4711 on 198.18.0.11: waits in all_reduce (gloo)\n"
                           "# actor on node bb22, ALIVE; py-spy dump through Ray's /worker/traceback at "
                           "2025-01-02T03:04:05Z\n\nProcess 4711: ")
    assert "    all_reduce (torch/distributed/distributed_c10d.py:2501)\n" in gloo
    assert "WANDB_API_KEY=<redacted>" in gloo
    assert written["198.18.0.12-4712-TrainingWorker.txt"].endswith("no stack: timed out after 0.5s: stopped?\n")
    assert all(SECRET not in text and TOKEN not in text for text in written.values())
    assert SECRET not in json.dumps(out) and TOKEN not in json.dumps(out)

    # Each stack was asked of its own node, without native frames, with the cluster's token.
    assert sorted((q["pid"], q["ip"], q["native"]) for q in dashboard.traceback_calls()) == [
        ("3001", W1, "0"), ("4711", W1, "0"), ("4712", W2, "0")]
    assert {auth for _, _, auth in dashboard.seen} == {f"Bearer {TOKEN}"}


def test_a_head_without_profiling_fails_in_one_line_naming_the_fix(running, dashboard, capsys):
    for pid in (4711, 4712):
        dashboard.tracebacks[pid] = (403, PROFILING_403)
    code, out = run(capsys, **running)
    assert code == 1
    assert out["msg"] == (f"Ray at {dashboard.url} refuses stacks (403: profiling is off): set "
                          "RAY_DASHBOARD_ENABLE_PROFILING=1 in the head's Ray environment (ray_node_env: the project "
                          "default has it; a site's own ray_node_env must keep it) and run up.yml once no job runs (it "
                          "restarts the head with it)")
    assert "\n" not in out["msg"]
    assert not os.path.exists(os.path.join(record(running["ray_config"]), "debug", "stacks"))


def test_check_mode_takes_nothing_and_says_what_it_would_take(running, dashboard, capsys):
    code, out = run(capsys, _ansible_check_mode=True, **running)
    assert code == 0 and out["changed"] is True
    assert out["stacks"]["dir"] is None and out["stacks"]["files"] == []
    assert out["progress"] == (f"{SID}: would take the stacks of 3 processes: driver pid 3001 on 198.18.0.11, "
                               "TrainingWorker pid 4711 on 198.18.0.11, TrainingWorker pid 4712 on 198.18.0.12")
    assert dashboard.traceback_calls() == []
    assert not os.path.exists(os.path.join(record(running["ray_config"]), "debug", "stacks"))


def test_the_action_plugin_hands_stacks_to_the_module(running, dashboard, capsys):
    """job.yml's ray_job task: the action plugin passes do=stacks through to the module on the head."""
    sent = []

    def executor(module_name, module_args, task_vars):
        sent.append(module_args)
        return module_result(capsys, **module_args)

    inventory = {"ray_config": running["ray_config"], "ray_auth_enabled": True,
                 "ray_auth_token_path": running["token_path"], "ray_python": "/opt/ray/bin/python"}
    result = make_action({"action": "stacks", "submission_id": SID}, inventory, executor).run(
        task_vars={"inventory_hostname": "head"})
    assert [(a["action"], a["submission_id"]) for a in sent] == [("stacks", SID)]
    assert not result.get("failed"), result
    assert result["stacks"]["summary"].startswith("driver: no stack (403")
    assert len(result["stacks"]["files"]) == 3


@pytest.mark.parametrize("state", ["PENDING", "SUCCEEDED", "FAILED", "STOPPED"])
def test_a_job_that_is_not_running_fails_in_one_line(running, ray, dashboard, capsys, state):
    ray.set(SID, state)
    code, out = run(capsys, **running)
    assert code == 1 and out["msg"] == f"{SID}: not running ({state}): no stacks to take"
    assert dashboard.seen == []


def test_a_job_ray_does_not_know_is_not_running(running, ray, capsys):
    del ray.jobs[SID]
    code, out = run(capsys, **running)
    assert code == 1 and out["msg"] == f"{SID}: not running (unknown to Ray): no stacks to take"


def test_py_spy_failing_on_a_node_is_that_process_only(running, dashboard, capsys):
    dashboard.tracebacks[DRIVER_PID] = (200, DRIVER_STACK)
    dashboard.tracebacks[4712] = (500, PYSPY_FAILED)
    code, out = run(capsys, **running)
    assert code == 0
    assert out["stacks"]["summary"] == (
        "driver waits in ray.get; TrainingWorker pid 4711 on 198.18.0.11 waits in all_reduce (gloo); "
        "TrainingWorker pid 4712 on 198.18.0.12: no stack (py-spy failed (HTTP 500): "
        "Error: Failed to find python version from target process)")


def test_the_job_api_through_a_job(running, ray, dashboard, capsys):
    """processes(job) and dump(job, when_ms), as the hang detection calls them."""
    import types

    from ansible.module_utils.jobs.record.job import Job
    from ansible.module_utils.jobspec import model as js

    config = js.RayConfig.from_dict(running["ray_config"])
    module = types.SimpleNamespace(params={"token_path": running["token_path"]})
    job = Job(module, config, SID, record(running["ray_config"]))
    procs = stacks.processes(job)
    assert [(p["role"], p["name"], p["pid"], p["state"]) for p in procs] == [
        ("driver", "driver", 3001, "RUNNING"), ("actor", "TrainingWorker", 4711, "ALIVE"),
        ("actor", "Evaluator", 4650, "DEAD"), ("actor", "TrainingWorker", 4712, "ALIVE")]
    assert [stacks.takeable(p) for p in procs] == [True, True, False, True]
    dashboard.tracebacks[DRIVER_PID] = (200, DRIVER_STACK)
    taken = stacks.dump(job, 1_735_787_045_123, procs)
    assert taken["dir"] == "debug/stacks/20250102T030405.123Z" and len(taken["files"]) == 3
    assert taken["summary"].startswith("driver waits in ray.get; ")


def test_a_job_ray_does_not_know_fails_processes_in_one_line(running, dashboard):
    import types

    from ansible.module_utils.jobs.record.job import Job
    from ansible.module_utils.jobspec import model as js

    del dashboard.routes[f"/api/jobs/{SID}"]
    job = Job(types.SimpleNamespace(params={"token_path": None}), js.RayConfig.from_dict(running["ray_config"]), SID,
              record(running["ray_config"]))
    with pytest.raises(Failed) as exc:
        stacks.processes(job)
    assert str(exc.value) == f"{SID}: Ray does not know this job"


# ------------------------------------------------------------------ what a stack says


def stack(*frames, thread="MainThread", more=""):
    body = "".join(f"    {f}\n" for f in frames)
    return f'Process 1: python x.py\nPython v3.11.7 (/usr/bin/python3.11)\n\nThread 1 (idle): "{thread}"\n{body}{more}'


@pytest.mark.parametrize(("text", "said"), [
    (GLOO_STACK, "waits in all_reduce (gloo)"),
    (DRIVER_STACK, "waits in ray.get"),
    (stack("all_gather_into_tensor (torch/distributed/distributed_c10d.py:3010)", "step (train.py:9)"),
     "waits in all_gather_into_tensor"),
    (stack("recv (torch/distributed/distributed_c10d.py:2100)", "pipe (train.py:9)"), "waits in recv"),
    # FSDP2 on torch 2.13, as the lab's hung SFT rank showed it: py-spy names all_gather_into_tensor's frame so.
    (stack("all_gather_single (torch/distributed/distributed_c10d.py:4394)",
           "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
           "foreach_all_gather (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:364)"),
     "waits in all_gather_single"),
    (stack("barrier (torch/distributed/distributed_c10d.py:4100)", "init (train.py:3)"), "waits in barrier"),
    (stack("_nccl_call (cupy/cuda/nccl.py:80)", "step (train.py:9)"), "waits in _nccl_call (nccl)"),
    (stack("wait (ray/_private/worker.py:3100)", "loop (driver.py:20)"), "waits in ray.wait"),
    (stack("Condition.wait (threading.py:324)", "Queue.get (queue.py:180)",
           "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1329)",
           "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:733)", "fit (trainer.py:50)"),
     "loads data (DataLoader)"),
    (stack("sleep (asyncio/tasks.py:649)", "poll (probe.py:7)"), "sleeps"),
    (stack("Linear.forward (/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125)",
           "step (train.py:9)"), "in Linear.forward (torch/nn/modules/linear.py:125)"),
    (stack("Connection.send (multiprocessing/connection.py:206)", "step (train.py:9)"),
     "in Connection.send (multiprocessing/connection.py:206)"),
    # An async or threaded actor: the main thread idles in Ray's loop, the method's thread waits in a collective.
    (stack("Worker.main_loop (ray/_private/worker.py:946)", more='Thread 7 (active): "AsyncIO Thread: default"\n'
           "    all_reduce (torch/distributed/distributed_c10d.py:2501)\n"), "waits in all_reduce"),
    (stack("Worker.main_loop (ray/_private/worker.py:946)", "<module> (ray/_private/workers/default_worker.py:289)"),
     "in Worker.main_loop (ray/_private/worker.py:946)"),
    (PYSPY_SLEEPING, "in inner (<string>:4)"),
    ("Process 1: python x.py\n", "no Python frames"),
    ("", "no Python frames"),
])
def test_what_a_stack_says(text, said):
    assert stacks.verdict(text) == said


def test_what_a_stack_waits_in_and_where():
    assert stacks.read(GLOO_STACK) == ("collective", "waits in all_reduce (gloo)", "all_reduce")
    assert stacks.read(DRIVER_STACK) == ("ray", "waits in ray.get", "get_objects")
    assert stacks.read(PYSPY_SLEEPING) == (None, "in inner (<string>:4)", "inner")
    assert stacks.read("") == (None, "no Python frames", None)


def test_alike_processes_are_told_once_and_the_summary_is_bounded():
    many = [{"role": "actor", "name": "TrainingWorker", "pid": 100 + i, "node_ip": W1, "text": GLOO_STACK, "why": None}
            for i in range(200)]
    odd = {"role": "actor", "name": "TrainingWorker", "pid": 7, "node_ip": W2, "text": None, "why": "timed out"}
    told = stacks.summarize([*many, odd])
    assert told["summary"] == ("200x TrainingWorker waits in all_reduce (gloo); "
                               "TrainingWorker pid 7 on 198.18.0.12: no stack (timed out)")
    assert len(told["lines"]) == 201
    names = [{"role": "actor", "name": f"Worker{i}" * 20, "pid": i, "node_ip": W1, "text": "", "why": None}
             for i in range(100)]
    told = stacks.summarize(names)
    assert len(told["summary"]) <= stacks.SUMMARY_WIDTH
    assert all(len(line) <= stacks.LINE_WIDTH for line in told["lines"])


def test_reading_a_stack_is_linear_in_its_size():
    hostile = ("    f" + " (" * 50_000 + ")\n") * 10  # a megabyte of frame-like lines
    frames = stack(*["step (train.py:9)"] * 40_000)
    for text in (hostile, frames):
        started = time.monotonic()
        stacks.verdict(text)
        assert time.monotonic() - started < 2


def test_a_stack_is_cut_at_its_bound(running, dashboard, capsys, monkeypatch):
    monkeypatch.setattr(stacks, "MAX_STACK_BYTES", 4096)
    frames = "".join(f"    step{i} (train.py:{i})\n" for i in range(2000))
    dashboard.tracebacks[4711] = (200, GLOO_STACK + frames)
    code, out = run(capsys, **running)
    assert code == 0
    path = os.path.join(record(running["ray_config"]), out["stacks"]["dir"], "198.18.0.11-4711-TrainingWorker.txt")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert text.endswith("\n... (cut at 4096 bytes)\n") and len(text) < 4096 + 400


def test_a_refused_token_is_one_line_naming_the_token_file(running, dashboard, capsys):
    dashboard.routes[f"/api/jobs/{SID}"] = (401, "Unauthorized: Missing authentication token")
    code, out = run(capsys, **running)
    assert code == 1
    assert out["msg"].startswith(f"Ray at {dashboard.url} refused the token from {running['token_path']}: ")
    assert "\n" not in out["msg"] and TOKEN not in out["msg"]
