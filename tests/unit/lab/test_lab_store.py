"""Unit tests for lab-store, the lab's Redis host for Ray's GCS fault tolerance: its place in the host plan,
the inventory's ray_store group (outside ray_cluster), `up --no-store`, `down` without a state file, and the
lab's tools that pick hosts by role (lab_slurm.py, bench_up.py). Pure logic, no real namespaces."""

import os
import shutil
from pathlib import Path

import bench_up
import lab_facts
import lab_files
import lab_host
import lab_net
import lab_slurm
import lab_ssh
import pytest

import lab

LAB_MODULES = (lab, lab_facts, lab_files, lab_net, lab_host, lab_ssh)
REPO = Path(__file__).resolve().parents[3]


def patch(monkeypatch, name, value):
    """Fake `name` wherever a part of the lab binds it."""
    bound = [module for module in LAB_MODULES if name in vars(module)]
    assert bound, f"no part of the lab has {name}"
    for module in bound:
        monkeypatch.setattr(module, name, value)


# ------------------------------------------------------------ the plan


def test_plan_with_store_adds_it_last_at_the_top_of_the_range():
    hosts = lab_facts.plan_hosts(2, store=True)
    assert [(h.name, h.ip, h.netns, h.veth, h.role) for h in hosts] == [
        ("lab-head", "198.18.0.10", "rvlab-lab-head", "rvl0", "head"),
        ("lab-worker1", "198.18.0.11", "rvlab-lab-worker1", "rvl1", "worker"),
        ("lab-worker2", "198.18.0.12", "rvlab-lab-worker2", "rvl2", "worker"),
        ("lab-store", "198.18.0.254", "rvlab-lab-store", "rvl244", "store"),
    ]
    assert lab_facts.STORE_IP == lab.STORE_IP == "198.18.0.254"
    assert lab_facts.host_mac(lab_facts.STORE_INDEX) == "02:72:76:6c:00:f4"
    assert lab_facts.plan_hosts(2) == hosts[:3]  # the default plan is the Ray cluster alone


def test_workers_never_reach_the_store():
    assert lab_facts.MAX_WORKERS == lab_facts.STORE_INDEX - 1 == 243
    last = lab_facts.plan_hosts(lab_facts.MAX_WORKERS)[-1]
    assert (last.name, last.ip) == ("lab-worker243", "198.18.0.253")
    with pytest.raises(lab_facts.LabError, match="--workers"):
        lab_facts.plan_hosts(lab_facts.MAX_WORKERS + 1, store=True)
    with pytest.raises(lab_facts.LabError, match="out of range"):
        lab_facts.make_host(lab_facts.STORE_INDEX + 1)


def test_host_index_knows_the_store_and_no_worker_of_its_index():
    assert lab_facts.host_index("lab-store") == lab_facts.STORE_INDEX
    assert lab_facts.make_host(lab_facts.STORE_INDEX).name == "lab-store"
    for name in ("lab-worker244", "lab-store1", "store"):
        assert lab_facts.host_index(name) is None


# ------------------------------------------------------------ the inventory and the state file


def test_inventory_puts_the_store_in_ray_store_only():
    text = lab_files.render_inventory(reversed(lab_facts.plan_hosts(1, store=True)), Path("/srv/repo"))
    assert """\
    ray_workers:
      hosts:
        lab-worker1:
          ansible_host: 198.18.0.11
    ray_store:
      hosts:
        lab-store:
          ansible_host: 198.18.0.254
  vars:
""" in text
    without = lab_files.render_inventory(lab_facts.plan_hosts(1), Path("/srv/repo"))
    assert "    ray_store: {}\n" in without  # the group stays defined


def test_ray_cluster_leaves_the_store_out(tmp_path):
    """The real ansible inventory: the generated hosts.yml beside the lab's cluster.yml."""
    manager = pytest.importorskip("ansible.inventory.manager")
    from ansible.parsing.dataloader import DataLoader

    (tmp_path / "hosts.yml").write_text(lab_files.render_inventory(lab_facts.plan_hosts(2, store=True), tmp_path))
    shutil.copy(REPO / "inventory" / "lab" / "cluster.yml", tmp_path / "cluster.yml")
    inventory = manager.InventoryManager(loader=DataLoader(), sources=[str(tmp_path)])

    def names(group):
        return sorted(h.name for h in inventory.get_hosts(group))

    assert names("ray_store") == ["lab-store"]
    assert names("ray_cluster") == ["lab-head", "lab-worker1", "lab-worker2"]
    assert inventory.get_host("lab-store").vars["ansible_host"] == "198.18.0.254"


def test_state_keeps_the_store_last():
    hosts = lab_facts.plan_hosts(1, store=True)
    back = lab_files.state_from_json(lab_files.state_to_json(reversed(hosts)))
    assert list(back) == ["lab-head", "lab-worker1", "lab-store"]


def test_up_without_store_removes_a_recorded_one_first():
    recorded = {h.name: h for h in lab_facts.plan_hosts(1, store=True)}
    recorded["lab-store"].pid, recorded["lab-store"].pid_start = 300, 7
    wanted = lab_facts.plan_hosts(1)
    actions = lab_host.plan_up(wanted, recorded, dict.fromkeys(recorded, "running"))
    assert [(a, h.name) for a, h in actions] == [("remove", "lab-store"), ("keep", "lab-head"), ("keep", "lab-worker1")]
    assert actions[0][1].pid == 300


# ------------------------------------------------------------ the CLI


@pytest.mark.parametrize(
    ("argv", "workers", "store"),
    [(["up"], 2, True), (["up", "--no-store"], 2, False), (["up", "--workers", "3", "--no-store"], 3, False)],
)
def test_up_plans_the_store_unless_no_store(monkeypatch, capsys, argv, workers, store):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    patch(monkeypatch, "require_tools", lambda *_t: None)
    seen = []

    def plan(n, *, store=False):
        seen.append((n, store))
        raise lab_facts.LabError("planned")  # stop before anything touches the system

    monkeypatch.setattr(lab, "plan_hosts", plan)
    assert lab.main(argv) == 1
    assert seen == [(workers, store)]
    assert "planned" in capsys.readouterr().err


def test_down_without_state_removes_the_store_too(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    patch(monkeypatch, "require_tools", lambda *_t: None)
    patch(monkeypatch, "LAB_DIR", tmp_path / ".lab")  # no state file: the hosts are inferred from their netns
    patch(monkeypatch, "INVENTORY_FILE", tmp_path / "hosts.yml")
    patch(monkeypatch, "list_lab_netns", lambda: ["rvlab-lab-head", "rvlab-lab-store", "rvlab-other"])
    patch(monkeypatch, "close_control_masters", lambda _ips: None)
    patch(monkeypatch, "netns_exists", lambda _ns: True)
    patch(monkeypatch, "link_exists", lambda _l: False)
    patch(monkeypatch, "sweep_untracked", lambda *_a: [])
    stopped = []
    patch(monkeypatch, "stop_host", lambda h: stopped.append((h.name, h.netns, h.veth)))
    assert lab.main(["down"]) == 0
    assert stopped == [("lab-head", "rvlab-lab-head", "rvl0"), ("lab-store", "rvlab-lab-store", "rvl244")]


# ------------------------------------------------------------ the tools that pick hosts by role


def test_slurm_leaves_the_store_alone(monkeypatch):
    hosts = lab_facts.plan_hosts(2, store=True)
    monkeypatch.setattr(lab, "require_root", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda _d: "/usr/sbin/x")
    monkeypatch.setattr(lab, "load_state", lambda strict: {h.name: h for h in reversed(hosts)})
    configured, started = [], []
    monkeypatch.setattr(lab_slurm, "write_config", lambda head, workers: configured.append((head, workers)))
    monkeypatch.setattr(lab_slurm, "start_on", lambda host: started.append(host.name))
    monkeypatch.setattr(lab_slurm, "wait_idle", lambda head, workers: "")
    assert lab_slurm.main(["up"]) == 0
    assert configured == [(hosts[0], hosts[1:3])]
    assert started == ["lab-head", "lab-worker1", "lab-worker2"]


def test_bench_up_times_the_workers_only():
    assert bench_up.worker_ips(2) == ["198.18.0.11", "198.18.0.12"]
