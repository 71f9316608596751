"""library/ray_node.py's num_gpus: a number is taken as given, auto is a GPU worker that must find a GPU."""

from ansible.module_utils.node import probe as node_probe
from ray_node_helpers import run


def worker(head, num_gpus):
    return {**head, "role": "worker", "node_ip": "10.0.0.11", "head_ip": "10.0.0.10", "num_gpus": num_gpus}


def no_driver(monkeypatch):
    monkeypatch.setattr(node_probe, "find_nvidia_smi", lambda: None)
    monkeypatch.setattr(node_probe, "_load_nvml", lambda: None)


def test_an_auto_worker_without_gpus_fails_naming_the_node_and_the_fix(host, head, capsys, monkeypatch):
    no_driver(monkeypatch)
    code, out = run(capsys, worker(head, "auto"))
    assert code == 1 and host.commands == [], out  # nothing started, not even the version probe
    assert out["msg"].startswith("10.0.0.11: num_gpus auto found no GPU (nvidia-smi not found on PATH or in ")
    assert out["msg"].endswith("; install the driver or set ray_worker_num_gpus: 0 for a CPU worker")


def test_a_cpu_worker_says_0_and_a_declared_count_is_taken_as_given(host, head, capsys, monkeypatch):
    no_driver(monkeypatch)
    for wanted, flag in (("0", "--num-gpus=0"), ("4", "--num-gpus=4")):  # the lab declares 4 logical GPUs
        code, out = run(capsys, {**worker(head, wanted), "force": True})
        assert code == 0 and out["num_gpus"] == int(wanted) and flag in host.commands[-1], out


def test_an_auto_worker_starts_with_the_gpus_it_counted(host, head, capsys, monkeypatch):
    monkeypatch.setattr(node_probe, "count_gpus", lambda run_command: (8, "/usr/local/nvidia/bin/nvidia-smi"))
    code, out = run(capsys, worker(head, "auto"))
    assert code == 0 and out["num_gpus"] == 8 and "--num-gpus=8" in host.commands[-1], out
