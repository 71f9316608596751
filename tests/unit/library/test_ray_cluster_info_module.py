"""library/ray_cluster_info.py run as Ansible runs it; the dashboard's answers are faked."""

import json

import pytest
import ray
import ray_cluster_info
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.testing import patch_module_args

URL = "http://10.0.0.10:8265"
HEAD = {"node_id": "n0", "node_ip": "10.0.0.10", "node_name": "head", "is_head_node": True, "state": "ALIVE",
        "resources_total": {"CPU": 0.0}}
W1 = {"node_id": "n1", "node_ip": "10.0.0.11", "node_name": "w1", "is_head_node": False, "state": "ALIVE",
      "resources_total": {"CPU": 8.0, "GPU": 4.0, "worker_node": 1.0}}
W2_DEAD = {"node_id": "n2", "node_ip": "10.0.0.12", "node_name": "w2", "is_head_node": False, "state": "DEAD",
           "resources_total": {"CPU": 8.0, "GPU": 4.0, "worker_node": 1.0}}
W3 = {"node_id": "n3", "node_ip": "10.0.0.13", "node_name": "w3", "is_head_node": False, "state": "ALIVE",
      "resources_total": {"CPU": 8.0, "GPU": 4.0, "worker_node": 1.0}}
EXPECTED = [{"host": "w1", "ip": "10.0.0.11", "num_gpus": 4, "worker_node": 1},
            {"host": "w2", "ip": "10.0.0.12", "num_gpus": 4, "worker_node": 1}]


class Client:
    def __init__(self, jobs):
        self.jobs = jobs

    def list_jobs(self):
        return self.jobs


@pytest.fixture
def cluster(monkeypatch):
    state = {"nodes": [HEAD, W1, W2_DEAD, W3], "actor_nodes": ["n3"], "calls": [],
             "jobs": [{"submission_id": "a", "status": "RUNNING", "driver_node_id": "n1"},
                      {"submission_id": "b", "status": "SUCCEEDED", "driver_node_id": "n3"}]}

    def list_nodes(url):
        state["calls"].append(("list_nodes", url))
        if isinstance(state["nodes"], Exception):
            raise state["nodes"]
        return state["nodes"]

    def job_client(url, token):
        state["calls"].append(("job_client", url, token))
        return Client(state["jobs"])

    monkeypatch.setattr(rc, "list_nodes", list_nodes)
    monkeypatch.setattr(rc, "job_client", job_client)
    monkeypatch.setattr(rc, "list_alive_actor_nodes", lambda url: state["actor_nodes"])
    for name in (*rc._STRAY_ENV, "NO_PROXY", "no_proxy", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(name, "")
    return state


def run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ray_cluster_info.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_nodes_jobs_and_busy_nodes(cluster, capsys):
    code, out = run(capsys, dashboard_url=URL)
    assert code == 0 and out["changed"] is False
    assert [n["node_ip"] for n in out["nodes"]] == ["10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13"]
    assert out["node_lines"][0] == "head 10.0.0.10 ALIVE [CPU=0]"
    assert [j["submission_id"] for j in out["jobs"]] == ["a", "b"]
    # n1 runs a driver, n3 an actor; a finished job's driver node is not busy.
    assert out["busy_node_ips"] == ["10.0.0.11", "10.0.0.13"]
    assert out["ready"] is True and out["missing"] == []  # nothing expected
    assert out["ray_version"] == ray.__version__
    assert ("job_client", URL, None) in cluster["calls"]


def test_readiness_names_the_missing_worker(cluster, capsys):
    code, out = run(capsys, dashboard_url=URL, expected_workers=EXPECTED)
    assert code == 0 and out["ready"] is False
    assert out["missing"] == ["w2 (10.0.0.12): not in the cluster"]

    cluster["nodes"] = [HEAD, W1, {**W2_DEAD, "state": "ALIVE"}]
    code, out = run(capsys, dashboard_url=URL, expected_workers=EXPECTED)
    assert out["ready"] is True and out["missing"] == []


def test_token_is_read_and_passed_to_the_client(cluster, tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    code, _ = run(capsys, dashboard_url=URL, token_path=str(token))
    assert code == 0 and ("job_client", URL, "s3cr3t-token") in cluster["calls"]


def test_unreachable_cluster_fails_with_one_line_naming_the_url(cluster, capsys):
    cluster["nodes"] = ConnectionError("Failed to connect to API server.\nTraceback (most recent call last):\n  x")
    code, out = run(capsys, dashboard_url=URL, expected_workers=EXPECTED)
    assert code == 1 and out["failed"] is True
    assert out["msg"] == f"cannot read the Ray cluster at {URL}: Failed to connect to API server."
    assert out["ready"] is False and out["missing"] == ["cluster unreachable"] and out["nodes"] == []


def test_exception_without_a_message_still_fails_cleanly(cluster, capsys):
    cluster["nodes"] = TimeoutError()
    code, out = run(capsys, dashboard_url=URL)
    assert code == 1 and out["msg"].startswith(f"cannot read the Ray cluster at {URL}: ")


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_wait_looks_again_until_the_replaced_node_is_dead(monkeypatch):
    old = {**W1, "node_id": "old", "start_time_ms": 1}
    new = {**W1, "node_id": "new", "start_time_ms": 2}
    listings = [RuntimeError("connection refused"), [HEAD, old, new], [HEAD, {**old, "state": "DEAD"}, new]]

    def list_nodes(url):
        answer = listings.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(rc, "list_nodes", list_nodes)
    clock = FakeClock()
    _, ready, missing = ray_cluster_info.read_nodes_until_ready(URL, EXPECTED[:1], 10, clock, clock.sleep)
    assert ready and missing == [] and clock.now == 2 and not listings


def test_wait_gives_up_after_wait_s_with_what_is_missing(monkeypatch):
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, W1])
    clock = FakeClock()
    _, ready, missing = ray_cluster_info.read_nodes_until_ready(URL, EXPECTED, 3, clock, clock.sleep)
    assert not ready and missing == ["w2 (10.0.0.12): not in the cluster"] and clock.now == 3


def test_wait_raises_the_last_error_when_the_cluster_never_answers(monkeypatch):
    def refuse(url):
        raise RuntimeError("connection refused")

    monkeypatch.setattr(rc, "list_nodes", refuse)
    clock = FakeClock()
    with pytest.raises(RuntimeError):
        ray_cluster_info.read_nodes_until_ready(URL, EXPECTED, 2, clock, clock.sleep)
    assert clock.now == 2


@pytest.fixture
def prometheus():
    """A real HTTP server on loopback answering /api/v1/targets with `state["body"]`."""
    import http.server
    import threading

    state = {"body": b'{"status": "success", "data": {"activeTargets": []}}', "paths": [], "redirect": None}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            state["paths"].append(self.path)
            if state["redirect"] and self.path.startswith("/api/"):  # the API's path redirected, once
                self.send_response(302)
                self.send_header("Location", state["redirect"])
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(state["body"])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def test_prometheus_targets_come_with_a_ready_cluster(cluster, prometheus, capsys):
    code, out = run(capsys, dashboard_url=URL, prometheus_url=prometheus["url"] + "/")
    assert code == 0 and out["prometheus_targets"] == {"status": "success", "data": {"activeTargets": []}}
    assert prometheus["paths"] == ["/api/v1/targets?state=active"]


def test_prometheus_is_not_asked_before_the_workers_are_ready(cluster, prometheus, capsys):
    code, out = run(capsys, dashboard_url=URL, expected_workers=EXPECTED, prometheus_url=prometheus["url"])
    assert code == 0 and out["ready"] is False and "prometheus_targets" not in out and prometheus["paths"] == []


@pytest.mark.parametrize("body", [b"<html>not json</html>", b"[1, 2]", b""])
def test_prometheus_answering_no_json_object_is_null(cluster, prometheus, capsys, body):
    prometheus["body"] = body
    code, out = run(capsys, dashboard_url=URL, prometheus_url=prometheus["url"])
    assert code == 0 and out["prometheus_targets"] is None


def test_prometheus_not_answering_is_null_not_a_failure(cluster, capsys):
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    code, out = run(capsys, dashboard_url=URL, prometheus_url=f"http://127.0.0.1:{port}")
    assert code == 0 and out["ready"] is True and out["prometheus_targets"] is None


def test_open_records_are_what_the_complete_index_lists(cluster, tmp_path, capsys):
    from ansible.module_utils.jobs.record import open_index

    jobs = tmp_path / "jobs"
    code, out = run(capsys, dashboard_url=URL, shared_root=str(tmp_path))
    assert code == 0 and out["open_records"] is None  # no index yet: the reconcile's first scan writes it
    jobs.mkdir()
    open_index.mark_complete(str(jobs))
    assert run(capsys, dashboard_url=URL, shared_root=str(tmp_path))[1]["open_records"] == []
    (jobs / "sft-1").mkdir()
    open_index.add(str(jobs / "sft-1"))
    assert run(capsys, dashboard_url=URL, shared_root=str(tmp_path))[1]["open_records"] == ["sft-1"]
    assert "open_records" not in run(capsys, dashboard_url=URL)[1]


def test_an_index_that_is_a_symlink_is_not_followed(cluster, tmp_path, capsys):
    from ansible.module_utils.jobs.record import open_index

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    open_index.mark_complete(str(elsewhere))
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / ".open").symlink_to(elsewhere / ".open")
    code, out = run(capsys, dashboard_url=URL, shared_root=str(tmp_path))
    assert code == 0 and out["open_records"] is None


def test_without_the_jobs_the_job_client_is_never_asked(cluster, capsys):
    code, out = run(capsys, dashboard_url=URL, expected_workers=EXPECTED, list_jobs=False)
    assert code == 0 and "jobs" not in out and "busy_node_ips" not in out and out["missing"]
    assert not [c for c in cluster["calls"] if c[0] == "job_client"]


@pytest.fixture
def ftp_port():
    """A port that listens like an FTP server and never answers; accepted() says whether anything connected."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.setblocking(False)

    def accepted():
        try:
            listener.accept()[0].close()
            return True
        except BlockingIOError:
            return False

    yield listener.getsockname()[1], accepted
    listener.close()


def test_a_redirect_to_ftp_is_refused_without_connecting(cluster, prometheus, ftp_port, capsys):
    """urllib's own redirect handler follows http to ftp://: whatever answers at the Prometheus address would make
    the node read an FTP server of its choosing."""
    port, accepted = ftp_port
    prometheus["redirect"] = f"ftp://127.0.0.1:{port}/api/v1/targets"
    code, out = run(capsys, dashboard_url=URL, prometheus_url=prometheus["url"])
    assert code == 0 and out["prometheus_targets"] is None
    assert prometheus["paths"] == ["/api/v1/targets?state=active"] and not accepted()


@pytest.mark.parametrize("where", ["file:///etc/passwd", "data:,{}"])
def test_a_redirect_to_another_scheme_is_refused(prometheus, where):
    prometheus["redirect"] = where
    assert ray_cluster_info.prometheus_targets(prometheus["url"], timeout=2) is None


def test_a_redirect_within_http_is_followed(cluster, prometheus, capsys):
    prometheus["redirect"] = prometheus["url"] + "/moved/targets"
    code, out = run(capsys, dashboard_url=URL, prometheus_url=prometheus["url"])
    assert code == 0 and out["prometheus_targets"] == {"status": "success", "data": {"activeTargets": []}}
    assert prometheus["paths"] == ["/api/v1/targets?state=active", "/moved/targets"]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "/api", ""])
def test_a_prometheus_url_that_is_not_http_is_never_opened(cluster, tmp_path, capsys, url):
    secret = tmp_path / "api" / "v1" / "targets?state=active"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"status": "success"}')
    code, out = run(capsys, dashboard_url=URL, prometheus_url=url.replace("/etc/passwd", str(tmp_path)) or "x")
    assert code == 0 and out["prometheus_targets"] is None


def put_record(root, sid, **fields):
    directory = root / "jobs" / sid
    directory.mkdir(parents=True)
    (directory / "status.json").write_text(json.dumps({"submission_id": sid, **fields}))


def test_recent_records_are_read_through_the_model_even_with_the_cluster_down(cluster, capsys, tmp_path):
    goodput = {"wall_s": 100, "productive_s": 60, "detection_s": 40, "attempts": 2}
    put_record(tmp_path, "c", state="FAILED", final=True, attempts=["c-r1"], goodput=goodput,
               blame=[{"node_ip": "10.0.0.12", "why": "node died",
                       "evidence": {"file": "debug/nodes.json", "line": "x"}}])
    put_record(tmp_path, "c-r1", state="SUCCEEDED", final=True, attempt_of="c")
    put_record(tmp_path, "bad", state="SUCCEEDED", final=True, goodput={**goodput, "attempts": -1})
    code, out = run(capsys, dashboard_url=URL, shared_root=str(tmp_path), recent_records=10)
    assert code == 0 and out["records_note"] is None
    by_id = {c["submission_id"]: c for c in out["records"]}
    assert set(by_id) == {"c", "bad"}
    assert by_id["c"]["goodput"] == "goodput 60% (lost: detection 40 s)" and by_id["c"]["state"] == "SUCCEEDED"
    assert by_id["c"]["blame"] == [{"node_ip": "10.0.0.12", "why": "node died", "attempt": "c"}]
    assert by_id["bad"]["state"] is None and "field 'goodput'" in by_id["bad"]["unreadable"][0]

    cluster["nodes"] = ConnectionError("refused")
    code, out = run(capsys, dashboard_url=URL, shared_root=str(tmp_path), recent_records=10)
    assert code == 1 and {c["submission_id"] for c in out["records"]} == {"c", "bad"}


def test_no_records_are_read_unless_asked(cluster, capsys, tmp_path):
    put_record(tmp_path, "c", state="SUCCEEDED", final=True)
    code, out = run(capsys, dashboard_url=URL, shared_root=str(tmp_path))
    assert code == 0 and "records" not in out and "records_note" not in out
