"""acceptance.yml on a lab of three workers (issue 30): it passes with its per-node table and a tiny SFT over every
worker, and fails naming lab-worker3 when that worker's link is rate-limited (tbf: this kernel has no netem).

The module grows the lab to three workers and shrinks it back to the suite's two when it is done, waiting until Ray
has declared the third one's node dead, so the tests after it see the two-worker cluster they expect.
"""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest
from conftest import ROOT, alive_by_ip, playbook, wait_for

import lab  # isort: skip

pytestmark = pytest.mark.usefixtures("lab")

WORKER3 = lab.plan_hosts(3)[-1]
ACCEPTANCE = os.path.join(ROOT, ".lab", "private", "acceptance")
LIMIT = ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "50mbit", "burst", "32kbit", "latency", "400ms"]


def flat(text):
    return " ".join(text.split())


def in_worker3(*argv, check=True):
    return subprocess.run(["ip", "netns", "exec", WORKER3.netns, *argv], check=check, capture_output=True, text=True)


@pytest.fixture(scope="module")
def three_workers():
    subprocess.run(["make", "-s", "lab-up", "WORKERS=3"], cwd=ROOT, check=True, timeout=600)
    try:
        run = playbook("up.yml")
        assert run.rc == 0, run
        yield
    finally:
        in_worker3("tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        subprocess.run(["make", "-s", "lab-up", "WORKERS=2"], cwd=ROOT, check=True, timeout=600)
        wait_for(lambda: WORKER3.ip not in alive_by_ip(), 120, f"Ray to declare {WORKER3.name}'s node dead")


def test_a_healthy_site_passes_with_a_row_per_worker_and_a_tiny_sft_over_all_of_them(three_workers):
    run = playbook("acceptance.yml", "-e", "run_id=accept-healthy")
    assert run.rc == 0, run
    out = flat(run.out)
    assert "PASS: every check passed" in out, run
    report = os.path.join(ACCEPTANCE, "accept-healthy")
    with open(os.path.join(report, "result.json"), encoding="utf-8") as handle:
        result = json.load(handle)
    assert result["ok"] is True
    with open(os.path.join(report, "table.txt"), encoding="utf-8") as handle:
        table = handle.read()
    for host in ("lab-worker1", "lab-worker2", "lab-worker3"):
        assert f"\n{host} " in "\n" + table, table
    cases = ET.parse(os.path.join(report, "junit.xml")).getroot().iter("testcase")
    assert not [c for c in cases if c.find("failure") is not None]
    assert "accept-healthy-sft: SUCCEEDED" in out, run


def test_a_rate_limited_worker_is_named(three_workers):
    in_worker3(*LIMIT)
    try:
        # The SFT proved itself above; the measurement is what names the slow node.
        run = playbook("acceptance.yml", "-e", "run_id=accept-slow", "-e", "acceptance_sft=false")
    finally:
        in_worker3("tc", "qdisc", "del", "dev", "eth0", "root", check=False)
    assert run.rc != 0, run
    out = flat(run.out)
    assert "FAIL lab-worker3 (198.18.0.13): all-reduce bus bandwidth" in out, run
    assert "every slow pair includes lab-worker3" in out, run
    assert "FAIL lab-worker1 " not in out and "FAIL lab-worker2 " not in out, run
    failed = [c.get("name") for c in ET.parse(os.path.join(ACCEPTANCE, "accept-slow", "junit.xml")).getroot()
              .iter("testcase") if c.find("failure") is not None]
    assert "lab-worker3" in failed, failed
