"""The lab's facts, once: its files, names and addresses, the host plan, and the few primitives every part uses.

Facts: where the lab keeps its state, inventory, token file and ssh key; the bridge, the subnet and the
hosts' fixed MACs; the head's address and dashboard URL, the store's address. The host plan: a lab host is
a ``Host``, named, addressed and wired by its index (0 = lab-head, K = lab-workerK, STORE_INDEX = lab-store,
the Redis host for Ray's GCS fault tolerance) through ``make_host``/``plan_hosts``, and ``host_index``
inverts the naming. Primitives: ``LabError`` (a failure reported as one line),
``log``/``warn`` and ``run`` (an external command whose failure becomes a ``LabError``).

Callers outside lab/lab.py's own parts import these names from ``lab`` (lab/lab.py re-exports them).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.base.conventions import one_line  # isort: skip

REPO_ROOT = Path(__file__).resolve().parent.parent
LAB_DIR = REPO_ROOT / ".lab"
STATE_FILE = LAB_DIR / "lab.json"
INVENTORY_FILE = REPO_ROOT / "inventory" / "lab" / "hosts.yml"
# The cluster token as the control host keeps it (ray_auth_control_token_path of the lab's inventory).
TOKEN_FILE = REPO_ROOT / "inventory" / "lab" / ".secrets" / "ray_token"

BRIDGE = "rvlab0"
SUBNET = "198.18.0."
BRIDGE_CIDR = SUBNET + "1/24"
# Fixed, locally administered MACs ("rvl" = 72:76:6c).  A recreated host
# keeps its MAC, so the ARP caches of the root namespace and of the other
# hosts stay valid; with random MACs a recreated host was unreachable for
# up to ~45 s (until the stale neighbour entry expired).  The bridge gets a
# fixed MAC too, because by default it takes the lowest port MAC and so
# changes whenever a host comes or goes.
MAC_PREFIX = "02:72:76:6c"
BRIDGE_MAC = f"{MAC_PREFIX}:ff:01"
PREFIX_LEN = 24
FIRST_HOST_OCTET = 10  # lab-head; worker K gets .10+K
HEAD_IP = f"{SUBNET}{FIRST_HOST_OCTET}"
# Ray's dashboard (the job API) on the lab's head, at roles/project_defaults' ray_dashboard_port.
DASHBOARD_URL = f"http://{HEAD_IP}:8265"
# lab-store (Redis for Ray's GCS fault tolerance, roles/ray_store) takes the top of the range, .254;
# the workers stop below it, so adding workers never moves it and it never moves a worker.
STORE_INDEX = 254 - FIRST_HOST_OCTET
STORE_IP = f"{SUBNET}{FIRST_HOST_OCTET + STORE_INDEX}"
MAX_WORKERS = STORE_INDEX - 1
NETNS_PREFIX = "rvlab-"
VETH_PREFIX = "rvl"
VETH_RE = re.compile(r"^rvl\d+$")
HEAD = "lab-head"
WORKER_PREFIX = "lab-worker"
STORE = "lab-store"
IFNAMSIZ = 15  # kernel limit on interface name length


class LabError(Exception):
    """A failure reported to the user as one line."""


@dataclasses.dataclass
class Host:
    name: str
    ip: str
    netns: str
    veth: str
    role: str  # "head" | "worker" | "store"
    pid: int | None = None
    # Kernel start time (clock ticks) of `pid`: pid+start time identifies the
    # process even after the PID number is recycled.
    pid_start: int | None = None


# ---------------------------------------------------------------- the host plan


def make_host(index: int) -> Host:
    """Host number `index` (0 = head, K = workerK, STORE_INDEX = store) with all derived names."""
    if not (0 <= index <= MAX_WORKERS or index == STORE_INDEX):
        raise LabError(f"host index {index} out of range 0..{MAX_WORKERS} (or {STORE_INDEX}, the store)")
    role = "head" if index == 0 else "store" if index == STORE_INDEX else "worker"
    name = {"head": HEAD, "store": STORE}.get(role, f"{WORKER_PREFIX}{index}")
    veth = f"{VETH_PREFIX}{index}"
    if len(veth) > IFNAMSIZ:  # cannot happen with MAX_WORKERS, but be explicit
        raise LabError(f"{name}: interface name {veth!r} too long")
    return Host(
        name=name,
        ip=f"{SUBNET}{FIRST_HOST_OCTET + index}",
        netns=f"{NETNS_PREFIX}{name}",
        veth=veth,
        role=role,
    )


def host_mac(index: int) -> str:
    """eth0 MAC of host `index` (stable across recreation)."""
    return f"{MAC_PREFIX}:00:{index:02x}"


def plan_hosts(workers: int, *, store: bool = False) -> list[Host]:
    """The wanted lab: head plus `workers` workers, and the store last when asked, in creation order.

    `lab.py up` asks for the store unless --no-store; the default here is the Ray cluster alone,
    what the callers that want its head and workers (tests, benchmarks) take from it.
    """
    if not 0 <= workers <= MAX_WORKERS:
        raise LabError(f"--workers must be between 0 and {MAX_WORKERS}")
    return [make_host(i) for i in range(workers + 1)] + ([make_host(STORE_INDEX)] if store else [])


def host_index(name: str) -> int | None:
    """Inverse of make_host's naming; None for names the lab never uses."""
    if name == HEAD:
        return 0
    if name == STORE:
        return STORE_INDEX
    m = re.fullmatch(re.escape(WORKER_PREFIX) + r"([1-9]\d*)", name)
    if m and int(m.group(1)) <= MAX_WORKERS:
        return int(m.group(1))
    return None


def ssh_key() -> Path:
    """The lab's client key (ssh to its hosts as root); lab_ssh.ensure_keys makes it."""
    return LAB_DIR / "ssh" / "id_ed25519"


# ---------------------------------------------------------------- primitives


def log(msg: str) -> None:
    print(msg, flush=True)


def warn(msg: str) -> None:
    print(f"lab.py: warning: {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], what: str = "", check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if check and proc.returncode != 0:
        detail = one_line(proc.stderr or proc.stdout) or f"exit {proc.returncode}"
        prefix = f"{what}: " if what else ""
        raise LabError(f"{prefix}`{shlex.join(argv[:6])}` failed: {detail}")
    return proc
