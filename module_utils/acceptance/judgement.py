"""The site acceptance's judgement (acceptance.yml; docs/acceptance.md): from the measuring job's raw times to checks.

The measuring job (roles/code_snapshot/files/acceptance_probe.py) writes raw times into its record; this reads them as
data of any shape (checked field by field, never trusted; every number finite and within bounds), keeps only the
inventory's workers (a node outside the inventory is refused, named in one failing check, and moves no median),
computes TFLOP/s and all-reduce bus bandwidths, and judges each node against the others, in time linear in the nodes
and pairs:

- a node whose matrix product is under `threshold` (one half) of the nodes' median fails, named;
- a node's link is its best pair's bus bandwidth (what it reaches with a good peer); a node whose link is under
  `threshold` of the median link fails, named. The median of the pairs themselves cannot be the reference: with three
  workers one slow node is in two of the three pairs, so their median is itself slow;
- a pair under `threshold` of the median link is slow; the node in every slow pair is named as their common node;
- the all-reduce across a node's own GPUs ("alone") against the median of the nodes that have two or more;
- the GPUs torch sees against the node's Ray GPUs (when torch is a CUDA build, or the site requires GPUs);
- every inventory worker measured; the measuring job and the SFT job SUCCEEDED.
Rendering (the table, JUnit XML) is report.py's.
"""

import posixpath
import re
import statistics

from ansible.module_utils.base import conventions, files

THRESHOLD = 0.5
GB = 1e9
# Where the measuring job writes its result: this file in a folder of its record's checkpoints/ that the job makes and
# only its user may write (checkpoints/ itself every user may write); acceptance.yml gives the probe this --out, the
# ray_acceptance module reads it there.
RESULT_DIR, RESULT_FILE = "acceptance", "acceptance.json"
_PAIR = re.compile(r"^(0|[1-9][0-9]{0,5})-(0|[1-9][0-9]{0,5})$")
MAX_NODES = 4096
# Bounds of the result's numbers (a number past them refuses the result, naming the field): a time in seconds is at
# least MIN_SECONDS (no all-reduce takes less; a smaller one would make an infinite bandwidth), a count of GPUs at most
# MAX_GPUS, any other number finite within files.VALUE_MAX.
MIN_SECONDS = 1e-9
MAX_GPUS = 1 << 16
# Nodes outside the inventory named in the failing check, at most (then how many more).
NAMED_OUTSIDE = 8


def result_path(shared_root, measure_id):
    """The measuring job's result file: <shared_root>/jobs/<measure_id>/checkpoints/acceptance/acceptance.json."""
    return posixpath.join(conventions.job_dir(shared_root, measure_id), "checkpoints", RESULT_DIR, RESULT_FILE)


class AcceptanceError(ValueError):
    """The measuring job's result has an unexpected shape; str() names the field, never its value."""


def _num(value, where, positive=True):
    """A finite number within files.VALUE_MAX (an int of any length compared, never converted first), as a float."""
    value = files.bounded_number(value)
    if value is None or (positive and value <= 0) or value < 0:
        raise AcceptanceError(f"{where}: must be a {'positive' if positive else 'non-negative'} number up to "
                              f"{files.VALUE_MAX:g}")
    return float(value)


def _seconds(value, where):
    seconds = _num(value, where)
    if seconds < MIN_SECONDS:
        raise AcceptanceError(f"{where}: must be a time of at least {MIN_SECONDS:g} s")
    return seconds


def _int(value, where, minimum=0, maximum=files.COUNT_MAX):
    if files.bounded_int(value, maximum, minimum) is None:
        raise AcceptanceError(f"{where}: must be an integer from {minimum} to {maximum}")
    return value


def _text(value, where, limit=200):
    if not isinstance(value, str):
        raise AcceptanceError(f"{where}: must be a string")
    return conventions.one_line(value, limit)


def _dict(value, where):
    if not isinstance(value, dict):
        raise AcceptanceError(f"{where}: must be a mapping")
    return value


def parse_result(raw, inventory_ips):
    """The measuring job's result as checked plain data: {nodes, allreduce, error, phase, outside}; AcceptanceError
    otherwise. inventory_ips: the addresses of the inventory's workers. A node at another address is refused: it is
    left out with its pairs (so it moves no median and no pair names it), and listed in `outside` (at most
    NAMED_OUTSIDE of them, then `outside_more`: how many others), which fails the verdict."""
    raw = _dict(raw, "result")
    inventory = {str(ip) for ip in inventory_ips}
    nodes_raw = raw.get("nodes")
    if not isinstance(nodes_raw, list) or len(nodes_raw) > MAX_NODES:
        raise AcceptanceError(f"result.nodes: must be a list of at most {MAX_NODES} nodes")
    ips = [_text(_dict(node, f"result.nodes[{i}]").get("ip"), f"result.nodes[{i}].ip", 64)
           for i, node in enumerate(nodes_raw)]
    if len(set(ips)) != len(ips):
        raise AcceptanceError("result.nodes: an ip appears twice")
    outside = [ip for ip in ips if ip not in inventory]
    nodes = [_parse_node(node, f"result.nodes[{i}]", ip)
             for i, (node, ip) in enumerate(zip(nodes_raw, ips)) if ip in inventory]
    allreduce = raw.get("allreduce")
    if allreduce is not None:
        # Without pairs the all-reduces did not finish (the result's error says why): nothing of them to judge.
        allreduce = _dict(allreduce, "result.allreduce")
        allreduce = _parse_allreduce(allreduce, ips, inventory) if "pairs" in allreduce else None
    error = raw.get("error")
    return {"nodes": nodes, "allreduce": allreduce,
            "error": None if error is None else _text(error, "result.error", 500),
            "phase": _text(raw.get("phase", ""), "result.phase", 40),
            "outside": outside[:NAMED_OUTSIDE], "outside_more": max(0, len(outside) - NAMED_OUTSIDE)}


def _parse_node(node, where, ip):
    out = {"ip": ip,
           "hostname": _text(node.get("hostname", ""), f"{where}.hostname", 64),
           "ray_gpus": _num(node.get("ray_gpus", 0), f"{where}.ray_gpus", positive=False),
           "gpus": _int(node["gpus"], f"{where}.gpus", 0, MAX_GPUS) if "gpus" in node else None,
           "cuda": _text(node["cuda"], f"{where}.cuda", 32) if node.get("cuda") is not None else None,
           "tflops": None, "intra": None}
    if node.get("matmul") is not None:
        out["tflops"] = _num(_dict(node["matmul"], f"{where}.matmul").get("tflops"), f"{where}.matmul.tflops")
    if node.get("intra") is not None:
        intra = _dict(node["intra"], f"{where}.intra")
        ranks = _int(intra.get("ranks"), f"{where}.intra.ranks", 2, MAX_GPUS)
        out["intra"] = bus_bandwidth(_int(intra.get("bytes"), f"{where}.intra.bytes", 1),
                                     _seconds(intra.get("seconds"), f"{where}.intra.seconds"), ranks)
    return out


def _parse_allreduce(raw, ips, inventory):
    """The all-reduces between the inventory's nodes: every pair is checked, a pair with a node outside it dropped."""
    ranks = raw.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != len(ips) or any(
            not isinstance(r, str) or conventions.one_line(r, 64) != ip for r, ip in zip(ranks, ips)):
        raise AcceptanceError("result.allreduce.ranks: must list the nodes' ips in their order")
    size = _int(raw.get("bytes"), "result.allreduce.bytes", 1)
    pairs = {}
    for key, seconds in _dict(raw.get("pairs"), "result.allreduce.pairs").items():
        match = _PAIR.match(str(key))
        if not match or not int(match[1]) < int(match[2]) < len(ips):
            raise AcceptanceError("result.allreduce.pairs: a key is not 'i-j' with ranks i < j of the nodes")
        bw = bus_bandwidth(size, _seconds(seconds, f"result.allreduce.pairs[{key}]"), 2)
        a, b = ips[int(match[1])], ips[int(match[2])]
        if a in inventory and b in inventory:
            pairs[(a, b)] = bw
    return {"backend": _text(raw.get("backend", ""), "result.allreduce.backend", 16), "bytes": size,
            "pairs": pairs, "all": bus_bandwidth(size, _seconds(raw.get("all"), "result.allreduce.all"), len(ips))}


def bus_bandwidth(size, seconds, ranks):
    """An all-reduce's bus bandwidth in GB/s (nccl-tests' busbw: size / time x 2(n-1)/n), what each link carried."""
    return size / seconds * 2 * (ranks - 1) / ranks / GB


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _check(kind, name, problem=None, skipped=None, value=None):
    return {"kind": kind, "name": name, "ok": problem is None, "message": problem, "skipped": skipped,
            "value": value}


def judge(result, workers, measure_job=None, sft_job=None, threshold=THRESHOLD, require_gpus=False):
    """The acceptance's verdict: {ok, nodes, pairs, all, medians, slowest, slow_pairs, common_node, checks, failures}.

    result: parse_result's with the same workers' ips (or None when the job left none); workers: the inventory's
    [{host, ip}]; measure_job / sft_job: {submission_id, state, error} of each job (None: not run). Linear in the nodes
    and pairs: each pair is visited a fixed number of times."""
    by_ip = {str(w["ip"]): str(w["host"]) for w in workers}
    # parse_result kept only the inventory's nodes; one that is not (a result parsed for other workers) is dropped.
    nodes = [dict(n) for n in (result or {}).get("nodes", []) if n["ip"] in by_ip]
    for node in nodes:
        node["host"] = by_ip[node["ip"]]
        node["peers"] = {}
    name = {n["ip"]: n["host"] for n in nodes}
    checks = [_job_check("measure", measure_job, result)]
    missing = [f"{host} ({ip})" for ip, host in by_ip.items() if ip not in name]
    checks.append(_check("workers", "every worker measured",
                         f"not measured (not an alive Ray worker node, or the job ended first): {', '.join(missing)}"
                         if missing else None, value=len(nodes)))
    outside = (result or {}).get("outside") or []
    if outside:
        more = (result or {}).get("outside_more") or 0
        checks.append(_check("outside", "only inventory workers measured",
                             "refused, not judged (not an inventory worker): "
                             + ", ".join(conventions.one_line(ip, 64) for ip in outside)
                             + (f" and {more} more" if more else "")))
    allreduce = (result or {}).get("allreduce")
    pairs = {(a, b): bw for (a, b), bw in (allreduce or {}).get("pairs", {}).items() if a in name and b in name}
    by_node = {n["ip"]: n for n in nodes}
    for (a, b), bw in pairs.items():  # each node's peers, in one pass over the pairs
        by_node[a]["peers"][name[b]] = bw
        by_node[b]["peers"][name[a]] = bw
    for node in nodes:
        node["link"] = max(node["peers"].values()) if node["peers"] else None
    medians = {"tflops": median(n["tflops"] for n in nodes), "link": median(n["link"] for n in nodes),
               "intra": median(n["intra"] for n in nodes)}
    any_cuda = any(n["cuda"] or n["gpus"] for n in nodes)
    for node in nodes:
        checks += _node_checks(node, medians, threshold, require_gpus or any_cuda)
    slow = {pair for pair, bw in pairs.items() if medians["link"] and bw < threshold * medians["link"]}
    slow_pairs = sorted((name[a], name[b], pairs[(a, b)]) for a, b in slow)
    slow_nodes = {n["host"] for n in nodes if n["link"] is not None and n["link"] < threshold * medians["link"]}
    common = _common_node(slow_pairs)
    for (a, b), bw in sorted(pairs.items()):
        pa, pb = name[a], name[b]
        problem = None
        if (a, b) in slow:
            why = [h for h in (pa, pb) if h in slow_nodes]
            problem = (f"{pa}-{pb}: all-reduce bus bandwidth {bw:.3g} GB/s, under {threshold:g} x the median link "
                       f"{medians['link']:.3g} GB/s; " + (f"{' and '.join(why)} is slow" if why
                                                          else f"the link between {pa} and {pb} is slow"))
        checks.append(_check("pair", f"{pa}-{pb}", problem, value=bw))
    if allreduce:
        checks.append(_check("all", f"all {len(nodes)} workers", value=allreduce["all"]))
    elif len(nodes) > 1:
        checks.append(_check("all", "all workers", "the all-reduces did not run (see the measuring job)"))
    else:
        checks.append(_check("all", "all workers", skipped="one worker: no all-reduce across workers"))
    # No SFT job: not asked for (acceptance_sft=false), which the playbook says by leaving its id out.
    checks.append(_job_check("sft", sft_job) if sft_job is not None
                  else _check("sft", "the SFT job", skipped="not asked (acceptance_sft=false)"))
    failures = [c["message"] for c in checks if not c["ok"]]
    slowest = {key: min(((n[key], n["host"]) for n in nodes if n[key] is not None), default=(None, None))[::-1]
               for key in ("tflops", "link")}
    return {"ok": not failures, "threshold": threshold, "nodes": nodes, "medians": medians,
            "backend": (allreduce or {}).get("backend"), "payload_bytes": (allreduce or {}).get("bytes"),
            "all": (allreduce or {}).get("all"), "slowest": slowest, "slow_pairs": [list(p) for p in slow_pairs],
            "common_node": common, "checks": checks, "failures": failures}


def _job_check(kind, job, result=None):
    label = "the measuring job" if kind == "measure" else "the SFT job"
    if job is None:
        return _check(kind, label, f"{label} did not run")
    sid, state = conventions.one_line(job.get("submission_id") or "?", 128), job.get("state")
    if state != "SUCCEEDED" or (kind == "measure" and (result is None or result.get("error"))):
        why = job.get("error") or (result or {}).get("error") or ("it left no result" if kind == "measure" else "")
        return _check(kind, sid, f"{sid}: {conventions.one_line(state or 'not submitted', 40)}"
                                 + (f": {conventions.one_line(why, 300)}" if why else ""))
    return _check(kind, sid, value=state)


def _node_checks(node, medians, threshold, want_gpus):
    host, out = node["host"], []
    label = f"{host} ({node['ip']})"
    if node["gpus"] is None:
        out.append(_check("gpus", host, f"{label}: not measured (its actor never answered)"))
        return out
    ray_gpus = int(node["ray_gpus"])
    wrong = want_gpus and ray_gpus and node["gpus"] != ray_gpus
    out.append(_check("gpus", host, f"{label}: torch sees {node['gpus']} GPU(s), Ray gives the node {ray_gpus}"
                      if wrong else None, value=node["gpus"]))
    if node["tflops"] is None:
        out.append(_check("matmul", host, f"{label}: no matrix product measured"))
    elif node["tflops"] < threshold * medians["tflops"]:
        out.append(_check("matmul", host, f"{label}: matrix product {node['tflops']:.3g} TFLOP/s, under "
                          f"{threshold:g} x the median {medians['tflops']:.3g} TFLOP/s", value=node["tflops"]))
    else:
        out.append(_check("matmul", host, value=node["tflops"]))
    if node["intra"] is not None and node["intra"] < threshold * medians["intra"]:
        out.append(_check("alone", host, f"{label}: all-reduce across its own GPUs {node['intra']:.3g} GB/s, under "
                          f"{threshold:g} x the median {medians['intra']:.3g} GB/s", value=node["intra"]))
    elif node["intra"] is not None:
        out.append(_check("alone", host, value=node["intra"]))
    if node["link"] is None:
        return out
    if node["link"] < threshold * medians["link"]:
        best = max(node["peers"], key=node["peers"].get)
        out.append(_check("link", host, f"{label}: all-reduce bus bandwidth at most {node['link']:.3g} GB/s with any "
                          f"peer (best: {best}), under {threshold:g} x the median link {medians['link']:.3g} GB/s",
                          value=node["link"]))
    else:
        out.append(_check("link", host, value=node["link"]))
    return out


def _common_node(slow_pairs):
    """The one node in every slow pair (a slow node or its link), or None: no slow pair, or one pair (either end)."""
    if len(slow_pairs) < 2:
        return None
    common = set.intersection(*({a, b} for a, b, _ in slow_pairs))
    return min(common) if len(common) == 1 else None
