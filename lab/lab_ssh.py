"""Reaching the lab's hosts over ssh from the control host: the key, the client's argv, readiness, masters.

``ensure_keys`` makes the lab's client key pair (``lab_facts.ssh_key``) and the authorized_keys every
host's sshd reads; ``ssh_argv`` is how the lab's tools reach a host as root, whatever the user's
~/.ssh/config says; ``wait_ready`` waits until every host accepts a login; ``close_control_masters``
ends Ansible's ControlPersist masters to hosts that go away.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from lab_facts import LAB_DIR, Host, LabError, log, run, ssh_key
from lab_files import write_if_changed
from lab_host import pid_is_ours

ANSIBLE_CP_DIR = Path.home() / ".ansible" / "cp"
WAIT_TIMEOUT = 20.0


def ensure_keys() -> Path:
    """Client key pair, generated once and reused while .lab exists."""
    key = ssh_key()
    ssh_dir = key.parent
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab-client", "-f", str(key)], "ssh key")
    pub_file = key.with_suffix(".pub")
    if not pub_file.exists():  # derive it again rather than replacing the key
        pub_file.write_text(run(["ssh-keygen", "-y", "-f", str(key)], "ssh key").stdout)
    pub = pub_file.read_text()
    write_if_changed(ssh_dir / "authorized_keys", pub, 0o600)
    return key


def ssh_argv(key: Path, ip: str, command: list[str], connect_timeout: int = 5) -> list[str]:
    # -F /dev/null: a user's ~/.ssh/config (ControlMaster, User...) must not
    # change how the lab is reached.
    return [
        "ssh", "-F", "/dev/null", "-i", str(key),
        "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}",
        f"root@{ip}", *command,
    ]  # fmt: skip


def tcp_open(ip: str, port: int = 22, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_ready(hosts: list[Host], key: Path, timeout: float = WAIT_TIMEOUT) -> None:
    """Block until every host's sshd accepts TCP and `ssh ... true` works.

    Hosts are probed concurrently (one ssh client in flight per host), so
    the wait does not grow with the number of workers.
    """
    start = time.monotonic()
    pending = {h.name: h for h in hosts}
    stage = dict.fromkeys(pending, "tcp")
    probes: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
    last_report = start
    log(f"waiting for ssh on {len(hosts)} host(s) (timeout {timeout:.0f}s)...")
    try:
        while pending:
            now = time.monotonic()
            for name, h in list(pending.items()):
                if not pid_is_ours(h.pid, h.pid_start):
                    raise LabError(f"{name}: host process died; see {LAB_DIR / 'hosts' / name / 'console.log'}")
                if stage[name] == "tcp" and tcp_open(h.ip, timeout=0.2):
                    stage[name] = "ssh"
                if stage[name] != "ssh":
                    continue
                if name not in probes:
                    argv = ssh_argv(key, h.ip, ["true"], connect_timeout=3)
                    probes[name] = (subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.DEVNULL), now)
                    continue
                proc, started = probes[name]
                rc = proc.poll()
                if rc is None and now - started > 5:
                    proc.kill()  # a hung login attempt: retry with a fresh one
                    proc.wait()
                if rc is not None or now - started > 5:
                    del probes[name]
                if rc == 0:
                    log(f"  {name:<14} {h.ip:<13} ssh ok ({now - start:.1f}s)")
                    del pending[name]
            if not pending:
                break
            if now - start > timeout:
                name = next(iter(pending))
                what = "sshd on port 22" if stage[name] == "tcp" else "ssh login"
                raise LabError(f"{name}: no {what} after {timeout:.0f}s; see {LAB_DIR / 'hosts' / name / 'sshd.log'}")
            if now - last_report >= 2:
                waiting = ", ".join(f"{n} ({stage[n]})" for n in pending)
                log(f"  still waiting after {now - start:.0f}s: {waiting}")
                last_report = now
            time.sleep(0.05)
    finally:
        for proc, _ in probes.values():  # only our own probe clients
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------- Ansible's ssh masters


def control_paths(ip: str, cp_dir: Path) -> list[str]:
    """ControlPath values an ssh master to root@ip may be listening on.

    `%C` (ssh's own hash) is what a `control_path = %(directory)s/%%C`
    setting produces; ansible-core's default is its own sha1 of
    "host-port-user" (port is None unless ansible_port is set).
    """
    paths = [str(cp_dir / "%C")]
    for port in ("None", "22"):
        digest = hashlib.sha1(f"{ip}-{port}-root".encode()).hexdigest()[:10]
        paths.append(str(cp_dir / digest))
    return paths


def close_control_masters(ips: Iterable[str]) -> None:
    """Close Ansible's ssh ControlPersist masters so none outlives its host."""
    if not ANSIBLE_CP_DIR.is_dir():
        return
    for ip in ips:
        for path in control_paths(ip, ANSIBLE_CP_DIR):
            if "%" not in path and not os.path.exists(path):
                continue
            try:
                subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={path}", f"root@{ip}"],
                               check=False, stdin=subprocess.DEVNULL, capture_output=True, timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass  # best effort: a dead master is what we want anyway
