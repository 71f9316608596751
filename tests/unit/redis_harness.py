"""A real redis-server on 127.0.0.1 and a fake peer for replies no Redis sends, for the tests of
module_utils/daemons/redis_store.py (module_utils/test_redis_store.py) and library/ray_store_info.py
(library/test_ray_store_info.py). The fixtures that start and stop them are in conftest.py: redis_servers, redis,
fake_peer."""

import itertools
import os
import socket
import subprocess
import threading
import time

import pytest
from ansible.module_utils.daemons import redis_store as rs

REDIS_SERVER = "/usr/bin/redis-server"
PASSWORD = "Pw-7f3Qz!horse battery"  # distinctive, so a leak anywhere is found by searching for it
LOCAL = "127.0.0.1"


def free_port():
    with socket.socket() as probe:
        probe.bind((LOCAL, 0))
        return probe.getsockname()[1]


class RedisServer:
    """One redis-server on 127.0.0.1 (no daemon, nothing saved but the AOF in `folder`)."""

    def __init__(self, folder, password=PASSWORD, appendonly=True):
        self.password = password
        for _attempt in range(3):  # another process may take the free port before redis-server binds it
            self.port = free_port()
            args = [REDIS_SERVER, "--port", str(self.port), "--bind", LOCAL, "--daemonize", "no", "--save", "",
                    "--appendonly", "yes" if appendonly else "no", "--dir", str(folder), "--logfile", ""]
            if password:
                args += ["--requirepass", password]
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_until_ready():
                return
            self.stop()
        pytest.fail(f"redis-server did not start on {LOCAL} (last port {self.port})")

    def _wait_until_ready(self, limit_s=10.0):
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with self.client() as client:
                    return client.ping()
            except rs.StoreError:
                time.sleep(0.02)
        return False

    def client(self, **kwargs):
        return rs.StoreClient(LOCAL, self.port, self.password, timeout=2.0, **kwargs)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, 15)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, 9)
                self.proc.wait(5)


def slow_redis(delay_s, password=False):
    """A FakePeer reply: a Redis that answers each command after delay_s (just under a client's timeout): AUTH (with
    password), PING, INFO twice, then SCAN for ever, its cursor never back to 0 (as over a store of many keys)."""
    info = b"# Server\r\nredis_version:7.0.15\r\naof_enabled:1\r\n"
    replies = [b"+OK\r\n"] * password + [b"+PONG\r\n"] + [b"$%d\r\n%s\r\n" % (len(info), info)] * 2

    def serve(conn, stop):
        conn.settimeout(10)
        for n in itertools.count():  # the first request was read by FakePeer; each later one before its answer
            if stop.wait(delay_s):
                return
            conn.sendall(replies[n] if n < len(replies) else b"*2\r\n$2\r\n42\r\n*0\r\n")
            if not conn.recv(65536):
                return

    return serve


class FakePeer:
    """A TCP peer on 127.0.0.1 that answers the first request with `reply` (bytes, or a callable that sends),
    then stays silent (or closes the connection, with close=True)."""

    def __init__(self, reply, close=False):
        self.reply, self.close_after, self.received = reply, close, b""
        self.listener = socket.create_server((LOCAL, 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            try:
                self.received += conn.recv(65536)
                if callable(self.reply):
                    self.reply(conn, self.stopped)
                else:
                    conn.sendall(self.reply)
                if not self.close_after:
                    self.stopped.wait(10)
            except OSError:
                pass  # the client gave up and closed: what the test wants

    def close(self):
        self.stopped.set()
        self.listener.close()
        self.thread.join(10)
