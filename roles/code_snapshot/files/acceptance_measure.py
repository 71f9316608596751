"""The site acceptance's measurements on one node (acceptance.yml; docs/acceptance.md): torch only, no Ray.

acceptance_probe.py runs these inside one Ray actor per worker; the unit tests run them in plain processes with gloo
on 127.0.0.1. Every time is a median over timed rounds after a few warm-up rounds, so one slow round (another process
taking the CPU for a moment) does not make a node slow.

- matmul_tflops: a square matrix product on every device torch sees (each GPU, or the CPU), TFLOP/s per device.
- intra_node_allreduce: an all-reduce across this node's own GPUs (NVLink/PCIe), one process; None below 2 GPUs.
- init_group / allreduce_suite / close_group: one rank per node over torch.distributed (NCCL on GPUs, gloo on CPU),
  a TCP rendezvous; every pair of ranks alone (one pair at a time, through subgroups), then all ranks together.
"""

import os
import socket
import statistics
import time

import torch
import torch.distributed as dist

# Bytes of one all-reduce's payload, by backend: gloo is the lab's (2 shared cores, veth links: tens of ms per round
# unloaded, under a second on a 50 Mbit/s link), NCCL a real fabric's (large enough to reach its bandwidth).
PAYLOAD_BYTES = {"gloo": 4 << 20, "nccl": 256 << 20}
ROUNDS = {"gloo": (2, 7), "nccl": (5, 20)}  # (warm-up, timed)
MATMUL_N = {"cpu": 1024, "cuda": 8192}
MATMUL_SECONDS = 1.0


def devices():
    """What this process's torch sees: its CUDA devices, or the CPU alone."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [f"cuda:{i}" for i in range(count)] or ["cpu"]


def describe():
    """This node as torch sees it: host, GPUs (count and names), torch and CUDA versions, CPU threads."""
    gpus = [d for d in devices() if d.startswith("cuda")]
    return {"hostname": socket.gethostname(), "gpus": len(gpus),
            "gpu_names": [torch.cuda.get_device_name(i) for i in range(len(gpus))],
            "torch": torch.__version__, "cuda": torch.version.cuda, "cpu_threads": _cpu_threads()}


def _cpu_threads():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def matmul_tflops(device="cpu", n=None, seconds=MATMUL_SECONDS):
    """TFLOP/s of an n x n matrix product on device (bf16 on a GPU, fp32 on the CPU), timed for about `seconds`.

    On the CPU torch uses every core this process may run on (Ray caps an actor's threads at its CPUs)."""
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    n = int(n or MATMUL_N[kind])
    dtype = torch.bfloat16 if kind == "cuda" else torch.float32
    if kind == "cpu":
        torch.set_num_threads(_cpu_threads())
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    torch.matmul(a, b)  # warm-up: kernels chosen, memory touched
    _sync(device)
    start = time.perf_counter()
    torch.matmul(a, b)
    _sync(device)
    once = max(time.perf_counter() - start, 1e-6)
    reps = max(1, min(10000, int(seconds / once)))
    rounds = []
    for _ in range(3):  # three timed rounds of reps products each: their median
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b)
        _sync(device)
        rounds.append((time.perf_counter() - start) / reps)
    per = statistics.median(rounds)
    return {"device": str(device), "n": n, "dtype": str(dtype).replace("torch.", ""), "reps": reps,
            "seconds": per, "tflops": 2.0 * n ** 3 / per / 1e12}


def node_matmul(n=None, seconds=MATMUL_SECONDS):
    """matmul_tflops on each device, one after another; the node's figure is its slowest device's."""
    each = [matmul_tflops(d, n, seconds) for d in devices()]
    return {"tflops": min(e["tflops"] for e in each), "devices": each}


def intra_node_allreduce(payload_bytes=None, rounds=None):
    """Seconds of one all-reduce across this node's own GPUs (torch.cuda.nccl, one process), or None below 2 GPUs."""
    gpus = [d for d in devices() if d.startswith("cuda")]
    if len(gpus) < 2:
        return None
    from torch.cuda import nccl

    warmup, timed = rounds or ROUNDS["nccl"]
    count = int(payload_bytes or PAYLOAD_BYTES["nccl"]) // 4
    tensors = [torch.ones(count, dtype=torch.float32, device=d) for d in gpus]
    times = []
    for i in range(warmup + timed):
        for d in gpus:
            _sync(d)
        start = time.perf_counter()
        nccl.all_reduce(tensors)
        for d in gpus:
            _sync(d)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return {"ranks": len(gpus), "bytes": count * 4, "seconds": statistics.median(times)}


def free_port(ip):
    """A TCP port free on ip now, for the rendezvous (the first rank's node)."""
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def backend_for(gpus_per_rank):
    """NCCL when every rank's torch sees a GPU, else gloo (the lab: torch on CPU)."""
    return "nccl" if gpus_per_rank and all(g > 0 for g in gpus_per_rank) else "gloo"


def init_group(rank, world, addr, port, backend, timeout_s=300):
    """Join the job's process group: rank of world, a TCP rendezvous at addr:port (the first rank's node)."""
    import datetime

    host = f"[{addr}]" if ":" in addr else addr
    if backend == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method=f"tcp://{host}:{int(port)}", rank=int(rank), world_size=int(world),
                            timeout=datetime.timedelta(seconds=timeout_s))
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "backend": dist.get_backend()}


def pairs(world):
    """Every pair of ranks, in one order every rank agrees on."""
    return [(i, j) for i in range(world) for j in range(i + 1, world)]


def _timed_allreduce(tensor, group, warmup, timed, device):
    times = []
    for i in range(warmup + timed):
        _sync(device)
        start = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def allreduce_suite(payload_bytes=None, rounds=None):
    """This rank's seconds per all-reduce: with each peer alone ("i-j", one pair at a time, the others waiting at a
    barrier) and all ranks together ("all"). Every rank must call it, in the same group."""
    rank, world, backend = dist.get_rank(), dist.get_world_size(), dist.get_backend()
    warmup, timed = rounds or ROUNDS.get(backend, ROUNDS["gloo"])
    device = "cuda:0" if backend == "nccl" else "cpu"
    count = max(1, int(payload_bytes or PAYLOAD_BYTES.get(backend, PAYLOAD_BYTES["gloo"])) // 4)
    tensor = torch.ones(count, dtype=torch.float32, device=device)
    # new_group is collective over the whole group: every rank makes every pair's group, in the same order.
    groups = {pair: dist.new_group(list(pair)) for pair in pairs(world)}
    out = {"rank": rank, "world": world, "backend": backend, "bytes": count * 4, "rounds": [warmup, timed],
           "pairs": {}}
    for (i, j), group in groups.items():
        dist.barrier()
        if rank in (i, j):
            out["pairs"][f"{i}-{j}"] = _timed_allreduce(tensor, group, warmup, timed, device)
    dist.barrier()
    out["all"] = _timed_allreduce(tensor, None, warmup, timed, device)
    dist.barrier()
    for group in groups.values():
        dist.destroy_process_group(group)
    return out


def close_group():
    if dist.is_initialized():
        dist.destroy_process_group()
