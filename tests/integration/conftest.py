"""Integration tests on the lab: real SSH hosts in network namespaces, a real Ray cluster.

The lab is brought up once per session (lab/lab.py) and the cluster with up.yml;
tests run the playbooks exactly as a user types them, from the repository root.
"""

import contextlib
import glob
import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from ansible.module_utils.base import ray_cluster

import lab  # the lab's names, addresses and files (tests/conftest.py puts lab/ on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
TOKEN = str(lab.TOKEN_FILE)
DASHBOARD = lab.DASHBOARD_URL
IPS = {host.name: host.ip for host in lab.plan_hosts(2)}  # the lab these tests bring up: a head, two workers
HEAD, WORKER1, WORKER2 = IPS
RECORDS = os.path.join(ROOT, ".lab", "private", "jobs")
CORDONS = os.path.join(ROOT, ".lab", "private", "cordons")
WORKER3 = lab.plan_hosts(3)[-1]  # the third worker, while a module grows the lab (three_workers)


class Run:
    """One ansible-playbook run: exit code, output and the PLAY RECAP per host."""

    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.recap = {}
        for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", self.out, re.MULTILINE):
            self.recap[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}

    def changed(self, host):
        return self.recap[host]["changed"]

    def __repr__(self):
        return f"rc={self.rc}\n{self.out[-6000:]}"


def playbook(name, *args):
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    started = time.monotonic()
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), name, *args], check=False, cwd=ROOT, env=env,
                          capture_output=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)
    run = Run(proc)
    print(f"ansible-playbook {name} {' '.join(args)}: rc={run.rc} in {time.monotonic() - started:.1f}s {run.recap}")
    return run


def ssh(host, command, check=True):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "lab", "lab.py"), "ssh", host, "--", command],
                          check=False, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{host}: {command!r} failed rc={proc.returncode}: {proc.stderr}{proc.stdout}")
    return proc.stdout


def nodes():
    ray_cluster.prepare_client_env(TOKEN)
    return ray_cluster.list_nodes(DASHBOARD)


def alive_by_ip():
    """The ALIVE node of each IP, by the readiness rule's own definition (module_utils/base/ray_cluster.py).

    It does not wait: after up.yml says ready, no IP may have two ALIVE nodes (issue 8).
    """
    alive, ambiguous = ray_cluster.one_alive_per_ip(nodes())
    assert not ambiguous, f"several ALIVE nodes on {ambiguous}"
    return alive


def tracked_step(sid):
    """The step verl's checkpoint tracker of job sid names (0 before its first checkpoint)."""
    try:
        with open(os.path.join(RECORDS, sid, "checkpoints", "latest_checkpointed_iteration.txt")) as handle:
            return int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# The fixture below takes the name `lab`: the lab's tools stay reachable under this one.
lab_tools = lab


def machine_leftovers():
    """What a lab leaves on the machine itself: the nodes' state, and the folders lab-up brought about."""
    return lab_tools.machine_leftovers() + [str(path) for path in lab_tools.MADE_DIRS if path.exists()]


def _cpu_jiffies():
    """(busy, total) jiffies of this machine's CPUs since boot (/proc/stat's first line)."""
    with open("/proc/stat", encoding="ascii") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]  # idle and iowait
    return sum(values) - idle, sum(values)


@pytest.fixture(autouse=True)
def cpu_busy(request):
    """Each test's share of the machine's CPU time busy, in its JUnit properties (.ci/slowest prints it): a slow test
    near 100 % waits on the CPU, one far below waits on a clock (a timeout, a poll), which is where to cut."""
    busy, total = _cpu_jiffies()
    yield
    busy_after, total_after = _cpu_jiffies()
    if total_after > total:
        request.node.user_properties.append(("cpu_busy_pct", round(100 * (busy_after - busy) / (total_after - total))))


@pytest.fixture(scope="session")
def lab():
    before = set(machine_leftovers())
    # make lab-up: the hosts, the nodes' verl venv, and the lab's site data (tiny model, verl source).
    subprocess.run(["make", "-s", "lab-up", "WORKERS=2"], cwd=ROOT, check=True, timeout=1800)
    yield
    if os.environ.get("KEEP_LAB") != "1":
        playbook("down.yml")
        subprocess.run([sys.executable, os.path.join(ROOT, "lab", "lab.py"), "down"], check=False, timeout=120)
        # The next lab (CI's included) must start as a fresh machine: none of the nodes' state left on this one.
        left = sorted(set(machine_leftovers()) - before)
        assert not left, f"make lab-down left node state on the machine: {left}"


@pytest.fixture
def cluster(lab):
    """A healthy cluster (brought up or healed by up.yml) for tests that need one."""
    run = playbook("up.yml")
    assert run.rc == 0, run
    return run


@pytest.fixture(scope="module")
def cluster_up(lab):
    """up.yml once per test module (a module's tests then share the cluster)."""
    run = playbook("up.yml")
    assert run.rc == 0, run


def new_id(prefix="it"):
    """A fresh submission id."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def three_workers():
    """The lab grown to three workers and up.yml run; shrunk back to the suite's two after, once Ray has declared the
    third one's node dead, so the tests after it see the two-worker cluster they expect."""
    # lab.py itself: the session's make lab-up made the venvs and the lab's assets already.
    grow = [sys.executable, os.path.join(ROOT, "lab", "lab.py"), "up", "--workers"]
    subprocess.run([*grow, "3"], cwd=ROOT, check=True, timeout=600)
    try:
        run = playbook("up.yml")
        assert run.rc == 0, run
        yield
    finally:
        subprocess.run([*grow, "2"], cwd=ROOT, check=True, timeout=600)
        wait_for(lambda: WORKER3.ip not in alive_by_ip(), 120, f"Ray to declare {WORKER3.name}'s node dead")


def cordoned():
    """{ip: cordon} of the lab's cordoned workers (cordon.yml's files on the shared root)."""
    found = {}
    for path in glob.glob(os.path.join(CORDONS, "*.json")):
        with open(path, encoding="utf-8") as handle:
            found[os.path.basename(path)[:-len(".json")]] = json.load(handle)
    return found


def uncordon_all():
    """Give back every cordoned worker (cordon.yml -e state=absent), so the next tests have the whole cluster."""
    for ip in cordoned():
        run = playbook("cordon.yml", "-e", f"host={ip}", "-e", "state=absent")
        assert run.rc == 0, run
    assert cordoned() == {}
