#!/usr/bin/env python3
"""Local multi-host lab: N SSH-reachable "hosts" on this one machine.

Usage (as root, from anywhere; paths are derived from this file, not the cwd; with the project's venv,
which has the Ansible the project's helpers import through):

    .venv/bin/python lab/lab.py up [--workers N] [--no-store]   # lab-head + lab-worker1..N (+ lab-store)
    .venv/bin/python lab/lab.py status
    .venv/bin/python lab/lab.py ssh HOST -- CMD...
    .venv/bin/python lab/lab.py down

The lab's own facts (the hosts' names and addresses, the head's dashboard URL, the control host's
token file, the ssh key) live once, in lab_facts.py; other code imports them from here, as ``import
lab`` (the names in ``__all__``: the tests, the benchmarks and lab_slurm.py use them).

Design
------
Each lab host is a set of Linux namespaces, not a VM or container image:

* network: a netns ``rvlab-<host>`` whose ``eth0`` is one end of a veth pair;
  the other end (``rvl<index>``) is a port of the bridge ``rvlab0``
  (198.18.0.1/24, an RFC 2544 benchmarking range) in the root namespace.
  There is no default route and IP forwarding is left alone, so lab traffic
  can only reach 198.18.0.0/24 -- nothing leaves the machine.
* processes: ``ip netns exec NS unshare --pid --fork --kill-child ...`` gives
  every host its own PID namespace, whose init is the host's ``sshd -D``.
  ``unshare`` blocks SIGTERM while it waits, so ``down`` SIGKILLs the
  recorded ``unshare`` PID; ``--kill-child`` then SIGKILLs the namespace
  init, and the kernel kills every process in the PID namespace with it
  (including Ray daemons started later over ssh).
* filesystem: a private mount namespace with fresh tmpfs on /tmp, /run and
  /dev/shm (Ray keeps per-node state there), and overlays of /etc and /var/lib whose
  upper layers are the host's own (.lab/hosts/<host>/overlay); the rest of the
  filesystem is shared between hosts, like an NFS-ish lab.
* hostname: a UTS namespace, so ``hostname`` answers ``lab-worker1`` etc.

Besides the Ray cluster's head and workers, ``up`` makes ``lab-store`` (198.18.0.254, the
inventory's group ``ray_store``, outside ``ray_cluster``): the host of the Redis server that Ray's
GCS fault tolerance keeps its state in. ``up --no-store`` leaves it out (and removes a running one).

Everything the lab creates is recorded in ``.lab/lab.json`` (names, IPs and
the PID + kernel start time of each host's ``unshare``).  A PID is only ever
signalled if its start time still matches, so a recycled PID can never be
killed by mistake.  Names with the ``rvlab-``/``rvl<N>``/``rvlab0`` prefixes
are owned by the lab, which lets ``down`` sweep leftovers when the state file
is stale or missing.

Note: a killed host's ``unshare`` and namespace init are orphans reaped by
the machine's PID 1, which in some VMs/containers does so only lazily, so
they can linger as zombies for a while; liveness checks treat zombies as dead.

Parts
-----
Files in lab/, importing each other by plain name (the script's folder is on sys.path):

* lab_facts.py: the facts, the host plan (``Host``, ``plan_hosts``), ``LabError``, ``log``/``run``;
* lab_files.py: the state file .lab/lab.json, the generated inventory, atomic writes, the lock;
* lab_net.py: the netns, veth pairs and bridge;
* lab_host.py: each host's sshd as PID namespace init, PID identity, start/stop, what `up` does;
* lab_ssh.py: the client key, ``ssh_argv``, waiting for logins, Ansible's ssh masters;
* lab.py (this file): the CLI ``up``/``status``/``ssh``/``down``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.base.conventions import one_line  # isort: skip
from lab_facts import (  # isort: skip
    BRIDGE,
    DASHBOARD_URL,
    HEAD_IP,
    INVENTORY_FILE,
    LAB_DIR,
    NETNS_PREFIX,
    REPO_ROOT,
    STORE_IP,
    SUBNET,
    TOKEN_FILE,
    Host,
    LabError,
    host_index,
    log,
    warn,
    make_host,
    plan_hosts,
    run,
    ssh_key,
)
from lab_files import load_state, lock_lab, render_inventory, save_state, write_if_changed  # isort: skip
from lab_host import SSHD, classify, machine_leftovers, pid_is_ours, plan_up, probe, start_host, stop_host  # isort: skip
from lab_net import (  # isort: skip
    NETNS_RUN_DIR,
    bridge_master,
    ensure_bridge,
    link_exists,
    list_lab_netns,
    netns_exists,
    sweep_untracked,
)
from lab_ssh import close_control_masters, ensure_keys, ssh_argv, tcp_open, wait_ready  # isort: skip

# What other code uses as `lab.X` (lab_slurm.py, the benchmarks, the tests).
__all__ = [
    "DASHBOARD_URL",
    "HEAD_IP",
    "LAB_DIR",
    "MADE_DIRS",
    "STORE_IP",
    "SUBNET",
    "TOKEN_FILE",
    "LabError",
    "host_index",
    "load_state",
    "log",
    "machine_leftovers",
    "main",
    "one_line",
    "plan_hosts",
    "require_root",
    "ssh_argv",
    "ssh_key",
]


# Folders on the machine's own / that a lab brings about: where its hosts mount the shared root (the lab's
# shared_root_path, the project's default), and iproute2's folder of named netns, a bind mount of itself. Each one
# absent before lab-up is noted (.lab/made/), and down takes it away once empty; True: iproute2's own mount, undone.
SHARED_ROOT_MOUNT = Path("/private")
MADE_DIRS = {SHARED_ROOT_MOUNT: False, NETNS_RUN_DIR: True}
MADE_NOTES = LAB_DIR / "made"


# ------------------------------------------------------------ preconditions


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("must run as root (network/PID/mount namespaces need CAP_SYS_ADMIN)")


def require_tools(*tools: str) -> None:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
    missing = []
    for tool in tools:
        if tool == "sshd":
            found = os.access(SSHD, os.X_OK)
        else:
            found = shutil.which(tool, path=search) is not None
        if not found:
            missing.append(SSHD if tool == "sshd" else tool)
    if missing:
        raise LabError(
            f"missing required tool(s): {', '.join(missing)} "
            "(apt-get install iproute2 util-linux openssh-server openssh-client)"
        )


def mounts_under(path: Path, mountinfo: str | None = None) -> list[str]:
    """Mount points at or below `path` (default: in our mount namespace)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    prefix = str(path)
    found = []
    for line in mountinfo.splitlines():
        # mountinfo escapes space, tab, newline and backslash as octal \ooo.
        mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if mnt == prefix or mnt.startswith(prefix + "/"):
            found.append(mnt)
    return found


# ------------------------------------------------------------------ commands


def cmd_up(workers: int, store: bool = True) -> int:
    require_root()
    require_tools("ip", "sshd", "unshare", "ssh", "ssh-keygen")
    wanted = plan_hosts(workers, store=store)
    t0 = time.monotonic()
    lock_lab()
    key = ensure_keys()
    authorized_keys = key.parent / "authorized_keys"
    (LAB_DIR / "private").mkdir(exist_ok=True)
    note_made_dirs()
    ensure_bridge()

    current = load_state(strict=True)
    # Probe the recorded entry when there is one: only it knows the PID.
    conditions = {h.name: classify(probe(current.get(h.name, h))) for h in wanted}

    for action, host in plan_up(wanted, current, conditions):
        label = f"{host.name:<14} {host.ip:<13}"
        if action == "keep":
            note = ""
            if bridge_master(host.veth) != BRIDGE:
                # The bridge was recreated under a live host: re-plug its
                # root-side veth (the host itself stays untouched).
                run(["ip", "link", "set", host.veth, "master", BRIDGE, "up"], host.name)
                note = ", re-attached to bridge"
            log(f"{label} already running (pid {host.pid}{note})")
            continue
        stop_host(host)  # remove/recreate/create: clear any leftovers first
        if action == "remove":
            current.pop(host.name, None)
            save_state(current)
            shutil.rmtree(LAB_DIR / "hosts" / host.name, ignore_errors=True)
            log(f"{label} removed (not requested)")
            continue
        fresh = make_host(host_index(host.name) or 0)
        current.pop(host.name, None)
        save_state(current)
        start_host(fresh, authorized_keys)
        current[fresh.name] = fresh
        save_state(current)  # record the PID before anything else can fail
        log(f"{label} {'created' if action == 'create' else 'recreated (stale state cleaned up)'}")

    for name in sweep_untracked({h.netns for h in current.values()}, {h.veth for h in current.values()}):
        log(f"removed leftover {name}")
    INVENTORY_FILE.parent.mkdir(parents=True, exist_ok=True)
    write_if_changed(INVENTORY_FILE, render_inventory(current.values(), REPO_ROOT))
    wait_ready([current[h.name] for h in wanted], key)
    log(f"lab up: {len(wanted)} host(s) ready in {time.monotonic() - t0:.1f}s; "
        f"inventory {INVENTORY_FILE.relative_to(REPO_ROOT)}")
    return 0


def note_made_dirs() -> None:
    MADE_NOTES.mkdir(exist_ok=True)
    for path in MADE_DIRS:
        if not path.exists() and not (MADE_NOTES / path.name).exists():
            (MADE_NOTES / path.name).touch()
    if not SHARED_ROOT_MOUNT.exists():
        SHARED_ROOT_MOUNT.mkdir(mode=0o755)  # the hosts bind the shared root there


def remove_made_dirs() -> None:
    """Take away what lab-up brought about on the machine's /, once nothing is left in it: never through a link or a
    mount other than iproute2's own."""
    for path, own_mount in MADE_DIRS.items():
        if not (MADE_NOTES / path.name).exists() or path.is_symlink() or not path.is_dir() or any(path.iterdir()):
            continue
        mounted = str(path) in mounts_under(path)  # a bind of itself is no mount to os.path.ismount
        if mounted and not own_mount:
            continue
        for _ in range(3 if mounted else 0):  # iproute2 may have bound it more than once
            run(["umount", str(path)], str(path), check=False)
            if str(path) not in mounts_under(path):
                break
        if str(path) not in mounts_under(path):
            path.rmdir()


def cmd_down() -> int:
    require_root()
    require_tools("ip")
    t0 = time.monotonic()
    recorded: dict[str, Host] = {}
    if LAB_DIR.exists():
        lock_lab()
        recorded = load_state(strict=False)  # a corrupt file must not block cleanup
    # Hosts we can still infer from lab-named namespaces when state is lost.
    inferred = {}
    for ns in list_lab_netns():
        idx = host_index(ns[len(NETNS_PREFIX):])
        if idx is not None:
            inferred[make_host(idx).name] = make_host(idx)
    targets = {**inferred, **recorded}
    close_control_masters(h.ip for h in targets.values())

    for h in sorted(targets.values(), key=lambda h: host_index(h.name) or 0):
        existed = netns_exists(h.netns) or link_exists(h.veth) or pid_is_ours(h.pid, h.pid_start)
        stop_host(h)
        if existed:
            log(f"{h.name:<14} {h.ip:<13} removed")
    leftovers = sweep_untracked(set(), set())
    for name in leftovers:
        log(f"removed leftover {name}")
    did_bridge = link_exists(BRIDGE)
    if did_bridge:
        run(["ip", "link", "delete", BRIDGE], BRIDGE)
        log(f"removed bridge {BRIDGE}")

    remove_made_dirs()
    mounted = mounts_under(LAB_DIR)
    if mounted:
        # Never rm -rf through a mount (it could be shared data).
        raise LabError(f"refusing to delete {LAB_DIR}: still mounted: {' '.join(mounted)}")
    did_files = LAB_DIR.exists() or INVENTORY_FILE.exists()
    if LAB_DIR.exists():
        shutil.rmtree(LAB_DIR)
    INVENTORY_FILE.unlink(missing_ok=True)
    for path in machine_leftovers():
        # The lab's hosts write in their own layers, never here: this came from elsewhere (an older lab, a site).
        warn(f"{path} is on this machine itself, not in a lab host's layers: not the lab's, left alone")
    if targets or leftovers or did_bridge or did_files:
        log(f"lab down in {time.monotonic() - t0:.1f}s")
    else:
        log("lab already down (nothing to remove)")
    return 0


def cmd_status() -> int:
    require_root()
    hosts = load_state(strict=False)
    if not hosts:
        log("lab is down (no .lab/lab.json)")
        return 1
    all_up = True
    for h in sorted(hosts.values(), key=lambda h: host_index(h.name) or 0):
        up = classify(probe(h)) == "running" and tcp_open(h.ip)
        all_up &= up
        log(f"{h.name:<14} {h.ip:<13} {'up' if up else 'down'}")
    return 0 if all_up else 1


def cmd_ssh(target: str, command: list[str]) -> int:
    require_root()
    require_tools("ssh")
    if command[:1] == ["--"]:
        command = command[1:]
    hosts = load_state(strict=True)
    host = hosts.get(target) or next((h for h in hosts.values() if h.ip == target), None)
    if host is None:
        known = ", ".join(hosts) or "none; run `make lab-up`"
        raise LabError(f"unknown lab host {target!r} (known: {known})")
    sys.stdout.flush()
    # exec: ssh's exit status, signals and tty handling pass straight through.
    # Like plain ssh, CMD words are joined by spaces and run by the remote shell.
    os.execvp("ssh", ssh_argv(ssh_key(), host.ip, command))
    return 255  # unreachable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create/refresh the lab (idempotent)")
    up.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    up.add_argument("--no-store", dest="store", action="store_false",
                    help="leave out lab-store, the Redis host for GCS fault tolerance (default: with it)")
    sub.add_parser("down", help="remove everything `up` made (idempotent)")
    sub.add_parser("status", help="one line per host: name, ip, up/down (exit 0 iff all up)")
    ssh = sub.add_parser("ssh", help="run a command on a lab host: ssh HOST -- CMD...")
    ssh.add_argument("host")
    ssh.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            return cmd_up(args.workers, args.store)
        if args.command == "down":
            return cmd_down()
        if args.command == "status":
            return cmd_status()
        return cmd_ssh(args.host, args.cmd)
    except LabError as exc:
        print(f"lab.py: error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lab.py: error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
