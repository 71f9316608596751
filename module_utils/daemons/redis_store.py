"""A minimal Redis (RESP2) client to check the store Ray's GCS fault tolerance keeps the head's tables in.

Imported by modules as ansible.module_utils.daemons.redis_store (standard library only: the hosts it ships to
have no `redis` package). Every reply is bounded (MAX_REPLY bytes, MAX_DEPTH nesting, one deadline of
`timeout` seconds per command), and a check() as a whole by DEADLINE_S (each socket operation waits at most the
time left), so a peer that is not Redis, or a hostile or slow one, cannot make it hang or eat memory. Each failure
is a StoreError: one line naming host:port and the cause, never the password.
"""

import re
import socket
import time

MAX_REPLY = 1 << 20  # bytes one reply may take, all its parts together
MAX_DEPTH = 4  # nested arrays (SCAN's reply has two levels)
MAX_SCANS = 10000  # SCAN calls one namespace_keys makes at most (COUNT 1000 each)
# Seconds one check() may take, every command together: a peer answering each call just under `timeout` would
# otherwise hold a play for MAX_SCANS calls (13.9 h at 5 s), and an impostor on the store's port gets the password.
DEADLINE_S = 30.0
HIDDEN = "<redacted>"
_INTEGER = re.compile(r"-?[0-9]{1,19}")


class StoreError(Exception):
    """A store that cannot be checked. str() is one line, "Redis at host:port: cause"; `kind` is one of
    connect, timeout, deadline (the whole check's), auth (password refused), noauth (a password is needed),
    protocol, server; `answered` says whether a Redis replied (auth, noauth, server; a deadline's after PONG),
    i.e. one runs there. `found`: what check() had found when its deadline passed (else empty)."""

    def __init__(self, where, cause, kind, answered=None, found=None):
        super().__init__(" ".join(f"Redis at {where}: {cause}".split()))  # one line, whatever the host or user
        self.kind, self.found = kind, dict(found or {})
        self.answered = kind in ("auth", "noauth", "server") if answered is None else answered


class _ServerError(Exception):
    """An error reply (-CODE text), before it becomes a StoreError."""

    def __init__(self, text):
        super().__init__(text)
        self.text, self.code = text, text.split(" ", 1)[0]


class _Secret:
    """The password, so that no repr() or vars() of a client shows it."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return HIDDEN


def address(host, port):
    """host:port as messages name a store ([host]:port for an IPv6 address)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class StoreClient:
    """One connection, opened (and authenticated, when a password is given) by the first command. Each socket
    operation waits at most `timeout` seconds, and, with deadline_s, at most what is left of deadline_s seconds
    from now: past it, every command fails at once (StoreError kind deadline)."""

    def __init__(self, host, port, password=None, username="default", timeout=5.0, deadline_s=None):
        self.host, self.port, self.username, self.timeout = host, int(port), username or "default", float(timeout)
        if not 0 < self.port < 65536 or not self.timeout > 0:
            raise ValueError(f"port must be 1-65535 and timeout above 0 (got {self.port}, {self.timeout:g})")
        if deadline_s is not None and not float(deadline_s) > 0:
            raise ValueError(f"deadline_s must be above 0 (got {float(deadline_s):g})")
        self.deadline_s = None if deadline_s is None else float(deadline_s)
        self._end = None if deadline_s is None else time.monotonic() + self.deadline_s
        self.where = address(host, self.port)
        self._password = _Secret(password or None)
        self._sock, self._buf, self._deadline, self._budget, self._cut = None, b"", 0.0, 0, False
        self.scans = 0  # SCAN calls namespace_keys made, for what a check cut short says it found

    def __repr__(self):
        return f"StoreClient({self.where})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        sock, self._sock, self._buf = self._sock, None, b""
        if sock is not None:
            sock.close()

    def _scrub(self, text, limit=200):
        """Text from elsewhere (a reply, a command's name) as one short line that never repeats the password:
        hidden first, then shortened, so no cut leaves a part of it."""
        text, secret = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text), self._password.value
        text = " ".join((text.replace(secret, HIDDEN) if secret else text).split())
        return text if len(text) <= limit else text[:limit - 3] + "..."

    def _error(self, cause, kind, server_text=None):
        return StoreError(self.where, cause if server_text is None else f"{cause}: {self._scrub(server_text)}", kind)

    def _past_deadline(self):
        return self._error(f"the check did not finish within its deadline of {self.deadline_s:g}s", "deadline")

    def _wait(self):
        """(seconds the next socket operation may wait, whether the whole deadline is what bounds it)."""
        if self._end is None:
            return self.timeout, False
        left = self._end - time.monotonic()
        if left <= 0:
            self.close()
            raise self._past_deadline()
        return min(self.timeout, left), left < self.timeout

    def _connect(self):
        wait, self._cut = self._wait()
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=wait)
        except TimeoutError:
            if self._cut:
                raise self._past_deadline() from None
            raise self._error(f"timed out connecting after {self.timeout:g}s", "timeout") from None
        except OSError as exc:
            raise self._error(f"cannot connect ({exc.strerror or type(exc).__name__})", "connect") from None
        if self._password.value is None:
            return
        user = () if self.username == "default" else (self.username,)
        try:
            self._call(("AUTH", *user, self._password.value))
        except _ServerError as exc:
            self.close()
            low = exc.text.lower()
            if exc.code in ("WRONGPASS", "NOAUTH") or "invalid password" in low or "invalid username-password" in low:
                raise self._error(f"refused the password for user {self.username}", "auth") from None
            if "without any password configured" in low or "no password is set" in low:
                raise self._error("a password was given, but the store has none set", "auth") from None
            raise self._error("AUTH failed", "server", exc.text) from None

    def command(self, *args):
        """Send one command and return its reply: a str (None for nil), an int or a list; errors raise."""
        if self._sock is None:
            self._connect()
        try:
            return self._call(args)
        except _ServerError as exc:
            if exc.code == "NOAUTH" and self._password.value is None:
                raise self._error("needs a password (NOAUTH), none was given", "noauth") from None
            if exc.code in ("NOAUTH", "WRONGPASS"):
                raise self._error(f"refused the password for user {self.username}", "auth") from None
            raise self._error(self._scrub(args[0], 40), "server", exc.text) from None

    def _call(self, args):
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        payload = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        try:
            wait, self._cut = self._wait()
            self._deadline, self._budget = time.monotonic() + wait, MAX_REPLY
            self._sock.settimeout(wait)
            self._sock.sendall(payload)
            return self._reply(0)
        except _ServerError:
            raise  # the connection is still in step: the caller says what it means
        except TimeoutError:
            self.close()
            if self._cut:
                raise self._past_deadline() from None
            raise self._error(f"timed out after {self.timeout:g}s", "timeout") from None
        except StoreError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise self._error(f"connection failed ({exc.strerror or type(exc).__name__})", "connect") from None

    def _read(self, n=None):
        """n bytes (n=None: a line, without its CRLF), within the reply's byte budget and deadline."""
        while True:
            end = self._buf.find(b"\r\n") if n is None else (n if len(self._buf) >= n else -1)
            if end >= 0:
                data, self._buf = self._buf[:end], self._buf[end + (2 if n is None else 0):]
                return data
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if self._budget <= 0:
                raise self._error(f"sent a reply larger than {MAX_REPLY} bytes", "protocol")
            self._sock.settimeout(left)
            chunk = self._sock.recv(min(65536, self._budget))
            if not chunk:
                raise self._error("closed the connection in the middle of a reply", "protocol")
            self._budget -= len(chunk)
            self._buf += chunk

    def _reply(self, depth):
        line = self._read()
        kind, rest = line[:1], line[1:].decode("utf-8", "replace")
        if kind == b"+":
            return rest
        if kind == b"-":
            if depth:
                raise self._error("sent an error inside an array", "protocol", rest)
            raise _ServerError(rest)
        if kind not in (b":", b"$", b"*") or not _INTEGER.fullmatch(rest):
            raise self._error("sent a reply that is not RESP2", "protocol")
        number = int(rest)
        if kind == b":" or number < 0:
            return number if kind == b":" else None
        if kind == b"$":
            if number > MAX_REPLY:
                raise self._error(f"sent a reply larger than {MAX_REPLY} bytes", "protocol")
            data = self._read(number + 2)
            if data[-2:] != b"\r\n":
                raise self._error("sent a reply that is not RESP2 (a bad bulk string)", "protocol")
            return data[:-2].decode("utf-8", "replace")
        if depth >= MAX_DEPTH or number > MAX_REPLY // 4:
            raise self._error("sent a reply that is not RESP2 (too deep or too long an array)", "protocol")
        return [self._reply(depth + 1) for _ in range(number)]

    def ping(self):
        """True when the store answers PONG."""
        if self.command("PING") != "PONG":
            raise self._error("answered PING with something other than PONG", "protocol")
        return True

    def info(self, section=None):
        """INFO (one section, or the default ones) as {field: value}, every value a str."""
        text = self.command("INFO", section) if section else self.command("INFO")
        if not isinstance(text, str):
            raise self._error("sent an INFO reply that is not text", "protocol")
        lines = (line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))
        return {key: value for key, value in lines}

    def namespace_keys(self, namespace, limit=1):
        """How many keys Ray's GCS keeps for `namespace` (its tables are RAY<namespace>@<table>), counted up
        to `limit` (SCAN stops there). namespace=None counts the tables of any namespace."""
        found, cursor, pattern = set(), "0", table_pattern(namespace)
        for _ in range(MAX_SCANS):  # and each call within the client's deadline, if it has one
            reply = self.command("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            self.scans += 1
            if not (isinstance(reply, list) and len(reply) == 2 and isinstance(reply[0], str)
                    and isinstance(reply[1], list) and all(isinstance(k, str) for k in reply[1])):
                raise self._error("sent a SCAN reply that is not a cursor and keys", "protocol")
            cursor = reply[0]
            found.update(reply[1][:max(limit - len(found), 0)])
            if len(found) >= limit or cursor == "0":
                return len(found)
        raise self._error(f"SCAN did not finish within {MAX_SCANS} calls", "protocol")


def table_pattern(namespace):
    """SCAN's pattern for Ray's GCS tables of namespace (None: any namespace); its glob characters are literal."""
    if namespace is not None and "@" in namespace:
        raise ValueError("namespace: must not contain '@' (Ray refuses such a namespace)")
    return "RAY" + ("*" if namespace is None else "".join("\\" + c if c in "*?[]\\" else c for c in namespace)) + "@*"


def persistence_problem(host, port, found):
    """One line saying why the store check()ed as `found` does not persist Ray's tables, or None when it does."""
    if found["persistence_ok"]:
        return None
    why = "appendonly is off" if not found["aof_enabled"] else "its last AOF write or rewrite failed, or it is loading"
    return (f"Redis at {address(host, port)} does not persist Ray's tables: {why} "
            "(GCS fault tolerance needs appendonly yes)")


def check(host, port, password, namespace, username="default", timeout=5.0, deadline_s=DEADLINE_S):
    """The store as Ray's GCS fault tolerance needs it: reachable, its version, AOF on and its last writes
    succeeded (persistence_ok), and whether Ray keeps tables there (cluster_data: for namespace, or any).
    All of it within deadline_s seconds: past that, a StoreError (kind deadline) says what was found so far (also
    its `found`). Bad arguments (port, timeout, deadline_s, namespace) raise ValueError before anything is sent."""
    table_pattern(namespace)
    found = {}
    with StoreClient(host, port, password, username, timeout, deadline_s) as client:
        try:
            found["reachable"] = client.ping()
            server, persistence = client.info("server"), client.info("persistence")
            found["version"] = client._scrub(server.get("redis_version", "unknown"), 64)  # a peer's text
            found["aof_enabled"] = aof = persistence.get("aof_enabled") == "1"
            statuses = ("aof_last_write_status", "aof_last_bgrewrite_status")
            found["persistence_ok"] = (aof and persistence.get("loading", "0") == "0"
                                       and all(persistence.get(s, "ok") == "ok" for s in statuses))
            found["cluster_data"] = client.namespace_keys(namespace, limit=1) > 0
        except StoreError as exc:
            if exc.kind != "deadline":
                raise
            cause = (f"the check did not finish within its deadline of {client.deadline_s:g}s; found so far: "
                     f"{_so_far(found, client.scans, namespace)}")
            raise StoreError(client.where, cause, "deadline", answered="reachable" in found, found=found) from None
        return found


def _so_far(found, scans, namespace):
    """What a check cut short by its deadline had found, in words (of a reply's text only the version, scrubbed)."""
    if "reachable" not in found:
        return "nothing (no reply yet)"
    if "version" not in found:
        return "a PONG, no INFO yet"
    aof, kept = "on" if found["aof_enabled"] else "off", "ok" if found["persistence_ok"] else "NOT OK"
    where = "any namespace" if namespace is None else f"namespace {namespace}"
    return (f"Redis {found['version']}, append-only file {aof}, persistence {kept}, no Ray tables of {where} in "
            f"{scans} SCAN call{'s' if scans != 1 else ''} (cluster_data unknown)")
