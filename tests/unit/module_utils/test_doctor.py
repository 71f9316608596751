"""module_utils/node/doctor.py: every node side by side, each wrong check named with its node and fix."""

import copy
import json

import pytest
import ray_doctor
from ansible.module_utils.base import conventions
from ansible.module_utils.node import doctor
from ansible.module_utils.testing import patch_module_args

CONTROL = {"python": "3.11.7", "ray": "2.60.0", "clock": 1000.5}
GPUS = {"10.0.0.10": 0, "10.0.0.11": 4, "10.0.0.12": 4}


def test_a_healthy_cluster_has_no_problem(facts):
    columns, rows, problems, notes = doctor.compare(facts, "head", CONTROL, GPUS)
    assert problems == [] and notes == []
    assert rows["w1"]["verl"] == "0.9.1" and rows["w1"]["gpus"] == "4 declared" and rows["w1"]["snapshots"] == "1 same"
    lines = doctor.table(columns, rows)
    assert lines[0].split()[:3] == ["node", "python", "ray"] and len(lines) == 4


@pytest.mark.parametrize("drift,expected", [
    (lambda f: f["w2"]["packages"].update(verl="9.9.9"), "w2: verl: 9.9.9 (the head has verl 0.9.1"),
    (lambda f: f["w1"].update(python="3.11.8"), "w1: python: 3.11.8 (the head has Python 3.11.7"),
    (lambda f: f["w1"]["snapshots"].update({"verl-0.9.1": "ffff"}), "w1: snapshots: differ: verl-0.9.1"),
    (lambda f: f["w2"].update(snapshots={}), "w2: snapshots: differ: verl-0.9.1 missing"),
    (lambda f: f["w1"]["probes"].pop("w2"), "w1: shared root: misses w2"),
    (lambda f: f["w2"].update(free_gb=1.0), "w2: free: 1 GB (less than 5 GB free"),
    (lambda f: f["w1"].update(clock=1100.0), "w1: clock: +99.5 s (set up NTP"),
    (lambda f: f["w1"].update(gpus_present=2), "w1: gpus: 2 present, Ray 4"),
    (lambda f: f["w2"]["raylet_env"].update(NCCL_SOCKET_IFNAME="eth1"), "w2: iface: eth0 (NCCL_SOCKET_IFNAME=eth1)"),
])
def test_each_drift_is_named_with_node_and_check(facts, drift, expected):
    broken = copy.deepcopy(facts)
    drift(broken)
    problems = doctor.compare(broken, "head", CONTROL, GPUS)[2]
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_another_ray_on_the_control_host_is_named_on_every_node(facts):
    problems = doctor.compare(facts, "head", {**CONTROL, "ray": "2.59.0"}, GPUS)[2]
    assert sorted(p.split(":")[0] for p in problems) == ["head", "w1", "w2"]
    assert "the control host has Ray 2.59.0" in problems[0]


def test_different_interfaces_are_a_note_not_a_failure(facts):
    facts["w2"].update(iface="ib0", raylet_env={"NCCL_SOCKET_IFNAME": "ib0"})
    _, _, problems, notes = doctor.compare(facts, "head", CONTROL, GPUS)
    assert problems == [] and "different interfaces (eth0, ib0)" in notes[0]


@pytest.mark.parametrize("field", ["node_name", "run_id"])
def test_the_doctor_module_refuses_a_bad_id_naming_only_the_field(field, capsys):
    args = {"python": "/x/python", "shared_root": "/private", "head_ip": "10.0.0.10", "node_ip": "10.0.0.11",
            "node_name": "w1", "run_id": "doc-1", field: "../sekrit value"}
    with patch_module_args(args), pytest.raises(SystemExit):
        ray_doctor.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and out["msg"] == f"{field}: must be {conventions.ID_RULE[1]}"


DRIVER_FAILED = "/usr/local/nvidia/bin/nvidia-smi failed (rc=9): NVIDIA-SMI has failed"


def test_a_gpu_worker_ray_counted_without_gpus_is_named(facts):
    # The H200 host: nvidia-smi off the module's PATH, so the worker joined with 0 GPUs; the doctor finds the GPU.
    facts["w1"].update(gpus_present=1)
    problems = doctor.compare(facts, "head", CONTROL, {**GPUS, "10.0.0.11": 0})[2]
    assert problems == [("w1: gpus: 1 present, Ray 0 (restart Ray with --num-gpus matching the node: re-run up.yml "
                         "(ray_worker_num_gpus: auto counts them))")]


def test_a_failing_driver_is_a_problem_where_ray_offers_gpus_and_a_warning_where_not(facts):
    facts["w1"].update(gpus_error=DRIVER_FAILED)
    facts["w2"].update(gpus_error=DRIVER_FAILED)
    _, rows, problems, notes = doctor.compare(facts, "head", CONTROL, {**GPUS, "10.0.0.12": 0})
    assert problems == [(f"w1: gpus: driver failed, Ray 4 ({DRIVER_FAILED}: fix the GPU driver (nvidia-smi must "
                         "list the GPUs), then re-run up.yml)")]
    assert rows["w2"]["gpus"] == "driver failed ?" and notes == [
        (f"warning: w2: gpus: {DRIVER_FAILED} (Ray offers no GPU here, so none is used: fix the driver if this is a "
         "GPU node)")]


def test_a_head_offers_none_or_all_its_gpus_and_a_node_ray_does_not_list_is_not_judged(facts):
    facts["head"].update(gpus_present=8)
    facts["w2"].update(gpus_present=4)
    _, rows, problems, _ = doctor.compare(facts, "head", CONTROL, {"10.0.0.10": 0, "10.0.0.11": 4})
    assert problems == [] and rows["head"]["gpus"] == "8 present, Ray 0" and rows["w2"]["gpus"] == "4 present, Ray -"
    # A one-box site's head is its worker: it offers every GPU it has, or it is wrong like a worker.
    assert doctor.compare(facts, "head", CONTROL, {**GPUS, "10.0.0.10": 8})[2] == []
    problems = doctor.compare(facts, "head", CONTROL, {**GPUS, "10.0.0.10": 4})[2]
    assert problems == [("head: gpus: 8 present, Ray 4 (restart Ray with --num-gpus matching the node: re-run up.yml "
                         "(ray_worker_num_gpus: auto counts them))")]


def test_py_spy_missing_where_rays_agent_looks_is_a_warning_naming_the_fix(facts):
    facts["w2"].update(py_spy=None, ray_python="/usr/bin/python3")
    columns, rows, problems, notes = doctor.compare(facts, "head", CONTROL, GPUS)
    assert problems == [] and rows["w2"]["py-spy"] == "missing ?" and rows["w1"]["py-spy"] == "ok"
    assert notes == [("warning: w2: py-spy: not on the PATH Ray's dashboard agent has (/usr/bin/python3's folder "
                      "first): job.yml -e do=stacks and the watcher's stacks of a hung job fail (install it: "
                      "/usr/bin/python3 -m pip install py-spy)")]
    assert columns[-1] == "py-spy" and doctor.table(columns, rows)[0].split()[-1] == "py-spy"
