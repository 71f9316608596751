"""library/ray_store_info.py run as Ansible runs it, against a real redis-server on 127.0.0.1.

The servers and the fake peer are the redis_store tests' own: the fixtures redis_servers, redis and fake_peer
(tests/unit/conftest.py) over tests/unit/redis_harness.py.
"""

import json

import pytest
import ray_store_info
from ansible.module_utils.testing import patch_module_args
from redis_harness import LOCAL, PASSWORD, free_port, slow_redis

KEYS = {"reachable", "version", "aof_enabled", "persistence_ok", "cluster_data"}


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ray_store_info.main()
    text = capsys.readouterr().out
    assert PASSWORD not in text  # never, whatever happened
    return exc.value.code, json.loads(text)


def one_line(out):
    assert "\n" not in out["msg"], out["msg"]
    return out["msg"]


def test_ok_with_the_password_or_its_file(redis, capsys, tmp_path):
    code, out = run(capsys, {"host": LOCAL, "port": redis.port, "password": PASSWORD, "namespace": "abc"})
    assert code == 0 and out["changed"] is False and KEYS <= set(out)
    assert out["aof_enabled"] is out["persistence_ok"] is out["reachable"] is True and out["cluster_data"] is False
    secret = tmp_path / "redis_password"
    secret.write_text(PASSWORD + "\n")
    code, out = run(capsys, {"host": LOCAL, "port": redis.port, "password_file": str(secret)})
    assert code == 0 and out["persistence_ok"] is True


def test_check_mode_reads_the_same(redis, capsys):
    code, out = run(capsys, {"host": LOCAL, "port": redis.port, "password": PASSWORD, "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is False and out["reachable"] is True


def test_the_wrong_password_fails_in_one_line(redis, capsys, tmp_path):
    code, out = run(capsys, {"host": LOCAL, "port": redis.port, "password": "x" + PASSWORD})
    assert code == 1 and one_line(out) == f"Redis at {LOCAL}:{redis.port}: refused the password for user default"
    assert out["reachable"] is True  # a Redis runs there: it refused the password
    wrong = tmp_path / "pw"
    wrong.write_text("nope-" + PASSWORD)
    code, out = run(capsys, {"host": LOCAL, "port": redis.port, "password_file": str(wrong)})
    assert code == 1 and "refused the password" in one_line(out) and "nope-" not in json.dumps(out)


def test_no_password_where_one_is_needed(redis, capsys):
    code, out = run(capsys, {"host": LOCAL, "port": redis.port})
    assert code == 1 and "needs a password" in one_line(out) and out["reachable"] is True


def test_an_unreachable_port(capsys):
    port = free_port()
    code, out = run(capsys, {"host": LOCAL, "port": port, "password": PASSWORD})
    assert code == 1 and one_line(out) == f"Redis at {LOCAL}:{port}: cannot connect (Connection refused)"
    assert out["reachable"] is False


def test_aof_off_fails_unless_only_reported(redis_servers, capsys):
    off = redis_servers(appendonly=False)
    args = {"host": LOCAL, "port": off.port, "password": PASSWORD}
    code, out = run(capsys, args)
    assert code == 1 and "appendonly is off" in one_line(out) and out["aof_enabled"] is False
    assert out["reachable"] is True and out["persistence_ok"] is False
    code, out = run(capsys, {**args, "require_persistence": False})
    assert code == 0 and out["aof_enabled"] is False and out["persistence_ok"] is False


def test_namespace_keys_present_and_absent(redis, capsys):
    args = {"host": LOCAL, "port": redis.port, "password": PASSWORD}
    assert run(capsys, {**args, "namespace": "abc"})[1]["cluster_data"] is False
    with redis.client() as client:
        client.command("HSET", "RAYabc@JobTable", "job1", "x")
    assert run(capsys, {**args, "namespace": "abc"})[1]["cluster_data"] is True
    assert run(capsys, {**args, "namespace": "other"})[1]["cluster_data"] is False
    assert run(capsys, args)[1]["cluster_data"] is True  # any namespace
    code, out = run(capsys, {**args, "namespace": "a@b"})
    assert code == 1 and "must not contain '@'" in one_line(out) and out["reachable"] is False


@pytest.mark.parametrize("option, value", [("port", 0), ("port", 70000), ("timeout_s", 0)])
def test_options_out_of_range_fail_before_connecting(capsys, option, value):
    code, out = run(capsys, {"host": LOCAL, option: value})
    assert code == 1 and "port must be 1-65535 and timeout above 0" in one_line(out) and out["reachable"] is False
    code, out = run(capsys, {"host": LOCAL, "port": free_port(), "deadline_s": -1})
    assert code == 1 and one_line(out) == "deadline_s must be above 0 (got -1)" and out["reachable"] is False


def test_a_store_too_slow_for_the_deadline_fails_naming_it_with_what_was_found(fake_peer, capsys):
    peer = fake_peer(slow_redis(0.2, password=True))
    args = {"host": LOCAL, "port": peer.port, "password": PASSWORD, "namespace": "abc", "timeout_s": 0.5}
    code, out = run(capsys, {**args, "deadline_s": 1.5})
    assert code == 1 and one_line(out).startswith(f"Redis at {LOCAL}:{peer.port}: the check did not finish within "
                                                  "its deadline of 1.5s; found so far: Redis 7.0.15"), out["msg"]
    assert out["reachable"] is True and out["version"] == "7.0.15" and "cluster_data" not in out


def test_a_garbage_peer_fails_in_one_line(fake_peer, capsys):
    peer = fake_peer(b"$99999999\r\n")
    code, out = run(capsys, {"host": LOCAL, "port": peer.port, "password": PASSWORD, "timeout_s": 2})
    assert code == 1 and one_line(out) == f"Redis at {LOCAL}:{peer.port}: sent a reply larger than 1048576 bytes"
    assert out["reachable"] is False  # what answered is not Redis


def test_a_peer_repeating_the_password_never_shows_it(fake_peer, capsys):
    peer = fake_peer(f"-ERR you said {PASSWORD}\r\n".encode())
    code, out = run(capsys, {"host": LOCAL, "port": peer.port, "password": PASSWORD, "timeout_s": 2})
    assert code == 1 and "AUTH failed: ERR you said" in one_line(out)


def test_password_inputs(capsys, tmp_path):
    both = {"host": LOCAL, "password": PASSWORD, "password_file": str(tmp_path / "pw")}
    code, out = run(capsys, both)
    assert code == 1 and "mutually exclusive" in out["msg"]
    code, out = run(capsys, {"host": LOCAL, "password_file": str(tmp_path / "missing")})
    missing = tmp_path / "missing"
    assert code == 1 and one_line(out) == f"password_file {missing}: cannot read it (No such file or directory)"
    (tmp_path / "empty").write_text("\n")
    code, out = run(capsys, {"host": LOCAL, "password_file": str(tmp_path / "empty")})
    assert code == 1 and one_line(out).endswith(": is empty")
