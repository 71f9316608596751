"""A one-box site (issue 30): the same host in ray_head and ray_workers is one Ray node, the head, carrying the GPUs and
worker_node. up.yml brings it up, re-applies with changed=0, and jobs run on it.

The lab's head alone is the site: its inventory is the lab's with lab-head in both groups (the lab's group_vars, token
and store password), under .lab/ (make lab-down removes it). The lab's workers stop first and the next test module's
up.yml brings the two-worker cluster back.
"""

import os

import pytest
import yaml
from conftest import HEAD, IPS, ROOT, alive_by_ip, new_id, playbook
from jobs_helpers import status

pytestmark = pytest.mark.usefixtures("lab")

LAB_INVENTORY = os.path.join(ROOT, "inventory", "lab")
ONE_BOX = os.path.join(ROOT, ".lab", "one-box")


@pytest.fixture(scope="module")
def one_box():
    with open(os.path.join(LAB_INVENTORY, "hosts.yml"), encoding="utf-8") as handle:
        inventory = yaml.safe_load(handle)
    inventory["all"]["children"]["ray_workers"] = {"hosts": {HEAD: None}}
    os.makedirs(ONE_BOX, exist_ok=True)
    with open(os.path.join(ONE_BOX, "hosts.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(inventory, handle, sort_keys=False)
    for name in ("cluster.yml", "group_vars", ".secrets"):
        if not os.path.lexists(os.path.join(ONE_BOX, name)):
            os.symlink(os.path.join(LAB_INVENTORY, name), os.path.join(ONE_BOX, name))
    assert playbook("down.yml").rc == 0  # the lab's cluster, workers included
    yield ONE_BOX
    assert playbook("down.yml", "-i", ONE_BOX).rc == 0


def test_the_head_is_the_one_node_and_offers_the_work(one_box):
    run = playbook("up.yml", "-i", one_box)
    assert run.rc == 0, run
    alive = alive_by_ip()
    assert list(alive) == [IPS[HEAD]], alive
    node = alive[IPS[HEAD]]
    assert node["is_head_node"], node
    res = node["resources_total"]
    assert res["worker_node"] == 1 and res["GPU"] == 4 and res["CPU"] == 8, res  # the lab's ray_worker_* settings


def test_it_re_applies_with_nothing_changed(one_box):
    before = alive_by_ip()[IPS[HEAD]]["node_id"]
    run = playbook("up.yml", "-i", one_box)
    assert run.rc == 0, run
    assert run.changed(HEAD) == 0, run
    assert alive_by_ip()[IPS[HEAD]]["node_id"] == before


def test_a_job_runs_on_it(one_box):
    sid = new_id("one-box")
    run = playbook("submit.yml", "-i", one_box, "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "wait=true")
    assert run.rc == 0, run
    assert status(sid)["state"] == "SUCCEEDED"
