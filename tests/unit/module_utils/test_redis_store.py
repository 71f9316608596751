"""module_utils/daemons/redis_store.py against a real redis-server (and, for replies no Redis sends, a fake peer).

The servers listen on 127.0.0.1 only, on a free port, started by `redis_servers` and killed by PID at
teardown (tests/unit/conftest.py, over tests/unit/redis_harness.py; tests/unit/library/test_ray_store_info.py uses
the same fixtures).
"""

import re
import time

import pytest
from ansible.module_utils.daemons import redis_store as rs
from redis_harness import LOCAL, PASSWORD, free_port, slow_redis


def error_of(call, *args, **kwargs):
    with pytest.raises(rs.StoreError) as caught:
        call(*args, **kwargs)
    return caught.value


def assert_one_line_without_password(exc, where):
    text = str(exc)
    assert "\n" not in text and text.startswith(f"Redis at {where}: "), text
    assert PASSWORD not in text and all(PASSWORD not in str(a) for a in exc.args), text


# --- a real Redis


def test_check_with_the_right_password(redis):
    result = rs.check(LOCAL, redis.port, PASSWORD, "abc")
    assert re.fullmatch(r"\d+\.\d+\.\d+", result.pop("version"))
    assert result == {"reachable": True, "aof_enabled": True, "persistence_ok": True, "cluster_data": False}


def test_ping_info_and_repr(redis):
    with redis.client() as client:
        assert client.ping() is True
        info = client.info("server")
        assert info["tcp_port"] == str(redis.port) and info["redis_version"]
        assert client.info()["aof_enabled"] == "1"  # the default sections include persistence
        assert repr(client) == f"StoreClient({LOCAL}:{redis.port})"
        assert PASSWORD not in repr(client) and PASSWORD not in repr(vars(client))
    assert client._sock is None  # closed by the context manager


def test_the_wrong_password_is_refused(redis):
    exc = error_of(rs.check, LOCAL, redis.port, "not-" + PASSWORD, "abc")
    assert exc.kind == "auth" and "refused the password" in str(exc)
    assert "not-" not in str(exc)


def test_no_password_where_one_is_needed(redis):
    exc = error_of(rs.check, LOCAL, redis.port, None, "abc")
    assert exc.kind == "noauth" and "needs a password" in str(exc)


def test_an_unknown_acl_user_is_refused(redis):
    exc = error_of(rs.check, LOCAL, redis.port, PASSWORD, None, username="nobody")
    assert exc.kind == "auth" and "refused the password for user nobody" in str(exc)
    assert_one_line_without_password(exc, f"{LOCAL}:{redis.port}")


def test_a_password_for_a_store_without_one(redis_servers):
    server = redis_servers(password=None)
    assert rs.check(LOCAL, server.port, None, None)["reachable"] is True
    exc = error_of(rs.check, LOCAL, server.port, PASSWORD, None)
    assert exc.kind == "auth" and "the store has none set" in str(exc)
    assert_one_line_without_password(exc, f"{LOCAL}:{server.port}")


def test_a_closed_port_cannot_connect():
    port = free_port()  # bound, then closed: nothing listens there
    exc = error_of(rs.check, LOCAL, port, PASSWORD, "abc")
    assert exc.kind == "connect" and str(exc) == f"Redis at {LOCAL}:{port}: cannot connect (Connection refused)"


def test_aof_off_and_on(redis_servers):
    off = redis_servers(appendonly=False)
    result = rs.check(LOCAL, off.port, PASSWORD, None)
    assert result["aof_enabled"] is False and result["persistence_ok"] is False
    with off.client() as client:
        assert client.command("CONFIG", "SET", "appendonly", "yes") == "OK"
        deadline = time.monotonic() + 10  # turning AOF on rewrites it in the background
        while client.info("persistence").get("aof_rewrite_in_progress") != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
    result = rs.check(LOCAL, off.port, PASSWORD, None)
    assert result["aof_enabled"] is True and result["persistence_ok"] is True


def test_namespace_keys_present_and_absent(redis):
    with redis.client() as client:
        assert client.namespace_keys("abc") == 0 and client.namespace_keys(None) == 0
        assert client.command("HSET", "RAYabc@JobTable", "job1", "x") == 1
        client.command("HSET", "RAYabc@NodeTable", "n1", "x")
        client.command("HSET", "RAYabcd@JobTable", "job1", "x")  # another namespace, sharing a prefix
        client.command("SET", "unrelated", "x")
        assert client.namespace_keys("abc") == 1  # stops at limit=1
        assert client.namespace_keys("abc", limit=10) == 2
        assert client.namespace_keys("ab", limit=10) == 0
        assert client.namespace_keys("a*", limit=10) == 0  # glob characters in a namespace are literal
        assert client.namespace_keys(None, limit=10) == 3
        with pytest.raises(ValueError, match="must not contain '@'"):
            client.namespace_keys("a@b")
    assert rs.check(LOCAL, redis.port, PASSWORD, "abc")["cluster_data"] is True
    assert rs.check(LOCAL, redis.port, PASSWORD, "xyz")["cluster_data"] is False
    assert rs.check(LOCAL, redis.port, PASSWORD, None)["cluster_data"] is True


def test_a_server_error_is_one_short_line_and_never_echoes_the_password(redis):
    with redis.client() as client:
        exc = error_of(client.command, "NOSUCHCOMMAND", PASSWORD, "x" * 5000)  # Redis repeats the arguments
        assert exc.kind == "server" and "NOSUCHCOMMAND: ERR unknown command" in str(exc)
        assert len(str(exc)) < 300 and rs.HIDDEN in str(exc)
        assert_one_line_without_password(exc, f"{LOCAL}:{redis.port}")
        assert client.ping() is True  # the connection is still usable after an error reply
        exc = error_of(client.command, PASSWORD.encode(), "x")  # even as the command's name
        assert exc.kind == "server" and str(exc).startswith(f"Redis at {LOCAL}:{redis.port}: {rs.HIDDEN}: ERR unknown")
        assert_one_line_without_password(exc, f"{LOCAL}:{redis.port}")


# --- peers that are not (well-behaved) Redis


@pytest.mark.parametrize("reply, cause", [
    (b"$2000000\r\n", "larger than 1048576 bytes"),  # a bulk string it says is huge
    (b"+" + b"a" * 1_500_000, "larger than 1048576 bytes"),  # a line that never ends
    (b"*3\r\n" + (b"$600000\r\n" + b"x" * 600000 + b"\r\n") * 3, "larger than 1048576 bytes"),
    (b"*1\r\n" * 10 + b":1\r\n", "too deep"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not RESP2"),
    (b"$1_0\r\n0123456789\r\n", "not RESP2"),
    (b"$3\r\nabcde\r\n", "a bad bulk string"),
    (b"$10\r\nabc", "closed the connection"),
    (b"*2\r\n-ERR inside\r\n:1\r\n", "an error inside an array"),
])
def test_a_huge_or_garbage_reply_is_an_error(fake_peer, reply, cause):
    peer = fake_peer(reply, close=cause == "closed the connection")
    client = rs.StoreClient(LOCAL, peer.port, timeout=3.0)
    started = time.monotonic()
    exc = error_of(client.ping)
    assert exc.kind == "protocol" and cause in str(exc), str(exc)
    assert time.monotonic() - started < 3 and client._sock is None  # answered at once, connection dropped


def test_a_silent_or_slow_peer_times_out(fake_peer):
    silent = fake_peer(b"")
    exc = error_of(rs.StoreClient(LOCAL, silent.port, timeout=0.3).ping)
    assert exc.kind == "timeout" and str(exc) == f"Redis at {LOCAL}:{silent.port}: timed out after 0.3s"

    def drip(conn, stop):  # a byte at a time, each well within the timeout: the deadline still holds
        conn.sendall(b"$100\r\n")
        while not stop.wait(0.05):
            conn.sendall(b"x")

    slow = fake_peer(drip)
    started = time.monotonic()
    exc = error_of(rs.StoreClient(LOCAL, slow.port, timeout=0.5).ping)
    assert exc.kind == "timeout" and time.monotonic() - started < 2


# --- one deadline for the whole check


def test_a_peer_answering_each_call_just_under_the_timeout_is_cut_at_the_deadline(fake_peer):
    """Without the deadline this check would take MAX_SCANS calls of 0.2 s each (33 min): it says where it stopped."""
    peer = fake_peer(slow_redis(0.2, password=True))
    exc = error_of(rs.check, LOCAL, peer.port, PASSWORD, "abc", timeout=0.5, deadline_s=2)
    assert exc.kind == "deadline" and exc.answered is True, str(exc)
    assert str(exc).startswith(f"Redis at {LOCAL}:{peer.port}: the check did not finish within its deadline of 2s; "
                               "found so far: Redis 7.0.15, append-only file on, persistence ok, no Ray tables of "
                               "namespace abc in "), str(exc)
    scans = int(re.search(r" in (\d+) SCAN calls? \(cluster_data unknown\)$", str(exc)).group(1))
    assert 0 < scans < rs.MAX_SCANS
    assert exc.found == {"reachable": True, "version": "7.0.15", "aof_enabled": True, "persistence_ok": True}
    assert_one_line_without_password(exc, f"{LOCAL}:{peer.port}")
    assert PASSWORD.encode() in peer.received  # AUTH went first: the reason an impostor must not hold the play


def test_the_deadline_bounds_a_reply_that_the_per_call_timeout_would_still_wait_for(fake_peer):
    silent = fake_peer(b"")
    exc = error_of(rs.check, LOCAL, silent.port, PASSWORD, None, timeout=60, deadline_s=0.5)
    assert exc.kind == "deadline" and exc.answered is False and exc.found == {}
    assert str(exc) == (f"Redis at {LOCAL}:{silent.port}: the check did not finish within its deadline of 0.5s; "
                        "found so far: nothing (no reply yet)")


def test_past_its_deadline_a_client_sends_nothing():
    client = rs.StoreClient(LOCAL, free_port(), PASSWORD, deadline_s=0.05)  # nothing listens there
    time.sleep(0.1)
    exc = error_of(client.ping)  # not "cannot connect": it did not try
    assert exc.kind == "deadline" and str(exc).endswith("did not finish within its deadline of 0.05s")


def test_a_paused_real_redis_is_cut_at_the_deadline_and_checked_once_it_answers(redis):
    with redis.client() as admin:  # every client waits 1.5 s, this one too: a slow store
        assert admin.command("CLIENT", "PAUSE", 1500, "ALL") == "OK"
    exc = error_of(rs.check, LOCAL, redis.port, PASSWORD, "abc", deadline_s=0.5)
    assert exc.kind == "deadline" and "deadline of 0.5s; found so far: nothing" in str(exc)
    assert_one_line_without_password(exc, f"{LOCAL}:{redis.port}")
    assert rs.check(LOCAL, redis.port, PASSWORD, "abc", deadline_s=rs.DEADLINE_S)["persistence_ok"] is True


def test_a_version_that_repeats_the_password_is_hidden(fake_peer):
    info = f"redis_version:{PASSWORD}\r\naof_enabled:1\r\n".encode()
    bulk = b"$%d\r\n%s\r\n" % (len(info), info)

    def echo(conn, stop):  # AUTH, PING, INFO, INFO, SCAN
        for reply in (b"+OK\r\n", b"+PONG\r\n", bulk, bulk, b"*2\r\n$1\r\n0\r\n*0\r\n"):
            conn.sendall(reply)
            conn.recv(65536)

    assert rs.check(LOCAL, fake_peer(echo).port, PASSWORD, None, timeout=2)["version"] == rs.HIDDEN


def test_a_peer_that_repeats_the_password_never_gets_it_shown(fake_peer):
    peer = fake_peer(f"-ERR odd AUTH {PASSWORD} rejected\r\n".encode())
    client = rs.StoreClient(LOCAL, peer.port, password=PASSWORD, timeout=2.0)
    exc = error_of(client.ping)
    assert exc.kind == "server" and "AUTH failed: ERR odd AUTH <redacted> rejected" in str(exc)
    assert_one_line_without_password(exc, f"{LOCAL}:{peer.port}")
    assert PASSWORD.encode() in peer.received  # it was sent, as AUTH's argument, and only there


def test_a_long_reply_is_shortened_after_the_password_is_hidden(fake_peer):
    """Shortening first could cut the password in two and leave its start in the message."""
    peer = fake_peer(("-ERR " + "y" * 180 + PASSWORD + "z" * 50 + "\r\n").encode())
    exc = error_of(rs.StoreClient(LOCAL, peer.port, password=PASSWORD, timeout=2.0).ping)
    assert PASSWORD[:6] not in str(exc) and rs.HIDDEN in str(exc) and str(exc).endswith("...")


def test_the_password_is_nowhere_in_results_or_errors(redis):
    found = []
    for password in (PASSWORD, "wrong " + PASSWORD, None):
        try:
            found.append(repr(rs.check(LOCAL, redis.port, password, "abc")))
        except rs.StoreError as exc:
            found += [str(exc), repr(exc), repr(exc.args), repr(vars(exc))]
    client = redis.client()
    found += [repr(client), repr(vars(client)), str(vars(client))]
    assert len(found) >= 9 and not [text for text in found if PASSWORD in text]


def test_bad_arguments_raise_before_anything_is_sent():
    port = free_port()  # nothing listens: a ValueError, not "cannot connect", shows nothing was tried
    with pytest.raises(ValueError, match="must not contain '@'"):
        rs.check(LOCAL, port, PASSWORD, "a@b")
    for bad_port, timeout in ((0, 1.0), (65536, 1.0), (port, 0)):
        with pytest.raises(ValueError, match="port must be 1-65535 and timeout above 0"):
            rs.StoreClient(LOCAL, bad_port, PASSWORD, timeout=timeout)
    for deadline_s in (0, -1):
        with pytest.raises(ValueError, match="deadline_s must be above 0"):
            rs.check(LOCAL, port, PASSWORD, None, deadline_s=deadline_s)
    assert rs.table_pattern("a*b?[c]\\") == "RAYa\\*b\\?\\[c\\]\\\\@*" and rs.table_pattern(None) == "RAY*@*"


def test_ipv6_addresses_are_bracketed():
    assert rs.address("::1", 6379) == "[::1]:6379" and rs.address("10.0.0.5", 6379) == "10.0.0.5:6379"


def test_an_error_is_one_line_whatever_the_user_name(redis):
    exc = error_of(rs.check, LOCAL, redis.port, PASSWORD, None, username="two\nlines")
    assert exc.kind == "auth" and str(exc) == f"Redis at {LOCAL}:{redis.port}: refused the password for user two lines"
