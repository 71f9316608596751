"""What the site acceptance's measuring job writes (roles/code_snapshot/files/acceptance_probe.py), made up, for the
tests of its judgement (tests/unit/module_utils/test_acceptance.py) and of its module
(tests/unit/library/test_ray_acceptance_module.py)."""

MIB4 = 4 << 20
WORKERS = [{"host": f"lab-worker{i}", "ip": f"198.18.0.1{i}"} for i in (1, 2, 3)]


def raw_result(tflops=(0.05, 0.05, 0.05), pair_s=None, all_s=0.03, gpus=0, ray_gpus=4, cuda=None, error=None):
    """A result for len(tflops) workers (198.18.0.11, ...): pair_s maps "i-j" to seconds per round (default 0.01 for
    every pair: 0.42 GB/s bus bandwidth at 4 MiB)."""
    ips = [f"198.18.0.1{i + 1}" for i in range(len(tflops))]
    pairs = pair_s or {f"{i}-{j}": 0.01 for i in range(len(ips)) for j in range(i + 1, len(ips))}
    nodes = [{"ip": ip, "node_id": f"n{i}", "hostname": f"lab-worker{i + 1}", "gpus": gpus, "gpu_names": [],
              "ray_gpus": ray_gpus, "torch": "2.13.0+cpu", "cuda": cuda, "cpu_threads": 2,
              "matmul": {"tflops": t, "devices": [{"device": "cpu", "tflops": t}]}, "intra": None}
             for i, (ip, t) in enumerate(zip(ips, tflops))]
    allreduce = None if len(ips) < 2 else {
        "backend": "gloo", "rendezvous": f"{ips[0]}:40000", "ranks": ips, "bytes": MIB4, "rounds": [2, 7],
        "pairs": pairs, "all": all_s, "world": len(ips)}
    return {"version": 1, "phase": "done" if error is None else "allreduce", "nodes": nodes, "allreduce": allreduce,
            "error": error}


def slow_worker3():
    """lab-worker3 behind a 50 Mbit/s link: its pairs take 0.7 s a round instead of 0.01 s."""
    return raw_result(pair_s={"0-1": 0.01, "0-2": 0.7, "1-2": 0.7}, all_s=1.0)
