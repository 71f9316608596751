"""What Ray is told of a cordon: a detached placement group pinned to the worker (a label selector on its node id) that
holds everything new work asks of it: its worker_node, GPUs and CPUs. The worker keeps its Ray and whatever runs there:
a hold asked for while a job still uses the worker's GPUs waits until they are free, and then takes them before
anything new. Removing the group gives them back at once; no restart, no drain (Ray's drain has no undo, and a
drained raylet exits once idle).

The plan (plan) is pure and read from the node table and the placement groups Ray lists; only creating and
removing groups needs a driver (apply). A hold is named after the worker's IP and its node id, so the hold of a
worker whose Ray started anew (a new node id) is found stale and replaced."""

import contextlib
import sys
import time

from ansible.module_utils.base.cordons import canonical

PREFIX = "ray-verl-cordon-"
NAMESPACE = "ray-verl-cordons"
HELD = ("worker_node", "GPU", "CPU")  # what new work asks of a worker: a driver, GPU ranks, CPU ranks and tasks
NODE_LABEL = "ray.io/node-id"


def name(ip, node_id):
    return f"{PREFIX}{ip}-{node_id}"


def wanted_bundle(node):
    """What the hold of this node asks for: all it offers of HELD. Its CPUs too: a job's ranks on CPU (verl's CPU
    device, a CPU-only worker) ask only for CPUs, and the lab saw a retry's rank land on a node held for worker_node
    and GPUs alone."""
    totals = node.get("resources_total") or {}
    return {key: float(totals[key]) for key in HELD if float(totals.get(key) or 0) > 0}


def holds(groups):
    """The cordon holds among Ray's placement groups (dicts: name, state, placement_group_id), not removed."""
    return [g for g in groups if str(g.get("name") or "").startswith(PREFIX) and g.get("state") != "REMOVED"]


def worker_nodes(nodes):
    """[(ip, node)] of every ALIVE node carrying worker_node, its address canonical: a replaced node Ray still lists
    as ALIVE beside the new one is held too (work may land on either)."""
    return [(canonical(n.get("node_ip")), n) for n in nodes if n.get("state") == "ALIVE" and canonical(n.get("node_ip"))
            and "worker_node" in (n.get("resources_total") or {})]


def alive_workers(nodes):
    """{ip: node} of the ALIVE worker nodes, the newest of each address."""
    found = {}
    for ip, n in sorted(worker_nodes(nodes), key=lambda pair: pair[1].get("start_time_ms") or 0):
        found[ip] = n
    return found


def plan(cordoned_ips, nodes, groups):
    """What to change so that Ray holds exactly the cordoned workers: {"create": [(ip, node)], "remove": [group],
    "held": {ip: state}, "absent": [ip]}: absent, a cordoned worker Ray has no ALIVE node for (held when it joins)."""
    targets = {name(ip, n["node_id"]): (ip, n) for ip, n in worker_nodes(nodes) if ip in cordoned_ips}
    keep, remove, held = set(), [], {}
    for group in holds(groups):
        if group["name"] in targets and group["name"] not in keep:
            keep.add(group["name"])
            ip = targets[group["name"]][0]
            held[ip] = group.get("state") if held.get(ip) in (None, "CREATED") else held[ip]
        else:
            remove.append(group)
    create = [targets[n] for n in sorted(targets) if n not in keep and wanted_bundle(targets[n][1])]
    alive = {ip for ip, _ in targets.values()}
    return {"create": create, "remove": remove, "held": held,
            "absent": sorted(ip for ip in cordoned_ips if ip not in alive)}


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
                try:
                    placement_group([wanted_bundle(node)], strategy="STRICT_PACK", lifetime="detached",
                                    name=name(ip, node["node_id"]),
                                    bundle_label_selector=[{NODE_LABEL: node["node_id"]}])
                except Exception as exc:  # another run made the same hold a moment ago: it is there, as wanted
                    if "already exists" not in str(exc):
                        raise
        finally:
            with contextlib.suppress(Exception):
                ray.shutdown()
    return len(changes["create"]) + len(changes["remove"])


def wait_held(read_groups, ips, wait_s, clock=time.monotonic, sleep=time.sleep, every_s=2, nodes=None):
    """{ip: state} of the holds of ips once every one is CREATED, or when wait_s is up (PENDING: its worker's GPUs
    are still in use; missing: no hold). read_groups: () -> Ray's placement groups (list_groups). With nodes, only
    the holds of the nodes listed ALIVE now count (a stale one never stands in for the current node's)."""
    wanted = {ip: {name(ip, n["node_id"]) for i, n in worker_nodes(nodes) if i == ip} for ip in ips} if nodes else {}
    deadline = clock() + wait_s
    while True:
        states = {ip: "missing" for ip in ips}
        for group in holds(read_groups()):
            for ip in ips:
                mine = group["name"] in wanted[ip] if wanted.get(ip) else group["name"].startswith(f"{PREFIX}{ip}-")
                if mine and states[ip] in ("missing", "CREATED"):
                    states[ip] = group.get("state")
        if all(state == "CREATED" for state in states.values()) or clock() >= deadline:
            return states
        sleep(min(every_s, max(0.0, deadline - clock())))


def sync(read_cordoned, nodes, read_groups, address, check=False, apply_changes=None):
    """Make Ray hold exactly the cordoned workers (read_cordoned: () -> their addresses, the files read afresh): plan,
    apply, then plan once more from the files and the holds as they are now, and apply what another run changed
    meanwhile. Returns the last plan, with "changed"; in check mode the first, nothing applied."""
    apply_changes = apply_changes or apply
    changes = plan(read_cordoned(), nodes, read_groups())
    if check or not (changes["create"] or changes["remove"]):
        return {**changes, "changed": bool(changes["create"] or changes["remove"])}
    apply_changes(address, changes)
    again = plan(read_cordoned(), nodes, read_groups())
    if again["create"] or again["remove"]:
        apply_changes(address, again)
        again = plan(read_cordoned(), nodes, read_groups())
    return {**again, "changed": True}


def _import_ray():
    import ray

    return ray
