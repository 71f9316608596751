"""library/ray_node.py run as Ansible runs it; processes (/proc, signals, `ray`) are faked."""

import json
import os

import pytest
from ansible.module_utils.node import ray_node
from ray_node_helpers import PYTHON, RAY, VERSION_PROBE, read_state, read_text, run


def started(host, capsys, args):
    """Start Ray once so that the state file describes `args`; forget the commands it ran."""
    code, out = run(capsys, args)
    assert code == 0 and out["action"] == "start"
    host.commands.clear()
    return out


def test_start_runs_ray_start_and_records_the_state(host, head, capsys):
    code, out = run(capsys, head)
    assert code == 0 and out["changed"] is True and out["action"] == "start"
    assert out["reason"] == "Ray is not running" and out["ray_version"] == "2.60.0"
    assert host.commands[0] == VERSION_PROBE
    [argv] = host.commands[1:]
    assert argv[:2] == [RAY, "start"]
    for arg in ("--head", "--num-cpus=0", "--num-gpus=0", "--node-ip-address=10.0.0.10", "--port=6379"):
        assert arg in argv
    env = host.environs[1]
    assert env["RAY_AUTH_MODE"] == "token" and env["PATH"].startswith("/opt/ray/bin" + os.pathsep)
    state = read_state(head)
    assert state["argv"] == argv and state["env"] == {"RAY_AUTH_MODE": "token"} and state["ray_version"] == "2.60.0"
    assert state["fingerprint"] == ray_node.fingerprint(argv, state["env"], "2.60.0")


def test_healthy_node_is_left_alone(host, head, capsys):
    started(host, capsys, head)
    before = read_state(head)
    code, out = run(capsys, head)
    assert code == 0 and out["changed"] is False and out["action"] == "none" and out["changes"] == []
    assert host.commands == [VERSION_PROBE]
    assert read_state(head) == before


def test_node_whose_ray_died_is_started_again(host, head, capsys):
    started(host, capsys, head)
    host.raylets = []
    code, out = run(capsys, head)
    assert code == 0 and out["changed"] is True and out["reason"] == "Ray died; rejoining"
    assert [c[1] for c in host.commands] == ["-c", "start"]
    assert out["killed_driver_pids"] == []


def test_drivers_left_when_ray_died_are_ended_before_it_rejoins(host, head, capsys):
    started(host, capsys, head)
    host.raylets, host.drivers = [], [777]  # their job supervisor died with the raylet: the cluster lost them
    code, out = run(capsys, head)
    assert code == 0 and out["action"] == "start" and host.killed == [777] and out["killed_driver_pids"] == [777]


def test_drivers_of_a_running_ray_are_never_touched(host, head, capsys):
    started(host, capsys, head)
    host.drivers = [777]
    code, out = run(capsys, head)
    assert code == 0 and out["action"] == "none" and host.killed == []


@pytest.fixture
def jobs(monkeypatch):
    """What the cluster answers when ray_node asks which jobs a restart would end."""
    asked = []
    answer = {"busy": ["sft-1"]}

    def jobs_in_the_way(role, node_ip, dashboard_url, token_path):
        asked.append((role, node_ip, dashboard_url, token_path))
        if isinstance(answer["busy"], Exception):
            raise answer["busy"]
        return answer["busy"]

    monkeypatch.setattr(ray_node, "jobs_in_the_way", jobs_in_the_way)
    return answer, asked


def test_a_healthy_node_does_not_ask_the_cluster(host, head, jobs, capsys):
    started(host, capsys, head)
    code, out = run(capsys, {**head, "dashboard_url": "http://10.0.0.10:8265"})
    assert code == 0 and out["action"] == "none" and jobs[1] == []


def test_drifted_busy_node_is_not_restarted_without_force(host, head, jobs, capsys):
    started(host, capsys, head)
    code, out = run(capsys, {**head, "env": {"RAY_AUTH_MODE": "token", "RAY_X": "1"},
                             "dashboard_url": "http://10.0.0.10:8265", "token_path": "/t", "token": "abc"})
    assert code == 1 and out["failed"] is True and out["action"] == "refuse_busy"
    assert "force=true" in out["msg"] and "env RAY_X" in out["msg"] and "sft-1" in out["msg"]
    assert out["busy_jobs"] == ["sft-1"] and jobs[1] == [("head", "10.0.0.10", "http://10.0.0.10:8265", "/t")]
    assert host.commands == [VERSION_PROBE]


def test_drifted_node_is_not_restarted_when_the_cluster_cannot_tell(host, head, jobs, capsys):
    # Fail closed: a dashboard that does not answer may hide a three-day run.
    started(host, capsys, head)
    jobs[0]["busy"] = ConnectionError("connection refused")
    code, out = run(capsys, {**head, "dashboard_port": 8266, "dashboard_url": "http://10.0.0.10:8265"})
    assert code == 1 and out["action"] == "refuse_busy"
    assert "cannot tell whether jobs run" in out["msg"] and "connection refused" in out["msg"]
    code, out = run(capsys, {**head, "dashboard_port": 8266})
    assert code == 1 and "no dashboard_url to ask" in out["msg"]
    assert host.commands == [VERSION_PROBE, VERSION_PROBE]


def test_drifted_idle_node_restarts(host, head, jobs, capsys):
    started(host, capsys, head)
    jobs[0]["busy"] = []
    code, out = run(capsys, {**head, "dashboard_port": 8266, "dashboard_url": "http://10.0.0.10:8265"})
    assert code == 0 and out["action"] == "restart"


def test_drifted_busy_node_restarts_with_force(host, head, jobs, capsys):
    started(host, capsys, head)
    host.drivers = [555]
    changed = {**head, "dashboard_port": 8266, "dashboard_url": "http://10.0.0.10:8265", "force": True}
    code, out = run(capsys, changed)
    assert code == 0 and out["changed"] is True and out["action"] == "restart"
    assert out["reason"] == "configuration changed" and jobs[1] == []
    assert "+--dashboard-port=8266" in out["changes"] and "---dashboard-port=8265" in out["changes"]
    # A graceful stop: the raylet leaves the cluster at once instead of lingering ALIVE (issue 8).
    assert [c[1:3] for c in host.commands[1:]] == [["stop", "--grace-period=10"],
                                                   ["start", "--node-ip-address=10.0.0.10"]]
    assert out["started_at_ms"] > 1_700_000_000_000
    assert host.killed == [555]  # a driver `ray stop` left behind
    assert "--dashboard-port=8266" in read_state(head)["argv"]


def test_another_ray_version_fails_naming_both(host, head, capsys):
    host.version = (0, "2.59.0\n", "")
    code, out = run(capsys, {**head, "ray_version": "2.60.0"})
    assert code == 1 and out["msg"] == f"{PYTHON} has Ray 2.59.0, this cluster wants 2.60.0"
    assert host.commands == [VERSION_PROBE]


def test_under_the_nodes_own_python_the_version_is_read_without_starting_another(host, head, capsys, monkeypatch):
    monkeypatch.setattr(ray_node.sys, "executable", PYTHON)  # as when ray_python is the interpreter
    monkeypatch.setattr(ray_node.importlib.metadata, "version", lambda name: {"ray": "2.59.0"}[name])
    code, out = run(capsys, {**head, "ray_version": "2.60.0"})
    assert code == 1 and out["msg"] == f"{PYTHON} has Ray 2.59.0, this cluster wants 2.60.0"
    assert host.commands == []

    def missing(name):
        raise ray_node.importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(ray_node.importlib.metadata, "version", missing)
    code, out = run(capsys, head)
    assert code == 1 and out["msg"] == f"{PYTHON} has no Ray: no package metadata for ray"


def test_token_is_kept_0600_and_a_new_one_restarts_the_node(host, head, tmp_path, jobs, capsys):
    token_path = str(tmp_path / "etc" / "ray_token")
    args = {**head, "token": "a" * 64, "token_path": token_path, "dashboard_url": "http://10.0.0.10:8265"}
    started(host, capsys, args)
    assert read_text(token_path) == "a" * 64 + "\n" and os.stat(token_path).st_mode & 0o777 == 0o600
    assert "a" * 64 not in json.dumps(read_state(args))
    code, out = run(capsys, args)
    assert code == 0 and out["action"] == "none" and out["changed"] is False
    jobs[0]["busy"] = []
    code, out = run(capsys, {**args, "token": "b" * 64})
    assert code == 0 and out["action"] == "restart" and out["changes"] == ["token"]
    assert read_text(token_path) == "b" * 64 + "\n"
    assert "b" * 64 not in json.dumps(out)


def test_restart_requested_on_a_healthy_node(host, head, capsys):
    started(host, capsys, head)
    code, out = run(capsys, {**head, "restart": True})
    assert code == 0 and out["action"] == "restart" and out["reason"] == "restart requested"
    assert [c[1] for c in host.commands] == ["-c", "stop", "start"]


def test_legacy_ray_is_not_replaced_without_cleanup(host, head, capsys):
    host.raylets = [99]
    code, out = run(capsys, head)
    assert code == 1 and out["action"] == "refuse_legacy"
    assert "not started by this project" in out["msg"] and "ray_cleanup_legacy=true" in out["msg"]
    assert host.commands == [VERSION_PROBE]
    assert not os.path.exists(head["state_file"])


def test_legacy_ray_is_replaced_with_cleanup_and_its_sessions_removed(host, head, tmp_path, jobs, capsys,
                                                                      monkeypatch):
    temp_dir = tmp_path / "ray"
    (temp_dir / "session_2024-01-01_00-00-00_1").mkdir(parents=True)
    (temp_dir / "keep").mkdir()
    monkeypatch.setattr(ray_node, "RAY_TMP", str(temp_dir))
    host.raylets = [99]
    jobs[0]["busy"] = []
    code, out = run(capsys, {**head, "cleanup_legacy": True, "dashboard_url": "http://10.0.0.10:8265"})
    assert code == 0 and out["action"] == "restart"
    assert [c[1] for c in host.commands] == ["-c", "stop", "start"]
    assert os.listdir(temp_dir) == ["keep"]


def test_check_mode_only_probes_the_version(host, head, capsys):
    code, out = run(capsys, {**head, "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is True and out["action"] == "start"
    assert host.commands == [VERSION_PROBE]
    assert not os.path.exists(head["state_file"])

    started(host, capsys, head)
    before = read_state(head)
    host.drivers = [555]
    code, out = run(capsys, {**head, "dashboard_port": 8266, "force": True, "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is True and out["action"] == "restart"
    assert host.commands == [VERSION_PROBE] and host.killed == [] and host.raylets == [4242]
    assert read_state(head) == before


def test_check_mode_stop_changes_nothing(host, head, capsys):
    started(host, capsys, head)
    host.drivers = [555]
    code, out = run(capsys, {**head, "state": "stopped", "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is True and out["action"] == "stop"
    assert host.commands == [] and host.killed == []
    assert os.path.exists(head["state_file"])


def test_stop_runs_ray_stop_and_kills_orphaned_drivers(host, head, capsys):
    started(host, capsys, head)
    host.drivers = [555, 556]
    code, out = run(capsys, {"state": "stopped", "python": PYTHON, "state_file": head["state_file"]})
    assert code == 0 and out["changed"] is True and out["action"] == "stop"
    assert host.commands == [[RAY, "stop", "--grace-period=10"]]
    assert host.killed == [555, 556] and out["killed_driver_pids"] == [555, 556]
    assert out["reason"] == "stopping 1 raylet(s), 2 driver(s)"
    assert not os.path.exists(head["state_file"])


def test_stop_when_nothing_runs(host, head, capsys):
    code, out = run(capsys, {"state": "stopped", "python": PYTHON, "state_file": head["state_file"]})
    assert code == 0 and out["changed"] is False and out["action"] == "none"
    assert host.commands == []


def test_failed_start_keeps_no_state(host, head, capsys):
    host.start = (1, "".join(f"line {i}\n" for i in range(30)), "ValueError: port 6379 in use\n")
    code, out = run(capsys, head)
    # One line naming the node and the cause; the output's last 15 lines are in the result, never in the message.
    tail = [f"line {i}" for i in range(16, 30)] + ["ValueError: port 6379 in use"]
    assert code == 1 and out["msg"] == "ray start failed on 10.0.0.10 (rc=1): port 6379 in use"
    assert out["stderr_tail"] == "\n".join(tail)
    assert not os.path.exists(head["state_file"])


TRACEBACK = ("Traceback (most recent call last):\n  File \"node.py\", line 441, in __init__\n"
             "Exception: The current node timed out during startup. This could happen because some of the raylet "
             "failed to startup or the GCS has become overloaded.\n")


def worker(head):
    return {**head, "role": "worker", "node_ip": "10.0.0.11", "head_ip": "10.0.0.10"}


def test_a_worker_whose_start_timed_out_starts_again_once_the_head_answers(host, head, capsys, monkeypatch):
    waited = []
    monkeypatch.setattr(ray_node, "wait_for_port", lambda *a: waited.append(a) or True)
    host.start = [(1, "", TRACEBACK), (0, "Ray runtime started.", "")]
    code, out = run(capsys, worker(head))
    assert code == 0 and out["retried"] and out["action"] == "start", out
    assert waited == [("10.0.0.10", 6379, ray_node.RETRY_WAIT_S)]
    assert [c[1] for c in host.commands[1:]] == ["start", "stop", "start"]
    assert os.path.exists(head["state_file"])


def test_a_start_that_times_out_twice_is_one_line_naming_the_node(host, head, capsys, monkeypatch):
    monkeypatch.setattr(ray_node, "wait_for_port", lambda *a: True)
    host.start = [(1, "", TRACEBACK), (1, "", TRACEBACK)]
    code, out = run(capsys, worker(head))
    assert code == 1 and "\n" not in out["msg"] and "Traceback" not in out["msg"], out
    assert out["msg"].startswith("ray start failed on 10.0.0.11 (rc=1, started twice): the new raylet did not register")
    assert "Traceback" in out["stderr_tail"] and not os.path.exists(head["state_file"])


def test_a_timed_out_start_whose_head_never_answers_says_so(host, head, capsys, monkeypatch):
    monkeypatch.setattr(ray_node, "wait_for_port", lambda *a: False)
    host.start = [(1, "", TRACEBACK)]
    code, out = run(capsys, worker(head))
    assert code == 1 and "the head's GCS 10.0.0.10:6379 did not answer for 120s" in out["msg"], out
    assert [c[1] for c in host.commands[1:]] == ["start"]


def test_a_head_whose_start_timed_out_is_not_retried(host, head, capsys, monkeypatch):
    monkeypatch.setattr(ray_node, "wait_for_port", lambda *a: pytest.fail("a head waits for no head"))
    host.start = [(1, "", TRACEBACK)]
    code, out = run(capsys, head)
    assert code == 1 and out["msg"].startswith("ray start failed on 10.0.0.10 (rc=1): the new raylet"), out


def test_start_failure_finds_the_cause_never_the_traceback():
    assert ray_node.start_failure("a\nRuntimeError: no GCS at 1.2.3.4:6379\n  more\n") == \
        ("no GCS at 1.2.3.4:6379", False)
    assert ray_node.start_failure("just words\n") == ("just words", False)
    assert ray_node.start_failure("") == ("no output", False)
    assert ray_node.start_failure(TRACEBACK)[1] is True


def test_python_without_ray_fails_before_anything_runs(host, head, capsys):
    host.version = (1, "", "Traceback (most recent call last):\nModuleNotFoundError: No module named 'ray'\n")
    code, out = run(capsys, head)
    assert code == 1 and "has no Ray" in out["msg"] and "No module named 'ray'" in out["msg"]
    assert host.commands == [VERSION_PROBE]


def test_worker_without_head_ip_fails(host, head, capsys):
    code, out = run(capsys, {**head, "role": "worker"})
    assert code == 1 and out["msg"] == "a worker needs head_ip"


def test_socket_interface_goes_into_rays_environment_unless_env_sets_it(host, head, capsys):
    code, out = run(capsys, {**head, "socket_ifname": "eth7"})
    assert code == 0 and host.environs[1]["NCCL_SOCKET_IFNAME"] == "eth7"
    assert host.environs[1]["GLOO_SOCKET_IFNAME"] == "eth7"
    assert read_state(head)["env"]["NCCL_SOCKET_IFNAME"] == "eth7"
    code, out = run(capsys, {**head, "socket_ifname": "eth7", "env": {**head["env"], "NCCL_SOCKET_IFNAME": "ib0"},
                             "force": True})
    assert code == 0 and out["changes"] == ["env NCCL_SOCKET_IFNAME"]
    assert read_state(head)["env"]["NCCL_SOCKET_IFNAME"] == "ib0"


def test_a_bad_socket_interface_is_refused(host, head, capsys):
    code, out = run(capsys, {**head, "socket_ifname": "eth0; reboot"})
    assert code == 1 and out["msg"].startswith("ray_node_socket_ifname: must be auto") and host.commands == []
