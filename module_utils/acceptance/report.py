"""The site acceptance's report (acceptance.yml): the per-node table and the JUnit XML of a verdict (acceptance.judge).

Plain text and XML from data that came from the nodes: every name and message goes through conventions.one_line, and
the XML is built by ElementTree (which escapes), so a hostname cannot break either.
"""

import xml.etree.ElementTree as ET

from ansible.module_utils.base import conventions

DASH = "-"


def _fmt(value, digits=3):
    return DASH if value is None else f"{value:.{digits}g}"


def _mib(size):
    return DASH if not size else f"{size / (1 << 20):g} MiB"


def table(verdict):
    """The per-node table (host, IP, GPUs, TFLOP/s, bus bandwidth alone and with each peer), then the all-together
    figure, the medians, the slowest nodes and the failures: lines of text."""
    nodes = verdict["nodes"]
    hosts = [conventions.one_line(n["host"], 40) for n in nodes]
    head = ["host", "ip", "GPUs", "TFLOP/s", "alone GB/s"] + [f"{h} GB/s" for h in hosts]
    rows = [head]
    for node, host in zip(nodes, hosts):
        peers = [DASH if peer == node["host"] else _fmt(node.get("peers", {}).get(peer)) for peer in
                 (n["host"] for n in nodes)]
        rows.append([host, conventions.one_line(node["ip"], 40), DASH if node["gpus"] is None else str(node["gpus"]),
                     _fmt(node["tflops"], 4), _fmt(node["intra"])] + peers)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    med = verdict["medians"]
    if verdict.get("all") is not None:
        lines.append(f"all {len(nodes)} workers together ({conventions.one_line(verdict['backend'], 16)}, "
                     f"{_mib(verdict['payload_bytes'])}): {_fmt(verdict['all'])} GB/s bus bandwidth")
    lines.append(f"medians: matrix product {_fmt(med['tflops'], 4)} TFLOP/s, link {_fmt(med['link'])} GB/s "
                 f"(a node's link: its best pair); a node under {verdict['threshold']:g} x a median fails")
    slow = verdict["slowest"]
    lines.append("slowest: matrix product " + _named(slow["tflops"], "TFLOP/s", 4)
                 + "; all-reduce " + _named(slow["link"], "GB/s"))
    if verdict.get("common_node"):
        lines.append(f"every slow pair includes {conventions.one_line(verdict['common_node'], 40)}")
    lines += [f"FAIL {conventions.one_line(m, 400)}" for m in verdict["failures"]]
    lines.append("PASS: every check passed" if verdict["ok"] else f"FAIL: {len(verdict['failures'])} check(s) failed")
    return lines


def _named(pair, unit, digits=3):
    host, value = pair
    return DASH if host is None else f"{conventions.one_line(host, 40)} ({_fmt(value, digits)} {unit})"


# JUnit classnames of the checks' kinds.
CLASSES = {"measure": "acceptance.job", "sft": "acceptance.job", "workers": "acceptance.cluster",
           "outside": "acceptance.cluster",
           "gpus": "acceptance.gpus", "matmul": "acceptance.matmul", "alone": "acceptance.allreduce_alone",
           "link": "acceptance.allreduce_node", "pair": "acceptance.allreduce_pair", "all": "acceptance.allreduce_all"}


def junit(verdict, run_id):
    """The verdict as JUnit XML: one testcase per check, a failure (type SLOW, MISSING or FAILED) with its message."""
    checks = verdict["checks"]
    suite = ET.Element("testsuite", {
        "name": f"acceptance {conventions.one_line(run_id, 128)}", "tests": str(len(checks)),
        "failures": str(sum(not c["ok"] for c in checks)), "skipped": str(sum(bool(c["skipped"]) for c in checks)),
        "errors": "0"})
    for check in checks:
        case = ET.SubElement(suite, "testcase", {"classname": CLASSES.get(check["kind"], "acceptance"),
                                                 "name": conventions.one_line(check["name"], 200)})
        if check["skipped"]:
            ET.SubElement(case, "skipped", {"message": conventions.one_line(check["skipped"], 400)})
        elif not check["ok"]:
            kind = ("SLOW" if check["kind"] in ("matmul", "alone", "link", "pair")
                    else "MISSING" if check["kind"] in ("workers", "gpus") else "FAILED")
            failure = ET.SubElement(case, "failure", {"type": kind, "message": conventions.one_line(check["message"],
                                                                                                    400)})
            failure.text = conventions.one_line(check["message"], 2000)
        elif check["value"] is not None:
            ET.SubElement(case, "system-out").text = conventions.one_line(str(check["value"]), 200)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def record(verdict, run_id, measurement, jobs):
    """result.json's content: the verdict, the run, its jobs and the measurement as parse_result checked it (bus
    bandwidths in GB/s; its pairs as a list, JSON having no pair keys)."""
    if measurement and measurement.get("allreduce"):
        allreduce = dict(measurement["allreduce"])
        allreduce["pairs"] = [{"nodes": [a, b], "busbw_gbs": bw} for (a, b), bw in sorted(allreduce["pairs"].items())]
        measurement = {**measurement, "allreduce": allreduce}
    return {"run_id": run_id, "ok": verdict["ok"], "failures": verdict["failures"], "verdict": verdict,
            "jobs": jobs, "measurement": measurement}
