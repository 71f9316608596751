"""Issue 33, item 1: a failed or hung attempt's status.json names the nodes its evidence points at (`blame`), through
the ray_job module as the watcher and job.yml run it; the final line names them; a user's error blames none."""

import json
import os

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.evidence import stacks
from ray_job_harness import HEAD, SID, WORKER, make_spec, record, run

W2 = dict(WORKER, node_id="n-w2", node_ip="10.0.0.12", node_name="w2")
STEPS = "".join(f"step:{s} - train/loss:{5 - s / 10} - train/lr:0.001\n" for s in range(1, 4))
GLOO_WAIT = """Process 4711: ray::TrainingWorker.train_batch
Python v3.11.7 (/usr/bin/python3.11)

Thread 4711 (idle): "MainThread"
    all_gather_single (torch/distributed/distributed_c10d.py:4394)
    foreach_all_gather (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:364)
    TrainingWorker.train_batch (verl/workers/engine_workers.py:368)
"""
PROCS = [{"role": "driver", "name": "driver", "pid": 3001, "node_ip": "10.0.0.11", "node_id": "n-w1",
          "state": "RUNNING"},
         {"role": "actor", "name": "TrainingWorker", "pid": 4711, "node_ip": "10.0.0.11", "node_id": "n-w1",
          "state": "ALIVE"},
         {"role": "actor", "name": "TrainingWorker", "pid": 4712, "node_ip": "10.0.0.12", "node_id": "n-w2",
          "state": "ALIVE"}]


@pytest.fixture
def two_ranks(monkeypatch):
    """Two ranks on two workers, the one on w2 SIGSTOPped: py-spy reads rank 0 in its all-gather, never rank 1. The
    real stacks.dump writes the stacks and their processes.json; only Ray's dashboard is faked."""
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER, W2])
    monkeypatch.setattr(stacks, "processes", lambda job: [dict(p) for p in PROCS])
    # Ray's actor table vouches for each rank: an actor of the job with that pid on that node.
    monkeypatch.setattr(rc, "list_actor_summaries", lambda url, limit=1000: [
        {"actor_id": f"a{p['pid']}", "class_name": p["name"], "job_id": "07000000", "node_id": p["node_id"],
         "pid": p["pid"], "state": "DEAD"} for p in PROCS if p["role"] == "actor"])
    texts = {4711: GLOO_WAIT}
    monkeypatch.setattr(stacks, "_take", lambda job, proc: dict(
        proc, text=texts.get(proc["pid"]), why=None if proc["pid"] in texts else "timed out after 20s: stopped?"))


def start(capsys, ray, ray_config, **spec):
    code, _ = run(capsys, spec=make_spec(ray_config, submission_id=SID, **spec), ray_config=ray_config)
    assert code == 0
    ray.set(SID, "RUNNING", driver_node_id="n-w1", job_id="07000000", start_time=int(ray.clock.now * 1000))


def watch(capsys, ray_config):
    code, out = run(capsys, action="watch", ray_config=ray_config)
    assert code == 0, out
    return out


def status_of(ray_config):
    with open(os.path.join(record(ray_config), "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_hung_job_stopped_blames_the_node_of_its_unreadable_rank(ray, ray_config, capsys, two_ranks):
    start(capsys, ray, ray_config, timeouts={"stall_s": 300, "max_run_s": None}, retries={"max": 1, "on": ["hung"]})
    ray.logs[SID] = STEPS
    watch(capsys, ray_config)
    ray.clock.now += 400
    out = watch(capsys, ray_config)
    assert out["finalized"] == [SID] and ray.stopped == [SID]
    st = status_of(ray_config)
    assert (st["state"], st["reason"]) == ("FAILED", "HUNG")
    dump = st["stall"]["stacks"]
    assert st["blame"] == [{"node_ip": "10.0.0.12", "host": "w2", "why": "unreadable rank while others wait in a "
                            "collective", "evidence": {
                                "file": f"{dump}/10.0.0.12-4712-TrainingWorker.txt",
                                "line": ("TrainingWorker pid 4712 on 10.0.0.12: no stack (timed out after 20s: "
                                         "stopped?); 1 other TrainingWorker waits in all_gather_single")}}]
    assert os.path.isfile(os.path.join(record(ray_config), st["blame"][0]["evidence"]["file"]))
    # job.yml -e do=status: the final line names the node, the status dict carries the blame.
    code, shown = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and shown["status"]["blame"] == st["blame"]
    assert shown["progress"] == (f"{SID}: FAILED (HUNG); blamed: 10.0.0.12 (w2): unreadable rank while others wait "
                                 "in a collective")


def test_a_job_whose_worker_node_died_blames_that_node(ray, ray_config, capsys, monkeypatch):
    start(capsys, ray, ray_config)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER, dict(W2, state="DEAD")])
    monkeypatch.setattr(rc, "list_actor_summaries", lambda url, limit=1000: [
        {"actor_id": "a1", "class_name": "TrainingWorker", "job_id": "07000000", "node_id": "n-w2", "state": "DEAD"}])
    ray.logs[SID] = STEPS + ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
                             "\tclass_name: TrainingWorker\n\tip: 10.0.0.12\n"
                             "The actor died because its node has died. Node Id: n-w2\n")
    ray.set(SID, "FAILED", driver_exit_code=1, end_time=int(ray.clock.now * 1000) + 5000,
            message="Job entrypoint command failed with exit code 1")
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED"
    st = status_of(ray_config)
    assert st["diagnosis"]["kind"] == "node_died"
    assert [(b["node_ip"], b["host"], b["why"], b["evidence"]["file"]) for b in st["blame"]] == [
        ("10.0.0.12", "w2", "node died", "debug/nodes.json")]
    assert out["progress"] == f"{SID}: FAILED; blamed: 10.0.0.12 (w2): node died"


def test_a_users_error_blames_no_node(ray, ray_config, capsys, monkeypatch):
    start(capsys, ray, ray_config)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER, W2])
    ray.logs[SID] = STEPS + "Traceback (most recent call last):\nValueError: bad batch size on 10.0.0.12\n"
    ray.set(SID, "FAILED", driver_exit_code=1, end_time=int(ray.clock.now * 1000) + 5000,
            message="Job entrypoint command failed with exit code 1")
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED"
    assert status_of(ray_config)["blame"] == [] and out["progress"] == f"{SID}: FAILED"


def test_a_job_that_prints_rays_words_for_a_dead_node_blames_no_node(ray, ray_config, capsys, monkeypatch):
    """Issue 38: the job's own text (a dataset prompt verl prints, say) names a worker it ran on and an address outside
    the cluster in Ray's words for a dead node and an OOM kill; Ray's tables say every node is ALIVE."""
    start(capsys, ray, ray_config)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER, W2])
    monkeypatch.setattr(rc, "list_actor_summaries", lambda url, limit=1000: [
        {"actor_id": "a1", "class_name": "TrainingWorker", "job_id": "07000000", "node_id": "n-w2", "pid": 7,
         "state": "DEAD"}])
    ray.logs[SID] = STEPS + "".join(
        f"Task failed because the node it was running on is dead or unavailable. Node IP: {ip}, node ID: ff.\n"
        f"Memory on the node (IP: {ip}, ID: ff) was 30GB used / 31GB limit\n" for ip in ("10.0.0.12", "10.9.9.9"))
    ray.set(SID, "FAILED", driver_exit_code=1, end_time=int(ray.clock.now * 1000) + 5000,
            message="Job entrypoint command failed with exit code 1")
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED"
    st = status_of(ray_config)
    assert st["diagnosis"]["kind"] in ("node_died", "oom_kill") and st["blame"] == []
    assert out["progress"] == f"{SID}: FAILED"
