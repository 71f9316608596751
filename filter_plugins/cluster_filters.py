"""Filters about the cluster's shape, used by the playbooks."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.base import conventions  # isort: skip


def ray_expected_workers(worker_hosts, hostvars):
    """What the readiness gate must see for each worker that got through the worker play (roles/ray_worker).

    Read from the worker's ray_node results: its start (ray_worker_node) when it ran, else its check
    (ray_worker_plan); on a one-box site, the head's (ray_head_node). A worker that failed earlier in the run
    (unreachable, bad mount) has no result that passed; it already fails the run, so the gate does not wait for it.
    """
    expected = []
    for host in worker_hosts:
        # A one-box site's worker is its head (roles/ray_head, carries_work): the head's start tells what it offers.
        found = [hostvars[host].get(name) or {} for name in ("ray_worker_node", "ray_worker_plan", "ray_head_node")]
        ran = [r for r in found if r and not r.get("skipped")]
        if not ran or ran[0].get("failed") or "node_ip" not in ran[0]:
            continue
        result = ran[0]
        expected.append({"host": str(host), "ip": str(result["node_ip"]), "num_gpus": int(result["num_gpus"]),
                         "head": result is found[2],
                         "worker_node": float((result.get("resources") or {}).get("worker_node", 0)),
                         # A (re)started worker counts only once the cluster lists the new node, not the old one.
                         "started_after_ms": int(result.get("started_at_ms") or 0)})
    return expected


def ray_status_summary(cluster, dashboard_url, shared_root, mounts):
    """Lines of the status.yml summary from a ray_cluster_info result."""
    lines = [f"dashboard: {dashboard_url}"]
    if cluster.get("failed") or "nodes" not in cluster:
        lines.append("cluster: UNREACHABLE ({})".format(cluster.get("msg", "no answer")))
    else:
        nodes = cluster["nodes"]
        alive = sum(1 for n in nodes if n["state"] == "ALIVE")
        lines.append(f"ray: {cluster.get('ray_version')}; nodes: {alive} alive, {len(nodes) - alive} dead")
        lines += ["  " + line for line in cluster.get("node_lines", [])]
        running = [j for j in cluster.get("jobs", []) if j["status"] in ("PENDING", "RUNNING")]
        lines.append(f"jobs: {len(running)} running or pending, {len(cluster.get('jobs', []))} in all")
        lines += ["  {} {}".format(j["status"], j["submission_id"]) for j in running]
    lines.append(f"shared root {shared_root}:")
    for host, mount in sorted(mounts.items()):
        lines.append("  {}: {}".format(host, (mount or "").strip() or "NOT MOUNTED"))
    if "records" in cluster:
        lines += record_lines(cluster.get("records"), cluster.get("records_note"))
    return lines


def _said(value, width=200):
    """A value of the module's answer as one printable line (it is data of any shape)."""
    return conventions.one_line(value if isinstance(value, str) else repr(value), width)


def record_lines(chains, note=None):
    """The records section: per chain (ray_cluster_info's records, goodput.view's), its first job, its newest
    attempt's state, its goodput as the final line says it and who it blames; a chain or a part of one that is not
    of the shape expected is shown as unreadable, never a failed summary."""
    chains = chains if isinstance(chains, list) else []
    lines = [f"job records, the newest {len(chains)} chains (by their last write):"]
    if note:
        lines.append(f"  not listed: {_said(note, 300)}")
    for chain in chains:
        if not isinstance(chain, dict) or not conventions.matches(conventions.ID_RULE, chain.get("submission_id")):
            lines.append("  ?: unreadable (not a chain's summary)")
            continue
        state = chain.get("state") if isinstance(chain.get("state"), str) else "unreadable"
        attempts = chain.get("attempts") if isinstance(chain.get("attempts"), int) else 0
        line = f"  {chain['submission_id']}: {_said(state, 40)}" + (f", {attempts} attempts" if attempts > 1 else "")
        shown = chain.get("goodput")
        lines.append(line + (f"; {_said(shown, 300)}" if isinstance(shown, str) and shown else ""))
        blamed = chain.get("blame") if isinstance(chain.get("blame"), list) else []
        for blame in blamed:
            if not isinstance(blame, dict):
                lines.append("    blamed: unreadable")
                continue
            where = f" (in {_said(blame.get('attempt'), 130)})" if attempts > 1 else ""
            lines.append(f"    blamed: {_said(blame.get('node_ip'), 45)}: {_said(blame.get('why'), 100)}{where}")
        unread = chain.get("unreadable") if isinstance(chain.get("unreadable"), list) else []
        lines += [f"    unreadable: {_said(why, 300)}" for why in unread]
    return lines


class FilterModule:
    def filters(self):
        return {"ray_expected_workers": ray_expected_workers, "ray_status_summary": ray_status_summary}
