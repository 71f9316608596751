"""ray_cluster: readiness, busy nodes, summaries, client environment."""

import ray_cluster as rc


def node(ip, head=False, state="ALIVE", **res):
    return {"node_id": "id-" + ip + state, "node_ip": ip, "node_name": ip, "is_head_node": head,
            "state": state, "resources_total": res}


WORKERS = [{"host": "w1", "ip": "10.0.0.11", "num_gpus": 4, "worker_node": 1},
           {"host": "w2", "ip": "10.0.0.12", "num_gpus": 4, "worker_node": 1}]


def test_ready_when_every_worker_alive_with_resources():
    nodes = [node("10.0.0.10", head=True), node("10.0.0.11", GPU=4.0, worker_node=1.0),
             node("10.0.0.12", GPU=4.0, worker_node=1.0)]
    assert rc.worker_readiness(nodes, WORKERS) == (True, [])


def test_missing_dead_and_wrong_resources_are_named():
    nodes = [node("10.0.0.10", head=True), node("10.0.0.11", state="DEAD", GPU=4.0, worker_node=1.0),
             node("10.0.0.12", GPU=2.0)]
    ready, missing = rc.worker_readiness(nodes, WORKERS)
    assert not ready
    assert missing[0] == "w1 (10.0.0.11): not in the cluster"
    assert missing[1].startswith("w2 (10.0.0.12): ") and "worker_node=0" in missing[1] and "GPU=2.0, want 4" in missing[1]


def test_a_head_on_a_worker_ip_does_not_count():
    nodes = [node("10.0.0.11", head=True, GPU=4.0, worker_node=1.0)]
    assert not rc.worker_readiness(nodes, WORKERS[:1])[0]


def test_busy_nodes_from_drivers_and_actors():
    nodes = [node("10.0.0.11"), node("10.0.0.12"), node("10.0.0.13")]
    jobs = [{"status": "RUNNING", "driver_node_id": nodes[0]["node_id"]},
            {"status": "SUCCEEDED", "driver_node_id": nodes[2]["node_id"]}]
    assert rc.busy_node_ips(nodes, jobs, [nodes[1]["node_id"]]) == ["10.0.0.11", "10.0.0.12"]


def test_summaries_from_objects_and_dicts():
    class Status:
        value = "RUNNING"

    class Job:
        submission_id = "x"
        status = Status()
        driver_node_id = "n"

    assert rc.job_summary(Job())["status"] == "RUNNING"
    assert rc.job_summary({"submission_id": "y", "status": "FAILED"})["status"] == "FAILED"
    lines = rc.describe_nodes([node("10.0.0.11", GPU=4.0, CPU=2.0, memory=1.0), node("10.0.0.10", head=True)])
    assert lines[0].startswith("head 10.0.0.10 ALIVE")
    assert lines[1] == "worker 10.0.0.11 ALIVE [CPU=2, GPU=4]"


def test_client_env_clears_stray_variables_and_sets_token(tmp_path):
    token = tmp_path / "t"
    token.write_text("abc\n")
    env = {"RAY_ADDRESS": "x", "https_proxy": "p", "HOME": "/root"}
    rc.prepare_client_env(str(token), env)
    assert "RAY_ADDRESS" not in env and "https_proxy" not in env and env["HOME"] == "/root"
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(token)
    assert rc.read_token(str(token)) == "abc"
    assert rc.auth_headers("abc") == {"Authorization": "Bearer abc"}
    assert rc.auth_headers(None) == {}


def test_the_newest_of_two_alive_entries_for_one_ip_counts():
    old = {**node("10.0.0.11", GPU=4.0, worker_node=1.0), "node_id": "old", "start_time_ms": 1}
    new = {**node("10.0.0.11", GPU=2.0, worker_node=1.0), "node_id": "new", "start_time_ms": 2}
    want = [{**WORKERS[0], "num_gpus": 2}]
    assert rc.worker_readiness([old, new], want) == (True, [])
    assert rc.worker_readiness([new, old], want) == (True, [])
    assert not rc.worker_readiness([new, old], WORKERS[:1])[0]
