"""What Ray is told of a cordon: a detached placement group pinned to the worker (a label selector on its node id) that
holds everything new work asks of it, its worker_node and its GPUs. The worker keeps its Ray and whatever runs there:
a hold asked for while a job still uses the worker's GPUs waits until they are free, and then takes them before
anything new. Removing the group gives them back at once; no restart, no drain (Ray's drain has no undo, and a
drained raylet exits once idle).

The plan (plan) is pure and read from the node table and the placement groups Ray lists; only creating and
removing groups needs a driver (apply). A hold is named after the worker's IP and its node id, so the hold of a
worker whose Ray started anew (a new node id) is found stale and replaced."""

import contextlib
import sys
import time

PREFIX = "ray-verl-cordon-"
NAMESPACE = "ray-verl-cordons"
HELD = ("worker_node", "GPU")  # what a cordon takes from a worker: what every job's driver and trainer ask for
NODE_LABEL = "ray.io/node-id"


def name(ip, node_id):
    return f"{PREFIX}{ip}-{node_id}"


def wanted_bundle(node):
    """What the hold of this node asks for: its totals of HELD (worker_node at least)."""
    totals = node.get("resources_total") or {}
    return {key: float(totals[key]) for key in HELD if float(totals.get(key) or 0) > 0}


def holds(groups):
    """The cordon holds among Ray's placement groups (dicts: name, state, placement_group_id), not removed."""
    return [g for g in groups if str(g.get("name") or "").startswith(PREFIX) and g.get("state") != "REMOVED"]


def alive_workers(nodes):
    """{ip: node} of the ALIVE nodes carrying worker_node (one per IP: the newest, as Ray lists a replaced one for a
    while)."""
    found = {}
    for n in sorted(nodes, key=lambda n: n.get("start_time_ms") or 0):  # the newest last, so it stays
        if n.get("state") == "ALIVE" and "worker_node" in (n.get("resources_total") or {}):
            found[n["node_ip"]] = n
    return found


def plan(cordoned_ips, nodes, groups):
    """What to change so that Ray holds exactly the cordoned workers: {"create": [(ip, node)], "remove": [group],
    "held": {ip: state}, "absent": [ip]}: absent, a cordoned worker Ray has no ALIVE node for (held when it joins)."""
    workers = alive_workers(nodes)
    want = {ip: workers[ip] for ip in cordoned_ips if ip in workers}
    keep, remove, held = set(), [], {}
    for group in holds(groups):
        ip = next((ip for ip, node in want.items() if group["name"] == name(ip, node["node_id"])), None)
        if ip is None or ip in keep:
            remove.append(group)
            continue
        keep.add(ip)
        held[ip] = group.get("state")
    create = [(ip, node) for ip, node in sorted(want.items()) if ip not in keep and wanted_bundle(node)]
    return {"create": create, "remove": remove, "held": held,
            "absent": sorted(ip for ip in cordoned_ips if ip not in workers)}


def list_groups(dashboard_url):
    """Ray's placement groups (name, state, id), through the state API at the dashboard (no driver)."""
    from ray.util.state import list_placement_groups

    return [{"name": g.name, "state": g.state, "placement_group_id": g.placement_group_id}
            for g in list_placement_groups(address=dashboard_url, limit=10000, raise_on_missing_output=False)]


def apply(address, changes, ray_module=None):
    """Create and remove the holds `changes` (plan's) through a driver at address (the GCS): the number changed.
    A hold created waits in Ray (PENDING) while its worker is busy: wait_held says when it is placed."""
    if not changes["create"] and not changes["remove"]:
        return 0
    ray = ray_module or _import_ray()
    from ray._raylet import PlacementGroupID
    from ray.util import placement_group, remove_placement_group
    from ray.util.placement_group import PlacementGroup

    with contextlib.redirect_stdout(sys.stderr):  # a module's stdout is its JSON answer
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
        try:
            for group in changes["remove"]:
                remove_placement_group(PlacementGroup(PlacementGroupID.from_hex(group["placement_group_id"])))
            for ip, node in changes["create"]:
                placement_group([wanted_bundle(node)], strategy="STRICT_PACK", lifetime="detached",
                                name=name(ip, node["node_id"]), bundle_label_selector=[{NODE_LABEL: node["node_id"]}])
        finally:
            with contextlib.suppress(Exception):
                ray.shutdown()
    return len(changes["create"]) + len(changes["remove"])


def wait_held(read_groups, ips, wait_s, clock=time.monotonic, sleep=time.sleep, every_s=2):
    """{ip: state} of the holds of ips once every one is CREATED, or when wait_s is up (PENDING: its worker's GPUs
    are still in use; missing: no hold). read_groups: () -> Ray's placement groups (list_groups)."""
    deadline = clock() + wait_s
    while True:
        states = {ip: "missing" for ip in ips}
        for group in holds(read_groups()):
            for ip in ips:
                if group["name"].startswith(f"{PREFIX}{ip}-"):
                    states[ip] = group.get("state")
        if all(state == "CREATED" for state in states.values()) or clock() >= deadline:
            return states
        sleep(min(every_s, max(0.0, deadline - clock())))


def _import_ray():
    import ray

    return ray
