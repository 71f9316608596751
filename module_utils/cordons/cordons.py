"""Cordons: workers no new work lands on, one small typed file each on the shared root, <shared_root>/cordons/<ip>.json.

The file is the truth: what Ray is told (the hold, below) follows from it, and up.yml applies it again whenever Ray on a
worker starts anew. One file per worker, created whole and never replaced, so two runs cordoning at once never lose
one another's cordon: the first one's who/when/why stays and the second is told. The folder is made by root (0755) on
the first cordon, as the acceptance reports' is (conventions.LAYOUT is every node's settled layout).

What Ray is told of a cordon: a detached placement group pinned to the worker (a label selector on its node id) that
holds everything new work asks of it: its worker_node, GPUs and CPUs. The worker keeps its Ray and whatever runs there:
a hold asked for while a job still uses the worker's GPUs waits until they are free, and then takes them before
anything new. Removing the group gives them back at once; no restart, no drain (Ray's drain has no undo, and a
drained raylet exits once idle).

The plan (plan) is pure and read from the node table and the placement groups Ray lists; only creating and
removing groups needs a driver (apply). A hold is named after the worker's IP and its node id, so the hold of a
worker whose Ray started anew (a new node id) is found stale and replaced."""

import contextlib
import errno
import ipaddress
import os
import sys
import time

from ansible.module_utils.base import conventions, files, model
from ansible.module_utils.base.model import Field

DIR = "cordons"
BY = ("person", "retry")
WHY_MAX = 300  # characters of `why` kept: one line in status.yml
MAX_FILES = 1000  # cordon files read at most: more workers than any site has
_WHO = (r"^[A-Za-z0-9._@+-]{1,100}$", "a login name (letters, digits and ._@+-)")

FIELDS = (
    Field("node_ip", "str", "The worker's address (the file's name).", required=True),
    Field("host", "str", "Its inventory name, when known.", nullable=True, pattern=conventions.NAME_RULE),
    Field("since_ms", "int", "When it was cordoned (ms since the epoch).", required=True, minimum=0,
          maximum=files.MS_MAX),
    Field("by", "str", "person (cordon.yml) or retry (a retry going around the node its attempt blamed).",
          required=True, choices=BY),
    Field("who", "str", "Who cordoned it: the login that ran cordon.yml, or the attempt's follower or watcher.",
          pattern=_WHO, nullable=True),
    Field("why", "str", f"Why, on one line (at most {WHY_MAX} characters).", nullable=True),
    Field("job", "str", "The attempt whose blame cordoned it (by retry).", nullable=True, pattern=conventions.ID_RULE),
)


class CordonError(ValueError):
    """A cordon that cannot be read or written, in one line naming the file or the field."""


def canonical(value):
    """The canonical text of an address, or None when it is not one."""
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


def node_ip(value, field="node_ip"):
    """The canonical text of an IP address, or CordonError naming field: a cordon's file name comes from it."""
    ip = canonical(value)
    if ip is None:
        raise CordonError(f"{field}: {conventions.one_line(value, 60)!r} is not an IP address")
    return ip


def folder(shared_root):
    return os.path.join(shared_root, DIR)


def path(shared_root, ip):
    return os.path.join(folder(shared_root), node_ip(ip) + ".json")


def make(ip, *, by, host=None, who=None, why=None, job=None, now_ms=None):
    """A checked cordon (the file's dict): why is cut to one printable line."""
    since_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    entry = {"node_ip": node_ip(ip), "host": host, "since_ms": since_ms,
             "by": by, "who": who, "why": conventions.one_line(why, WHY_MAX) if why else None, "job": job}
    return check(entry, "cordon")


def check(value, where):
    """value as a cordon (FIELDS), or CordonError naming where and the field."""
    try:
        model.check_fields(FIELDS, value, complete=True, open=True)
    except model.FieldError as exc:
        raise CordonError(f"{where}: {exc}") from None
    if value["node_ip"] != node_ip(value["node_ip"], f"{where}: node_ip"):
        raise CordonError(f"{where}: node_ip: not written as Ray writes an address")
    return value


def _ensure_folder(shared_root):
    """The cordons folder, made 0755 when missing; UnsafeFile when it is anything but a directory (a symlink)."""
    files.make_folder(folder(shared_root), "the cordons folder", owned=False)


def add(shared_root, entry):
    """(True, entry) when this call cordoned the worker, (False, the cordon already there) when it was cordoned: its
    first who/when/why stay. A cordon file that cannot be read counts as a cordon (fail closed): its text is None."""
    entry = check(entry, "cordon")
    _ensure_folder(shared_root)
    target = path(shared_root, entry["node_ip"])
    if files.write_new(target, files.json_text(entry).encode("utf-8"), base=shared_root):
        return True, entry
    return False, read_one(shared_root, entry["node_ip"])[0]


def remove(shared_root, ip):
    """Remove a worker's cordon: True when there was one (a file, whatever it held). The name is unlinked in the
    cordons folder reached as the share's files are (never through a symlink)."""
    target = path(shared_root, ip)
    try:
        dir_fd, leaf = files.open_parent(target, shared_root)
    except FileNotFoundError:
        return False
    try:
        os.unlink(leaf, dir_fd=dir_fd)  # unlink never follows a symlink: a link planted there is what is removed
    except FileNotFoundError:
        return False
    finally:
        os.close(dir_fd)
    return True


def read_one(shared_root, ip):
    """(cordon, problem): the worker's cordon (None when it has none) and a one-line problem when its file is
    there but unreadable (the cordon then stands: fail closed)."""
    target = path(shared_root, ip)
    try:
        raw = files.read_small(target, 64 << 10, base=shared_root)
    except (OSError, files.RecordError) as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            return None, None
        return None, f"{target}: cannot be read ({conventions.one_line(exc, 200)}); the worker counts as cordoned"
    if raw is None:
        return None, None
    try:
        entry = check(files.loads_bounded(raw.decode("utf-8")), target)
    except (ValueError, RecursionError) as exc:
        return None, f"{conventions.one_line(exc, 300)}; the worker counts as cordoned"
    if entry["node_ip"] != node_ip(ip):
        return None, f"{target}: names another worker ({entry['node_ip']}); the worker counts as cordoned"
    return entry, None


def _names(shared_root):
    """(names, problem): the folder's file names (up to MAX_FILES + 1, so a cut is seen), and a one-line problem when
    it could not be listed whole: more files than MAX_FILES, or an error listing it."""
    try:
        with os.scandir(folder(shared_root)) as entries:
            names = []
            for entry in entries:
                if not entry.name.startswith(".tmp-"):
                    names.append(entry.name)
                    if len(names) > MAX_FILES:
                        return names[:MAX_FILES], (f"{folder(shared_root)}: more than {MAX_FILES} files: the cordons "
                                                   "cannot all be read (remove what is not a cordon)")
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"{folder(shared_root)}: cannot be listed ({conventions.one_line(exc, 200)})"
    return sorted(names), None


def read_all(shared_root, whole=False):
    """(cordons, problems): every readable cordon, by IP, and one line for each file that is not one (the worker its
    name gives still counts as cordoned: see cordoned), and one when the folder could not be listed whole (whole:
    CordonError then, naming the folder)."""
    names, cut = _names(shared_root)
    if cut and whole:
        raise CordonError(f"{cut}; no hold is changed")
    problems = [cut] if cut else []
    found = {}
    for name in names:
        stem, _, ext = name.rpartition(".")
        try:
            ip = node_ip(stem)
        except CordonError:
            ip = None
        if ext != "json" or ip != stem:
            problems.append(f"{folder(shared_root)}/{conventions.one_line(name, 80)}: not a cordon file (<ip>.json)")
            continue
        entry, problem = read_one(shared_root, ip)
        if entry:
            found[ip] = entry
        elif problem:
            found[ip] = None
            problems.append(problem)
    return found, problems


def cordoned(shared_root):
    """The addresses of every cordoned worker, for what Ray is told (cordons.sync removes the hold of a worker not
    in it); CordonError naming the folder when it cannot be listed whole: fail closed, never a cordon given back
    because it was not read."""
    return set(read_all(shared_root, whole=True)[0])


def line(entry, host=None):
    """One line for status.yml and doctor.yml: `198.18.0.12 (lab-worker2): cordoned by retry for job-1 at
    2026-11-26 19:40 UTC: why`; host names the worker when the file does not (a retry's)."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(entry["since_ms"] / 1000))
    who = entry["by"] + (f" {entry['who']}" if entry.get("who") else "")
    who += f" for {entry['job']}" if entry.get("job") else ""
    host = f" ({entry.get('host') or host})" if entry.get("host") or host else ""
    # why is text from the share (anyone root lets write there could have written it): one printable line.
    why = conventions.one_line(entry.get("why"), WHY_MAX) if entry.get("why") else ""
    return f"{entry['node_ip']}{host}: cordoned by {who} at {when}" + (f": {why}" if why else "")


# What Ray is told of a cordon: its hold.
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
