"""Filters about the cluster's shape, used by the playbooks."""


def ray_expected_workers(worker_hosts, hostvars):
    """What the readiness gate must see for each inventory worker.

    A worker that failed before recording its expectation (unreachable, say) is
    still expected, with the resources it would have declared by default, so the
    gate names it instead of silently skipping it.
    """
    expected = []
    for host in worker_hosts:
        hv = hostvars[host]
        want = hv.get("ray_worker_expect")
        if not want:
            want = {"host": host, "ip": hv.get("ray_node_ip") or hv.get("ansible_host") or host,
                    "num_gpus": 0, "worker_node": 1}
        expected.append({"host": str(want["host"]), "ip": str(want["ip"]),
                         "num_gpus": int(want["num_gpus"]), "worker_node": float(want["worker_node"])})
    return expected


def ray_status_summary(cluster, dashboard_url, shared_root, mounts):
    """Lines of the status.yml summary from a ray_cluster_info result."""
    lines = ["dashboard: %s" % dashboard_url]
    if cluster.get("failed") or "nodes" not in cluster:
        lines.append("cluster: UNREACHABLE (%s)" % cluster.get("msg", "no answer"))
    else:
        nodes = cluster["nodes"]
        alive = sum(1 for n in nodes if n["state"] == "ALIVE")
        lines.append("ray: %s; nodes: %d alive, %d dead" % (cluster.get("ray_version"), alive, len(nodes) - alive))
        lines += ["  " + line for line in cluster.get("node_lines", [])]
        running = [j for j in cluster.get("jobs", []) if j["status"] in ("PENDING", "RUNNING")]
        lines.append("jobs: %d running or pending, %d in all" % (len(running), len(cluster.get("jobs", []))))
        lines += ["  %s %s" % (j["status"], j["submission_id"]) for j in running]
    lines.append("shared root %s:" % shared_root)
    for host, mount in sorted(mounts.items()):
        lines.append("  %s: %s" % (host, (mount or "").strip() or "NOT MOUNTED"))
    return lines


class FilterModule:
    def filters(self):
        return {"ray_expected_workers": ray_expected_workers, "ray_status_summary": ray_status_summary}

