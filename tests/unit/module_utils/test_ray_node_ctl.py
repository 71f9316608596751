"""module_utils/node/ray_node.py: the start command, the fingerprint, the decision table, /proc scanning."""

import os
import subprocess
import sys

import pytest
from ansible.module_utils.node import probe as node_probe
from ansible.module_utils.node import ray_node


def test_head_command_has_no_cpus_no_gpus_and_binds_dashboard_to_node():
    argv = ray_node.start_command("/v/bin/ray", "head", "10.0.0.10", 6379)
    assert argv[:2] == ["/v/bin/ray", "start"]
    for arg in ("--head", "--num-cpus=0", "--num-gpus=0", "--node-ip-address=10.0.0.10",
                "--dashboard-host=10.0.0.10", "--port=6379", "--ray-client-server-port=10001"):
        assert arg in argv


def test_worker_command_joins_head_with_resources():
    argv = ray_node.start_command("ray", "worker", "10.0.0.11", 6379, head_ip="10.0.0.10", num_cpus=8,
                             num_gpus=4, resources={"worker_node": 1})
    assert "--address=10.0.0.10:6379" in argv
    assert "--num-gpus=4" in argv and "--num-cpus=8" in argv
    assert '--resources={"worker_node":1}' in argv
    assert "--head" not in argv


def test_worker_without_head_and_bad_role_are_errors():
    with pytest.raises(ValueError, match="head_ip"):
        ray_node.start_command("ray", "worker", "1.2.3.4", 6379)
    with pytest.raises(ValueError, match="role"):
        ray_node.start_command("ray", "boss", "1.2.3.4", 6379)


def test_fingerprint_changes_with_args_env_and_version():
    base = ray_node.fingerprint(["a"], {"X": "1"}, "2.60.0")
    assert base == ray_node.fingerprint(["a"], {"X": "1"}, "2.60.0")
    assert base != ray_node.fingerprint(["b"], {"X": "1"}, "2.60.0")
    assert base != ray_node.fingerprint(["a"], {"X": "2"}, "2.60.0")
    assert base != ray_node.fingerprint(["a"], {"X": "1"}, "2.61.0")


@pytest.mark.parametrize("running,state,legacy,restart,want", [
    (False, None, False, False, "start"),
    (False, {"fingerprint": "f"}, False, False, "start"),
    (True, {"fingerprint": "f"}, False, False, "none"),
    (True, {"fingerprint": "old"}, False, False, "restart"),
    (True, None, False, False, "refuse_legacy"),
    (True, None, True, False, "restart"),
    (True, {"fingerprint": "f"}, False, True, "restart"),
])
def test_plan(running, state, legacy, restart, want):
    action, reason = ray_node.plan(running, state, "f", legacy, restart)
    assert action == want
    assert reason


def test_died_node_is_reported_as_rejoining():
    assert ray_node.plan(False, {"fingerprint": "f"}, "f", False)[1] == "Ray died; rejoining"


def test_a_new_token_changes_the_fingerprint_and_is_named():
    assert ray_node.fingerprint(["a"], {}, "2.60.0", "d1") != ray_node.fingerprint(["a"], {}, "2.60.0", "d2")
    assert ray_node.fingerprint(["a"], {}, "2.60.0") == ray_node.fingerprint(["a"], {}, "2.60.0", None)
    assert ray_node.diff_state({"token_digest": "d1"}, {"token_digest": "d2"}) == ["token"]


def test_diff_state_names_what_changed():
    old = {"argv": ["ray", "--num-gpus=4"], "env": {"A": "1"}, "ray_version": "2.59.0"}
    new = {"argv": ["ray", "--num-gpus=2"], "env": {"A": "2"}, "ray_version": "2.60.0"}
    changes = ray_node.diff_state(old, new)
    assert "ray 2.59.0 -> 2.60.0" in changes
    assert "-" + "--num-gpus=4" in changes and "+--num-gpus=2" in changes
    assert "env A" in changes
    assert ray_node.diff_state(None, new) == []


def test_state_round_trip(tmp_path):
    path = str(tmp_path / "sub" / "node.json")
    assert ray_node.read_state(path) is None
    ray_node.write_state(path, {"fingerprint": "x"})
    assert ray_node.read_state(path) == {"fingerprint": "x"}
    (tmp_path / "sub" / "node.json").write_text("{broken")
    assert ray_node.read_state(path) is None


def test_finds_raylets_and_drivers_in_a_fake_proc(tmp_path):
    def proc(pid, comm, environ=b""):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "comm").write_bytes(comm + b"\n")
        (d / "environ").write_bytes(environ)
    proc(10, b"raylet")
    proc(11, b"python", b"PATH=/bin\0RAY_JOB_CONFIG_JSON_ENV_VAR={}\0")
    proc(12, b"python", b"RAY_JOB_CONFIG_JSON_ENV_VAR={}\0")
    proc(13, b"bash", b"PATH=/bin\0NOT_RAY_JOB_CONFIG_JSON_ENV_VAR=1\0")
    (tmp_path / "self").mkdir()
    assert ray_node.find_raylets(str(tmp_path)) == [10]
    assert ray_node.find_job_drivers(str(tmp_path), own_pid=1) == [11, 12]
    assert ray_node.find_job_drivers(str(tmp_path), own_pid=12) == [11]


def test_kill_pids_ends_a_real_process_group():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert ray_node.kill_pids([child.pid]) == [child.pid]
        assert child.wait(timeout=10) < 0
    finally:
        if child.poll() is None:
            child.kill()
    assert ray_node.kill_pids([child.pid]) == []
    assert os.getpid()  # our own process is untouched


def test_process_environ_reads_a_processes_environment(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "environ").write_bytes(b"A=1\0B=x=y\0junk\0")
    assert ray_node.process_environ(42, str(tmp_path)) == {"A": "1", "B": "x=y"}
    assert ray_node.process_environ(7, str(tmp_path)) == {}


def test_the_debugger_is_never_opened_on_every_interface():
    with pytest.raises(ValueError, match="--ray-debugger-external would open the debugger on every interface"):
        ray_node.start_command("/v/bin/ray", "worker", "10.0.0.11", 6379, head_ip="10.0.0.10",
                          extra_args=["--ray-debugger-external"])


def test_socket_interface_is_a_name_or_the_one_that_reaches_the_target(monkeypatch):
    monkeypatch.setattr(node_probe.shutil, "which", lambda name, path=None: f"/usr/sbin/{name}")
    monkeypatch.setattr(node_probe, "source_address", lambda addr: (_ for _ in ()).throw(OSError("unreachable")))
    run = lambda argv: {("/usr/sbin/ip", "route", "get", "10.0.0.10"): (0, "10.0.0.10 dev eth0 src 10.0.0.11\n", "")
                        }.get(tuple(argv), (2, "", "RTNETLINK answers: Network is unreachable"))
    assert ray_node.socket_interface(run, "ib0", "10.0.0.10") == "ib0"
    assert ray_node.socket_interface(run, "auto", "10.0.0.10") == "eth0"
    with pytest.raises(ValueError, match="^no interface reaches 10.9.9.9 from this node"):
        ray_node.socket_interface(run, "auto", "10.9.9.9")
    with pytest.raises(ValueError, match="^ray_node_socket_ifname: must be auto, empty or an interface name"):
        ray_node.socket_interface(run, "eth0; reboot", "10.0.0.10")


def test_keep_token_writes_it_0600_once_and_not_in_check_mode(tmp_path):
    path = str(tmp_path / "etc" / "token")
    assert ray_node.keep_token("t1", path, check_mode=True) is True and not os.path.exists(path)
    assert ray_node.keep_token("t1", path) is True and os.stat(path).st_mode & 0o777 == 0o600
    assert ray_node.keep_token("t1", path) is False
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == "t1\n"


def test_run_env_puts_the_ray_venv_first_on_path():
    env = ray_node.run_env("/opt/ray/bin/python", {"RAY_AUTH_MODE": "token", "N": 1})
    assert env["PATH"].startswith("/opt/ray/bin" + os.pathsep) and env["RAY_AUTH_MODE"] == "token" and env["N"] == "1"


def test_a_failed_ray_stop_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match="^ray stop failed: no permission$"):
        ray_node.stop(lambda argv, environ_update=None: (1, "", "no permission\n"), "/opt/ray/bin/ray", {}, False)


def test_a_one_box_head_offers_the_workers_cpus_gpus_and_resources():
    argv = ray_node.start_command("ray", "head", "10.0.0.10", 6379, num_cpus=16, num_gpus=8,
                                  resources={"worker_node": 1}, carries_work=True)
    assert "--num-cpus=16" in argv and "--num-gpus=8" in argv and '--resources={"worker_node":1}' in argv
    assert "--num-cpus=0" not in argv and "--num-gpus=0" not in argv and "--head" in argv
    # Ray counts the CPUs when the site does not say; a head of its own offers nothing whatever it is given.
    assert not [a for a in ray_node.start_command("ray", "head", "10.0.0.10", 6379, num_gpus=8, carries_work=True)
                if a.startswith("--num-cpus")]
    alone = ray_node.start_command("ray", "head", "10.0.0.10", 6379, num_cpus=16, num_gpus=8)
    assert "--num-cpus=0" in alone and "--num-gpus=0" in alone
