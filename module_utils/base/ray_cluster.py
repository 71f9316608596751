"""Talk to a running Ray cluster through its dashboard: jobs SDK, state API, REST.

Shared by every module that reads or changes the cluster, so the client set-up
(token, stray environment) and the shape of what we return live in one place.
Ray is imported lazily: the pure helpers here are unit tested without a cluster.
"""

import json
import os
import urllib.error
import urllib.request

# Ray reads these before the address we pass; proxies have broken job
# submission for users (ray#52454). A module clears them for its own process.
_STRAY_ENV = (
    "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS",
    "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
    "all_proxy", "ALL_PROXY",
)

# Ray job states that will not change any more.
TERMINAL_JOB_STATES = ("STOPPED", "SUCCEEDED", "FAILED")


def prepare_client_env(token_path=None, environ=None):
    """Clear stray variables and point Ray's clients at the cluster token."""
    env = os.environ if environ is None else environ
    for name in _STRAY_ENV:
        env.pop(name, None)
    env["NO_PROXY"] = env["no_proxy"] = "*"
    if token_path:
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN_PATH"] = token_path
    return env


def read_token(token_path):
    """The cluster token, or None when auth is off."""
    if not token_path:
        return None
    with open(token_path, encoding="utf-8") as handle:
        return handle.read().strip()


def auth_headers(token):
    return {"Authorization": "Bearer " + token} if token else {}


def job_client(dashboard_url, token):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(dashboard_url, headers=auth_headers(token))


class RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Ray's dashboard answers its API itself. urllib would follow a redirect to any host and scheme (ftp:, file:)
    and send the token's Authorization header along, so a redirect is an HTTPError, never followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"the dashboard redirected ({code}); not followed", headers,
                                     fp)


def dashboard_opener():
    """The opener of every request to the dashboard that carries the token: no proxy, no redirect."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), RefuseRedirects)


def get_json(dashboard_url, path, token, timeout=10):
    """GET a dashboard REST endpoint (used where the SDK has no call)."""
    request = urllib.request.Request(dashboard_url.rstrip("/") + path, headers=auth_headers(token))
    with dashboard_opener().open(request, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def node_summary(node):
    """Plain dict of a ray.util.state NodeState (or a dict shaped like one)."""
    get = node.get if isinstance(node, dict) else lambda key, default=None: getattr(node, key, default)
    return {
        "node_id": get("node_id"),
        "node_ip": get("node_ip"),
        "node_name": get("node_name"),
        "is_head_node": bool(get("is_head_node")),
        "state": get("state"),
        "resources_total": dict(get("resources_total") or {}),
        "start_time_ms": get("start_time_ms"),
    }


def job_summary(job):
    """Plain dict of a JobDetails/JobInfo (or a dict shaped like one)."""
    get = job.get if isinstance(job, dict) else lambda key, default=None: getattr(job, key, default)
    status = get("status")
    return {
        "submission_id": get("submission_id"),
        "job_id": get("job_id"),
        "status": getattr(status, "value", status),
        "entrypoint": get("entrypoint"),
        "message": get("message"),
        "error_type": get("error_type"),
        "driver_node_id": get("driver_node_id"),
        "driver_exit_code": get("driver_exit_code"),
        "start_time": get("start_time"),
        "end_time": get("end_time"),
        # What its driver holds while it runs (the queue counts it for jobs submitted around the queue too).
        "entrypoint_num_cpus": get("entrypoint_num_cpus"),
        "entrypoint_num_gpus": get("entrypoint_num_gpus"),
        "entrypoint_resources": get("entrypoint_resources"),
    }


def list_nodes(dashboard_url):
    from ray.util.state import list_nodes as _list_nodes

    # detail=True: without it start_time_ms is None, and the readiness rule needs it.
    return [node_summary(n) for n in _list_nodes(address=dashboard_url, limit=10000, detail=True,
                                                 raise_on_missing_output=False)]


def node_resources(gcs_address, timeout=10):
    """Each live node's resources as the GCS's resource view has them (what `ray status` reads): [{node_id, node_ip,
    total, available}], available being what no task, actor, placement group bundle or driver holds."""
    from ray.autoscaler.v2.sdk import get_cluster_status

    status = get_cluster_status(gcs_address, timeout=timeout)
    return [{"node_id": n.node_id, "node_ip": n.ip_address, "total": dict(n.total_resources()),
             "available": dict(n.available_resources())} for n in [*status.active_nodes, *status.idle_nodes]]


def job_bundles(dashboard_url):
    """What each job's placement groups hold, by node: {job_id (hex): {node_id: {resource: amount}}}, over the groups
    that are placed (CREATED), from the state API (a group's creator_job_id is its driver's job)."""
    from ray.util.state import list_placement_groups

    held = {}
    for group in list_placement_groups(address=dashboard_url, limit=10000, detail=True, raise_on_missing_output=False):
        if getattr(group, "state", None) != "CREATED" or not getattr(group, "creator_job_id", None):
            continue
        nodes = held.setdefault(group.creator_job_id, {})
        for bundle in getattr(group, "bundles", None) or []:
            node, amounts = bundle.get("node_id"), bundle.get("unit_resources") or {}
            if node:
                mine = nodes.setdefault(node, {})
                for key, value in amounts.items():
                    mine[key] = mine.get(key, 0) + value
    return held


def list_alive_actor_nodes(dashboard_url):
    """Node ids that host at least one live actor (a job's workers)."""
    from ray.util.state import list_actors

    actors = list_actors(address=dashboard_url, filters=[("state", "=", "ALIVE")], limit=10000,
                         raise_on_missing_output=False)
    return sorted({a.node_id for a in actors if getattr(a, "node_id", None)})


def alive_by_ip(nodes):
    """ALIVE nodes grouped by IP: {ip: [node, ...]}."""
    grouped = {}
    for n in nodes:
        if n["state"] == "ALIVE":
            grouped.setdefault(n["node_ip"], []).append(n)
    return grouped


def one_alive_per_ip(nodes):
    """({ip: node}, [ip, ...]): the one ALIVE node of each IP, and the IPs that have several.

    After a node restarts, Ray lists the replaced node as ALIVE beside the new one until its
    health checks fail; while an IP has two, nothing can tell which one a job would land on.
    """
    grouped = alive_by_ip(nodes)
    return ({ip: found[0] for ip, found in grouped.items() if len(found) == 1},
            sorted(ip for ip, found in grouped.items() if len(found) > 1))


def worker_readiness(nodes, expected):
    """The readiness rule: may a job be scheduled on every expected worker now?

    expected: list of {"host", "ip", "num_gpus", "worker_node"} and, for a worker this run
    (re)started, "started_after_ms": when its `ray start` began, on the worker's own clock; "head": true for a
    one-box site's worker, which is the head node itself.
    A worker is ready when exactly one non-head node (the head, for a one-box site) is ALIVE on its IP, started no
    earlier than that, with the expected worker_node and GPU resources. The node it replaced must no
    longer be ALIVE: Ray keeps listing it for a while and may schedule work onto it.
    Returns (ready, missing) where missing lists "host (ip): reason" strings.
    """
    grouped = alive_by_ip(n for n in nodes if not n["is_head_node"])
    heads = alive_by_ip(n for n in nodes if n["is_head_node"])
    missing = []
    for want in expected:
        found = (heads if want.get("head") else grouped).get(want["ip"], [])
        where = "{} ({})".format(want["host"], want["ip"])
        if not found:
            missing.append(f"{where}: not in the cluster")
            continue
        if len(found) > 1:
            missing.append(f"{where}: {len(found)} ALIVE nodes on this IP, "
                           "waiting for the replaced one to be declared dead")
            continue
        node = found[0]
        started_after = want.get("started_after_ms")
        if started_after and (node.get("start_time_ms") or 0) < int(started_after):
            missing.append(f"{where}: only the node it replaces is listed, waiting for the new one")
            continue
        res = node["resources_total"]
        problems = []
        if float(res.get("worker_node", 0)) != float(want["worker_node"]):
            problems.append("worker_node={}, want {}".format(res.get("worker_node", 0), want["worker_node"]))
        if float(res.get("GPU", 0)) != float(want["num_gpus"]):
            problems.append("GPU={}, want {}".format(res.get("GPU", 0), want["num_gpus"]))
        if problems:
            missing.append("{}: {}".format(where, ", ".join(problems)))
    return not missing, missing


def busy_node_ips(nodes, jobs, actor_node_ids):
    """IPs of nodes where a job's driver or one of its actors is running."""
    busy_ids = set(actor_node_ids)
    busy_ids.update(j["driver_node_id"] for j in jobs
                    if j["status"] in ("PENDING", "RUNNING") and j.get("driver_node_id"))
    return sorted({n["node_ip"] for n in nodes if n["node_id"] in busy_ids and n["state"] == "ALIVE"})


def describe_nodes(nodes):
    """One short line per node, for messages and status output."""
    lines = []
    for n in sorted(nodes, key=lambda n: (not n["is_head_node"], n["node_ip"] or "", n["state"] or "")):
        res = n["resources_total"]
        shown = ", ".join(f"{k}={v:g}" for k, v in sorted(res.items())
                          if not k.startswith("node:") and k not in ("memory", "object_store_memory"))
        lines.append("{} {} {} [{}]".format("head" if n["is_head_node"] else "worker", n["node_ip"], n["state"], shown))
    return lines


def cluster_status_text(dashboard_url, token):
    """What `ray status` prints, from the dashboard (no CLI, no GCS port needed)."""
    data = get_json(dashboard_url, "/api/cluster_status?format=1", token).get("data", {})
    return str(data.get("clusterStatus") or data.get("cluster_status") or data)


def list_actor_summaries(dashboard_url, limit=1000):
    from ray.util.state import list_actors

    return [{"actor_id": a.actor_id, "class_name": a.class_name, "state": a.state, "node_id": a.node_id,
             "pid": a.pid, "name": a.name, "job_id": getattr(a, "job_id", None)}
            for a in list_actors(address=dashboard_url, limit=limit, raise_on_missing_output=False)]


def collect_job_logs(dashboard_url, node_ids, job_id, tail=200, max_files=8, timeout=10):
    """[(name, text)]: what a maintainer asks for when a job fails, bounded in size.

    For each node the job ran on: the tail of its raylet log, and of the error logs of the job's own
    Ray workers (worker-*-<job_id>-*.err). Read through Ray's state API (no ssh, no CLI); a node
    that cannot be read is skipped (a dead node is often why the job failed).
    """
    found = []
    for node_id in sorted({n for n in node_ids if n}):
        try:
            listed = node_logs(dashboard_url, node_id, timeout)
        except Exception:  # noqa: BLE001, S112 - best effort: the node may be dead
            continue
        names = [name for files in listed.values() for name in files]
        wanted = [n for n in names if n == "raylet.out"]
        if job_id:
            wanted += sorted(n for n in names if n.startswith("worker-") and n.endswith(".err") and f"-{job_id}-" in n)
        for name in wanted:
            if len(found) >= max_files:
                return found
            try:
                text = node_log_tail(dashboard_url, node_id, name, tail, timeout)
            except Exception:  # noqa: BLE001, S112 - best effort, like the listing
                continue
            found.append((f"{node_id[:8]}-{name}", text))
    return found


def _log_file(dashboard_url, params, timeout):
    """A streamed GET of the state API's /api/v0/logs/file at the dashboard (Ray's get_log asks the GCS for that
    URL, so it cannot be given the dashboard's), with Ray's own auth headers; raises on any answer but 200."""
    import urllib.parse

    import requests
    from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

    query = urllib.parse.urlencode({**params, "timeout": timeout})
    response = requests.get(f"{dashboard_url.rstrip('/')}/api/v0/logs/file?{query}", stream=True,
                            headers=get_auth_headers_if_auth_enabled({}), timeout=timeout + 10)
    if response.status_code != 200:
        text = response.text[:300]
        response.close()
        raise RuntimeError(f"Ray's log API answered {response.status_code}: {text}")
    return response


def _chunks(response):
    with response:
        yield from response.iter_content(chunk_size=1 << 16)


def job_log_tail(dashboard_url, submission_id, node_id, lines, timeout=30):
    """The last `lines` lines of a job's driver log on its driver's node, through Ray's state API (that node's agent
    reads them from the file's end: no ranged read exists, but a tail costs about what it returns)."""
    params = {"submission_id": submission_id, "node_id": node_id, "lines": lines}
    return b"".join(_chunks(_log_file(dashboard_url, params, timeout))).decode("utf-8", errors="replace")


def job_log_chunks(dashboard_url, submission_id, node_id, timeout=60):
    """A job's whole driver log as byte chunks, streamed through Ray's state API (never held whole)."""
    return _chunks(_log_file(dashboard_url, {"submission_id": submission_id, "node_id": node_id, "lines": -1},
                             timeout))


def node_logs(dashboard_url, node_id, timeout=10, glob="*"):
    """{category: [file names]} of a node's logs, through Ray's state API at the dashboard (as _log_file); glob: only
    the names it matches (the node's agent filters them, so a node with thousands of logs answers with a few)."""
    import urllib.parse

    import requests
    from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

    query = urllib.parse.urlencode({"node_id": node_id, "timeout": timeout, "glob": glob})
    response = requests.get(f"{dashboard_url.rstrip('/')}/api/v0/logs?{query}",
                            headers=get_auth_headers_if_auth_enabled({}), timeout=timeout + 10)
    response.raise_for_status()
    body = response.json()
    if body.get("result") is False:
        raise RuntimeError(f"Ray's log API: {str(body.get('msg'))[:300]}")
    return body["data"]["result"]


def node_log_tail(dashboard_url, node_id, filename, lines, timeout=10, max_bytes=None):
    """The last `lines` lines of a log file on a node (its agent's), through Ray's state API; ANSI codes removed.
    max_bytes: only the stream's last max_bytes are kept, however long its lines (never held whole)."""
    response = _log_file(dashboard_url, {"node_id": node_id, "filename": filename, "lines": lines,
                                         "filter_ansi_code": "true"}, timeout)
    if max_bytes is None:
        return b"".join(_chunks(response)).decode("utf-8", errors="replace")
    kept = bytearray()
    for chunk in _chunks(response):
        kept += chunk
        if len(kept) > 2 * max_bytes:
            del kept[:-max_bytes]
    return bytes(kept[-max_bytes:]).decode("utf-8", errors="replace")
