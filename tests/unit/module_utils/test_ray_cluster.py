"""ray_cluster: readiness, busy nodes, summaries, client environment."""

from ansible.module_utils.base import ray_cluster as rc


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
    assert missing[1].startswith("w2 (10.0.0.12): ")
    assert "worker_node=0" in missing[1] and "GPU=2.0, want 4" in missing[1]


def test_a_head_on_a_worker_ip_does_not_count():
    nodes = [node("10.0.0.11", head=True, GPU=4.0, worker_node=1.0)]
    assert not rc.worker_readiness(nodes, WORKERS[:1])[0]


def test_a_one_box_sites_worker_is_the_head_node_with_the_workers_resources():
    box = [{"host": "box", "ip": "10.0.0.10", "num_gpus": 8, "worker_node": 1, "head": True}]
    assert rc.worker_readiness([node("10.0.0.10", head=True, GPU=8.0, worker_node=1.0)], box) == (True, [])
    # A head of its own (no GPUs, no worker_node) is not ready as the site's worker; a plain worker there is not it.
    assert rc.worker_readiness([node("10.0.0.10", head=True)], box) == (
        False, ["box (10.0.0.10): worker_node=0, want 1, GPU=0, want 8"])
    assert not rc.worker_readiness([node("10.0.0.10", GPU=8.0, worker_node=1.0)], box)[0]


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


def test_two_alive_entries_for_one_ip_are_not_ready_until_the_old_one_is_dead():
    # Right after a restart Ray lists the replaced node ALIVE beside the new one (issue 8).
    old = {**node("10.0.0.11", GPU=4.0, worker_node=1.0), "node_id": "old", "start_time_ms": 1}
    new = {**node("10.0.0.11", GPU=2.0, worker_node=1.0), "node_id": "new", "start_time_ms": 2}
    want = [{**WORKERS[0], "num_gpus": 2}]
    for listing in ([old, new], [new, old]):
        ready, missing = rc.worker_readiness(listing, want)
        assert not ready and missing == [
            "w1 (10.0.0.11): 2 ALIVE nodes on this IP, waiting for the replaced one to be declared dead"]
    assert rc.worker_readiness([{**old, "state": "DEAD"}, new], want) == (True, [])
    # Even when the old entry has the wanted resources, it alone cannot make the gate pass.
    assert not rc.worker_readiness([old, {**new, "resources_total": old["resources_total"]}], WORKERS[:1])[0]


def test_a_restarted_worker_counts_only_once_the_new_node_is_listed():
    old = {**node("10.0.0.11", GPU=4.0, worker_node=1.0), "start_time_ms": 1000}
    want = [{**WORKERS[0], "started_after_ms": 2000}]
    ready, missing = rc.worker_readiness([old], want)
    assert not ready and missing == ["w1 (10.0.0.11): only the node it replaces is listed, waiting for the new one"]
    new = {**old, "node_id": "new", "start_time_ms": 2500}
    assert rc.worker_readiness([{**old, "state": "DEAD"}, new], want) == (True, [])
    # A worker this run did not restart has no start bound.
    assert rc.worker_readiness([old], [{**WORKERS[0], "started_after_ms": 0}]) == (True, [])


def test_one_alive_per_ip_names_the_ambiguous_ips():
    a = node("10.0.0.11")
    b = {**node("10.0.0.11"), "node_id": "b"}
    dead = node("10.0.0.12", state="DEAD")
    head = node("10.0.0.10", head=True)
    assert rc.one_alive_per_ip([a, b, dead, head]) == ({"10.0.0.10": head}, ["10.0.0.11"])


def test_a_dashboard_redirect_is_refused_and_the_token_goes_nowhere_else():
    """get_json (and stacks' reads) carry the token: a redirect to another address is an error, never followed."""
    import http.server
    import threading
    import urllib.error

    import pytest

    seen = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Elsewhere)

    class Dashboard(Elsewhere):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{other.server_port}/steal")
            self.end_headers()

    dashboard = http.server.HTTPServer(("127.0.0.1", 0), Dashboard)
    for server in (other, dashboard):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as caught:
            rc.get_json(f"http://127.0.0.1:{dashboard.server_port}", "/api/v0/nodes", "sekrit-token", timeout=5)
        assert caught.value.code == 302 and "not followed" in str(caught.value) and seen == []
    finally:
        for server in (other, dashboard):
            server.shutdown()
            server.server_close()
