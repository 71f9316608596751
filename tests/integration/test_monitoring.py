"""The cluster owner's services on the lab, seen in a browser (headless chromium): Prometheus's targets page shows every
lab node up and its alert rules loaded; TensorBoard's time-series page lists a job's run and draws its scalar charts.

The lab's inventory turns both on (inventory/lab/group_vars/ray_cluster.yml), so up.yml has started them.
"""

import os
import re
import shutil
import subprocess

import browser
import pytest
import yaml
from conftest import IPS, RECORDS, ROOT, new_id

import lab

with open(os.path.join(ROOT, "roles", "project_defaults", "defaults", "main.yml"), encoding="utf-8") as _handle:
    DEFAULTS = yaml.safe_load(_handle)
PROMETHEUS = f"http://{lab.HEAD_IP}:{DEFAULTS['ray_prometheus_port']}"
TENSORBOARD = f"http://{lab.HEAD_IP}:{DEFAULTS['ray_tensorboard_port']}"
NODES_PYTHON = os.path.join(ROOT, ".venv-verl", "bin", "python")
TAGS = ("critic/rewards/mean", "actor/pg_loss")
ALERTS = ("RayMetricsTargetDown", "RayNodeLost", "RayWorkerRayletDown", "RayClusterSmallerThanInventory",
          "RayObjectStoreNearFull")

# A job's event files as verl's tensorboard logger writes them (scalars by step), with TensorBoard's own writer from
# the nodes' venv (it imports in a fraction of a second; torch's SummaryWriter writes the same records).
WRITE_EVENTS = """
import sys, time
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter
writer = EventFileWriter(sys.argv[1])
for step in (1, 2, 3):
    values = [Summary.Value(tag="critic/rewards/mean", simple_value=0.1 * step),
              Summary.Value(tag="actor/pg_loss", simple_value=-0.5 / step)]
    writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=values)))
writer.close()
"""


def _host(endpoint):
    found = re.match(r"https?://([^/:]+):\d+/", endpoint)
    return found.group(1) if found else None


def _every_node_up(rows):
    ray = [r for r in rows if r["job"] == "ray"]
    return {_host(r["endpoint"]) for r in ray} >= set(IPS.values()) and all(r["state"] == "up" for r in ray)


def test_prometheus_targets_page_shows_every_lab_node_up(cluster_up):
    dom = browser.page_dom(PROMETHEUS + "/classic/targets",
                           until=lambda d: _every_node_up(browser.prometheus_targets(d)))
    rows = [r for r in browser.prometheus_targets(dom) if r["job"] == "ray"]
    assert {_host(r["endpoint"]) for r in rows} == set(IPS.values()), rows
    assert {r["state"] for r in rows} == {"up"} and not any(r["error"] for r in rows), rows


def test_prometheus_alerts_page_shows_the_rules(cluster_up):
    # Whether one fires depends on what earlier tests did to the lab's nodes (a lost node is remembered for an hour).
    shown = browser.text(browser.parse(browser.page_dom(PROMETHEUS + "/classic/alerts")))
    assert re.search(r"Inactive \(\d+\) Pending \(\d+\) Firing \(\d+\)", shown), shown[:2000]
    for name in ALERTS:
        assert re.search(rf"\b{name} \(\d+ active\)", shown), (name, shown[:2000])


@pytest.fixture
def tensorboard_run():
    """A job record with event files (<jobs>/<id>/tensorboard/), removed afterwards."""
    sid = new_id("tb")
    logdir = os.path.join(RECORDS, sid, "tensorboard")
    os.makedirs(logdir)
    try:
        subprocess.run([NODES_PYTHON, "-c", WRITE_EVENTS, logdir], check=True, timeout=60, capture_output=True)
        yield sid
    finally:
        shutil.rmtree(os.path.join(RECORDS, sid), ignore_errors=True)


def test_tensorboard_lists_the_run_and_draws_its_charts(cluster_up, tensorboard_run, tmp_path):
    url = browser.tensorboard_url(TENSORBOARD, run=tensorboard_run, tags="rewards|pg_loss")
    run = f"{tensorboard_run}/tensorboard"

    def drawn(dom):
        cards, lines = browser.tensorboard_cards(dom), browser.tensorboard_lines(dom)
        # The cards' data rows come before the chart's SVG lines are drawn: wait for both (CI once caught the gap).
        return all(any(r["run"] == run for r in cards.get(tag, [])) and lines.get(tag) for tag in TAGS)

    # The lab's TensorBoard looks at the shared root every few seconds (ray_tensorboard_reload_s).
    dom = browser.page_dom(url, until=drawn, timeout=90)
    assert browser.tensorboard_runs(dom) == {run}
    cards = browser.tensorboard_cards(dom)
    assert [r["step"] for r in cards["critic/rewards/mean"]] == ["3"]
    assert cards["critic/rewards/mean"][0]["value"] == "0.3"
    # Each chart draws the run's three steps (its raw and its smoothed line).
    assert browser.tensorboard_lines(dom)["actor/pg_loss"] == [3, 3], browser.tensorboard_lines(dom)
    png = browser.screenshot(url, tmp_path / "tensorboard.png")
    with open(png, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_missing_chromium_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    with pytest.raises(browser.BrowserMissing, match="apt-get install chromium"):
        browser.page_dom(TENSORBOARD)

