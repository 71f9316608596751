"""The lab's network: a named netns per host, plugged by a veth pair into the bridge rvlab0.

Each host's netns ``rvlab-<host>`` has an ``eth0`` (fixed MAC, the host's IP, no default route) whose
peer ``rvl<index>`` is a port of the bridge in the root namespace. Here: asking what exists (netns,
links, which netns a PID is in, which PIDs a netns holds), making the bridge and a host's netns and
veth, and sweeping lab-named leftovers no tracked host owns.
"""

from __future__ import annotations

import os
from pathlib import Path

from lab_facts import (
    BRIDGE,
    BRIDGE_CIDR,
    BRIDGE_MAC,
    NETNS_PREFIX,
    PREFIX_LEN,
    VETH_RE,
    Host,
    host_index,
    host_mac,
    run,
    warn,
)

NETNS_RUN_DIR = Path("/run/netns")  # where iproute2 pins named netns


# ---------------------------------------------------------------- what exists


def netns_exists(netns: str) -> bool:
    return (NETNS_RUN_DIR / netns).exists()


def list_lab_netns() -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_RUN_DIR) if n.startswith(NETNS_PREFIX))
    except FileNotFoundError:
        return []


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def bridge_master(link: str) -> str | None:
    try:
        return os.path.basename(os.readlink(f"/sys/class/net/{link}/master"))
    except OSError:
        return None


def list_lab_links() -> list[str]:
    return sorted(n for n in os.listdir("/sys/class/net") if VETH_RE.match(n))


def pid_in_netns(pid: int, netns: str) -> bool:
    try:
        a = os.stat(f"/proc/{pid}/ns/net")
        b = os.stat(NETNS_RUN_DIR / netns)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def netns_pids(netns: str) -> list[int]:
    if not netns_exists(netns):
        return []
    out = run(["ip", "netns", "pids", netns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


# ---------------------------------------------------------------- making and sweeping


def ensure_bridge() -> None:
    if not link_exists(BRIDGE):
        run(["ip", "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge"], BRIDGE)
    run(["ip", "addr", "replace", BRIDGE_CIDR, "dev", BRIDGE], BRIDGE)  # replace = idempotent
    run(["ip", "link", "set", BRIDGE, "address", BRIDGE_MAC, "up"], BRIDGE)


def add_host_netns(host: Host) -> None:
    """The host's netns with its eth0 up at its IP, the veth's root end a port of the bridge."""
    ns = host.netns
    run(["ip", "netns", "add", ns], host.name)
    # Create the peer directly inside the netns as eth0: the root namespace
    # may already have an eth0, so a create-then-rename would collide.
    mac = host_mac(host_index(host.name) or 0)
    run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "address", mac, "netns", ns],
        host.name)
    run(["ip", "link", "set", host.veth, "master", BRIDGE, "up"], host.name)
    run(["ip", "-n", ns, "addr", "add", f"{host.ip}/{PREFIX_LEN}", "dev", "eth0"], host.name)
    run(["ip", "-n", ns, "link", "set", "eth0", "up"], host.name)
    run(["ip", "-n", ns, "link", "set", "lo", "up"], host.name)
    # Deliberately no default route: only 198.18.0.0/24 is reachable.


def sweep_untracked(keep_netns: set[str], keep_links: set[str]) -> list[str]:
    """Remove lab-named netns/veths that no tracked host owns."""
    removed = []
    for ns in list_lab_netns():
        if ns not in keep_netns:
            pids = netns_pids(ns)
            if pids:
                warn(f"untracked {ns} still has processes {' '.join(map(str, pids))} (not killed)")
            run(["ip", "netns", "delete", ns], ns, check=False)
            removed.append(ns)
    for link in list_lab_links():
        if link not in keep_links:
            run(["ip", "link", "delete", link], link, check=False)
            removed.append(link)
    return removed
