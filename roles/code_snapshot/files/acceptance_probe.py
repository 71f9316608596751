"""The site acceptance's measuring job (acceptance.yml; docs/acceptance.md).

Run by Ray as the driver of a job on a worker, with this file's folder (<shared_root>/common/code/acceptance) on
PYTHONPATH:

    <python> -m acceptance_probe --out <the job's record>/checkpoints/acceptance/acceptance.json

It places one actor on every alive worker node (the `worker_node` resource; hard node affinity), each holding all of
its node's GPUs so torch in it sees them, and measures with acceptance_measure: each node's matrix product, one node
at a time (nodes that share CPUs would slow each other); the all-reduce across each node's own GPUs; then one rank per
node over torch.distributed (NCCL when every node's torch sees a GPU, else gloo), rendezvous on the first node's IP at
a free port: every pair of nodes alone, then all of them. The raw times go to --out as JSON, written whole (a new
file renamed into place) in a folder this job makes and only its user may write (write_result); the judgement is the
acceptance module's (module_utils/acceptance/judgement.py). Exit 0 when every measurement ran and its result was
written.
"""

import argparse
import contextlib
import errno
import ipaddress
import json
import os
import secrets
import stat
import sys
import time
import traceback


def _ip_key(ip):
    try:
        return (0, ipaddress.ip_address(ip))
    except ValueError:
        return (1, ip)


def worker_nodes(nodes):
    """The alive nodes that carry worker_node, in IP order (rank 0 is the first)."""
    alive = [n for n in nodes if n.get("Alive") and (n.get("Resources") or {}).get("worker_node")]
    return sorted(alive, key=lambda n: (_ip_key(str(n.get("NodeManagerAddress", ""))), str(n.get("NodeID", ""))))


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ResultError(OSError):
    """The result's folder is not the job's own (a symlink, another user's, writable by others); one line."""


# The result's folder and file: only the job's user writes them; the head (root, maybe squashed to nobody on NFS)
# reads them.
FOLDER_MODE, FILE_MODE = 0o755, 0o644
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def own_folder(path):
    """A descriptor of the folder at path, made (FOLDER_MODE) by this process unless it is already there; its parent
    is the record's checkpoints/, which every user may write (no sticky bit), so the folder is opened without
    following a symlink and must be a directory of this user that nobody else may write. Everything in it is then
    reached through the descriptor: renaming the folder or planting a symlink at its name changes nothing written."""
    parent_fd = os.open(os.path.dirname(path) or ".", _DIR)
    try:
        name = os.path.basename(path)
        try:
            os.mkdir(name, FOLDER_MODE, dir_fd=parent_fd)
        except FileExistsError:
            pass
        try:
            fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ResultError(f"{path}: is not a directory (a symlink is never followed): refused") from None
            raise
    finally:
        os.close(parent_fd)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        os.close(fd)
        raise ResultError(f"{path}: belongs to uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):04o}, not to "
                          f"this job's uid {os.geteuid()} alone: refused")
    os.fchmod(fd, FOLDER_MODE)  # mkdir's mode went through the umask
    return fd


def write_result(path, result):
    """result as JSON at path, whole or not at all, in path's folder (own_folder): a new file (O_CREAT|O_EXCL|
    O_NOFOLLOW, never through anything already there) renamed over path's name inside that folder."""
    data = (json.dumps(result, indent=2, sort_keys=True) + "\n").encode("utf-8")
    path = os.path.abspath(path)
    dir_fd = own_folder(os.path.dirname(path))
    leaf, tmp = os.path.basename(path), f".{os.path.basename(path)}.tmp-{secrets.token_hex(8)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE,
                     dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fchmod(handle.fileno(), FILE_MODE)
                os.fsync(handle.fileno())
            os.replace(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


class PhaseError(RuntimeError):
    """A phase that did not finish on every node in time; its message names the nodes."""


def gather(ray, refs, ips, what, timeout_s):
    """ray.get of one call per node, within timeout_s; PhaseError names the nodes that did not answer or failed."""
    _ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if pending:
        late = [ip for ip, ref in zip(ips, refs) if ref in pending]
        raise PhaseError(f"{what}: no answer within {timeout_s} s from node(s) {', '.join(late)}")
    out = []
    for ip, ref in zip(ips, refs):
        try:
            out.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - any failure of a node's call is that node's, named
            lines = str(exc).strip().splitlines()
            raise PhaseError(f"{what}: node {ip} failed: {type(exc).__name__}: "
                             f"{(lines[-1] if lines else '')[:300]}") from None
    return out


def probe_class(ray):
    @ray.remote(num_cpus=1, max_restarts=0)
    class Probe:
        """One node's measurements (acceptance_measure), in an actor pinned to that node."""

        def __init__(self):
            import acceptance_measure

            self.m = acceptance_measure

        def describe(self):
            return {**self.m.describe(), "ip": ray.util.get_node_ip_address()}

        def matmul(self, n, seconds):
            return self.m.node_matmul(n, seconds)

        def intra(self, payload_bytes, rounds):
            return self.m.intra_node_allreduce(payload_bytes, rounds)

        def free_port(self, ip):
            return self.m.free_port(ip)

        def init_group(self, rank, world, addr, port, backend, timeout_s):
            return self.m.init_group(rank, world, addr, port, backend, timeout_s)

        def allreduce(self, payload_bytes, rounds):
            return self.m.allreduce_suite(payload_bytes, rounds)

        def close(self):
            self.m.close_group()

    return Probe


def measure(ray, args, result):
    """Fill result in place, phase by phase, so a failure keeps what was measured before it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = worker_nodes(ray.nodes())
    if not nodes:
        raise PhaseError("no alive worker node (none carries the worker_node resource)")
    ips = [str(n["NodeManagerAddress"]) for n in nodes]
    result["nodes"] = [{"ip": ip, "node_id": n["NodeID"], "ray_gpus": (n.get("Resources") or {}).get("GPU", 0)}
                       for ip, n in zip(ips, nodes)]
    probe = probe_class(ray)
    # Each actor holds its node's every GPU: an actor without GPUs gets CUDA_VISIBLE_DEVICES="" and torch sees none.
    actors = [probe.options(num_gpus=n["ray_gpus"],
                            scheduling_strategy=NodeAffinitySchedulingStrategy(n["node_id"], soft=False)).remote()
              for n in result["nodes"]]
    try:
        for node, info in zip(result["nodes"], gather(ray, [a.describe.remote() for a in actors], ips,
                                                       "placing one actor per worker", args.timeout_s)):
            node.update(info)
        result["phase"] = "matmul"
        for node, actor, ip in zip(result["nodes"], actors, ips):  # one node at a time
            node["matmul"] = gather(ray, [actor.matmul.remote(args.matmul_n, args.matmul_seconds)], [ip],
                                    "matrix product", args.timeout_s)[0]
            print(f"acceptance_probe: {ip} {node['hostname']}: {node['gpus']} GPU(s), "
                  f"{node['matmul']['tflops']:.4g} TFLOP/s", flush=True)
        result["phase"] = "intra_node"
        for node, actor, ip in zip(result["nodes"], actors, ips):
            node["intra"] = gather(ray, [actor.intra.remote(args.payload_bytes, args.rounds)], [ip],
                                   "all-reduce across a node's GPUs", args.timeout_s)[0]
        if len(actors) < 2:
            result["phase"] = "done"
            return
        result["phase"] = "allreduce"
        from acceptance_measure import backend_for

        backend = backend_for([n["gpus"] for n in result["nodes"]])
        port = gather(ray, [actors[0].free_port.remote(ips[0])], ips[:1], "choosing the rendezvous port",
                      args.timeout_s)[0]
        result["allreduce"] = {"backend": backend, "rendezvous": f"{ips[0]}:{port}", "ranks": ips}
        gather(ray, [a.init_group.remote(rank, len(actors), ips[0], port, backend, args.timeout_s)
                     for rank, a in enumerate(actors)], ips, f"joining the {backend} group", args.timeout_s + 30)
        per_rank = gather(ray, [a.allreduce.remote(args.payload_bytes, args.rounds) for a in actors], ips,
                          f"{backend} all-reduces", args.allreduce_timeout_s)
        result["allreduce"].update(combine(per_rank))
        gather(ray, [a.close.remote() for a in actors], ips, "leaving the group", args.timeout_s)
        result["phase"] = "done"
    finally:
        for actor in actors:
            ray.kill(actor)


def combine(per_rank):
    """One time per pair and for all: the slowest of its ranks (a collective ends when its last rank does)."""
    pairs, all_times = {}, []
    for out in per_rank:
        for key, seconds in out["pairs"].items():
            pairs[key] = max(seconds, pairs.get(key, 0.0))
        all_times.append(out["all"])
    first = per_rank[0]
    return {"bytes": first["bytes"], "rounds": first["rounds"], "pairs": pairs, "all": max(all_times),
            "world": first["world"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON result file (the job's record); without it, stdout only")
    parser.add_argument("--payload-bytes", type=int, default=None, help="all-reduce payload (default by backend)")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--timed", type=int, default=None)
    parser.add_argument("--matmul-n", type=int, default=None)
    parser.add_argument("--matmul-seconds", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=int, default=300, help="longest wait of one phase on the nodes")
    parser.add_argument("--allreduce-timeout-s", type=int, default=900)
    args = parser.parse_args(argv)
    args.rounds = [args.warmup, args.timed] if args.warmup is not None and args.timed is not None else None

    import ray

    ray.init()  # the job's cluster (RAY_ADDRESS is set by the job supervisor)
    result = {"version": 1, "started": _now(), "phase": "placing", "nodes": [], "allreduce": None, "error": None,
              "payload_bytes": args.payload_bytes}
    rc = 0
    try:
        measure(ray, args, result)
    except PhaseError as exc:
        result["error"], rc = f"{result['phase']}: {exc}", 1
    except Exception as exc:  # noqa: BLE001 - the record must say what stopped the measurement
        traceback.print_exc()
        result["error"], rc = f"{result['phase']}: {type(exc).__name__}: {exc}", 1
    result["finished"] = _now()
    print("acceptance_probe: " + json.dumps({k: result[k] for k in ("phase", "error")}), flush=True)
    if args.out:
        try:
            write_result(args.out, result)
        except OSError as exc:  # the folder refused or unwritable: said in one line, the job fails
            print(f"acceptance_probe: cannot write the result: {exc}", flush=True)
            return 1
        print("acceptance_probe: wrote", args.out, flush=True)
    else:
        print(json.dumps(result, indent=2, sort_keys=True))
    return rc


if __name__ == "__main__":
    sys.exit(main())
