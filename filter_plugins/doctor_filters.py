"""The doctor's judgement as a filter: every node's ray_doctor results side by side (module_utils/node/doctor.py)."""

import importlib.metadata
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.node import doctor  # isort: skip


def _control_ray():
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return None


def ray_doctor_report(hosts, hostvars, head, ray_nodes, min_free_gb=5, max_skew_s=5, store=None):
    """{lines, problems}: the table (a line per node) and one line per node, check and fix that is wrong.
    store: the GCS store's address, namespace, reconnect window and the head's check of it (None: no store)."""
    facts, problems = {}, []
    for host in hosts:
        found = hostvars[host].get("doctor_facts") or {}
        probes = hostvars[host].get("doctor_probes") or {}
        if found.get("failed") or "python" not in found:
            problems.append(f"{host}: unreachable or failed: {found.get('msg', 'no answer')}")
            continue
        facts[host] = dict(found, probes=probes.get("probes") or {})
    if head not in facts:
        return {"lines": [], "problems": problems or [f"{head}: the head did not answer"]}
    ray_gpus = {n["node_ip"]: n["resources_total"].get("GPU", 0) for n in ray_nodes if n.get("state") == "ALIVE"}
    clock = float(hostvars[head].get("doctor_control_clock") or 0)
    control = {"python": platform.python_version(), "ray": _control_ray(), "clock": clock}
    columns, rows, found_problems, notes = doctor.compare(facts, head, control, ray_gpus, float(min_free_gb),
                                                          float(max_skew_s))
    store_line, store_problems = doctor.store_check(store, facts, head)
    return {"lines": doctor.table(columns, rows) + notes + [store_line],
            "problems": problems + found_problems + store_problems}


class FilterModule:
    def filters(self):
        return {"ray_doctor_report": ray_doctor_report}
