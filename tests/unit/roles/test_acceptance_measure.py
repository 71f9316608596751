"""roles/code_snapshot/files/acceptance_measure.py, the site acceptance's measurements, for real: torch's matrix
product on the CPU and torch.distributed's gloo all-reduces between 2 and 3 processes on 127.0.0.1 (loopback).

The project's main venv has no torch: these skip there. Run them in the verl venv (make unit-verl), which has no
Ansible, so without the conftests and with the code's folder on PYTHONPATH:
    PYTHONPATH=roles/code_snapshot/files .venv-verl/bin/python -m pytest --noconftest \
        tests/unit/roles/test_acceptance_measure.py
"""

import importlib.util
import multiprocessing
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FILES = os.path.join(ROOT, "roles", "code_snapshot", "files")
if FILES not in sys.path:
    sys.path.insert(0, FILES)

HAVE_TORCH = importlib.util.find_spec("torch") is not None
pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not importable in this venv (the main venv has "
                                "none); run with the verl venv: make unit-verl")

PAYLOAD = 1 << 20  # 1 MiB: a round is milliseconds on loopback


def _rank(rank, world, port, queue):
    sys.path.insert(0, FILES)
    import acceptance_measure as m

    try:
        m.init_group(rank, world, "127.0.0.1", port, "gloo", timeout_s=60)
        queue.put((rank, m.allreduce_suite(PAYLOAD, (1, 3))))
        m.close_group()
    except BaseException as exc:  # the parent must hear of it, not wait for its timeout
        queue.put((rank, repr(exc)))
        raise


def run_group(world):
    import acceptance_measure as m

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = m.free_port("127.0.0.1")
    procs = [ctx.Process(target=_rank, args=(r, world, port, queue)) for r in range(world)]
    for proc in procs:
        proc.start()
    try:
        out = dict(queue.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    for rank, value in out.items():
        assert isinstance(value, dict), f"rank {rank}: {value}"
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_every_pair_alone_and_all_together_over_gloo(world):
    import acceptance_measure as m

    out = run_group(world)
    assert sorted(out) == list(range(world))
    pairs = {f"{i}-{j}" for i, j in m.pairs(world)}
    for rank, result in out.items():
        assert result["rank"] == rank and result["world"] == world and result["backend"] == "gloo"
        assert result["bytes"] == PAYLOAD and result["rounds"] == [1, 3]
        # Each rank times exactly the pairs it is in, and all of them together.
        assert set(result["pairs"]) == {p for p in pairs if str(rank) in p.split("-")}
        assert all(0 < s < 10 for s in result["pairs"].values()) and 0 < result["all"] < 10


def test_the_probe_combines_ranks_into_one_time_per_pair():
    """acceptance_probe.combine: a collective ends when its slowest rank does (the probe imports Ray lazily)."""
    import acceptance_probe

    out = acceptance_probe.combine([
        {"rank": 0, "world": 3, "bytes": 8, "rounds": [1, 3], "pairs": {"0-1": 1.0, "0-2": 3.0}, "all": 2.0},
        {"rank": 1, "world": 3, "bytes": 8, "rounds": [1, 3], "pairs": {"0-1": 1.5, "1-2": 0.5}, "all": 2.5},
        {"rank": 2, "world": 3, "bytes": 8, "rounds": [1, 3], "pairs": {"0-2": 2.0, "1-2": 0.7}, "all": 2.2}])
    assert out == {"bytes": 8, "rounds": [1, 3], "pairs": {"0-1": 1.5, "0-2": 3.0, "1-2": 0.7}, "all": 2.5,
                   "world": 3}


def test_matmul_on_the_cpu_gives_tflops():
    import acceptance_measure as m

    out = m.node_matmul(n=128, seconds=0.05)
    assert [d["device"] for d in out["devices"]] == ["cpu"]
    assert out["tflops"] > 0 and out["devices"][0]["dtype"] == "float32" and out["devices"][0]["reps"] >= 1


def test_describe_and_the_backend_choice():
    import acceptance_measure as m
    import torch

    info = m.describe()
    assert info["cpu_threads"] >= 1 and info["hostname"] and len(info["gpu_names"]) == info["gpus"]
    if not torch.cuda.is_available():  # the verl venv's CPU torch
        assert info["gpus"] == 0 and m.devices() == ["cpu"]
        assert m.intra_node_allreduce() is None  # fewer than 2 GPUs: nothing across a node's own GPUs
    assert m.backend_for([0, 0, 0]) == "gloo" and m.backend_for([8, 0]) == "gloo" and m.backend_for([8, 8]) == "nccl"
    assert m.pairs(3) == [(0, 1), (0, 2), (1, 2)] and m.pairs(1) == []
