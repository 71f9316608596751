"""Which nodes a failed or hung attempt's evidence points at: status.json's `blame`, each {node_ip, host, why,
evidence: {file, line}}, strongest first, one entry per node.

The sources, each a function over what the record already holds, in this order:
  from_stacks      the hang's stacks (stacks.dump's processes.json): while ranks of one class wait in a collective,
                   a rank of that class py-spy could not read, or one that is elsewhere, names its node
  from_node_table  Ray's node table at the end (debug/nodes.json): a node DEAD that ran the job's driver or one of
                   its actors (debug/actors.json), so it died after the job began (before its end, when Ray says when)
  from_logs        the logs the record collected (logs/driver.log, debug/logs/): Ray saying a task's or an actor's node
                   died, Ray's OOM killer naming the node it killed on, and gloo or NCCL naming the peer of a broken
                   connection (the peer most files name: one rank's death breaks every rank's connection to it)
A failure whose evidence names no node (a bad config, an import error, a user's exception) gets none: no guess.
A peer gloo or NCCL names counts only when the job failed of it (its diagnosis: PEER_KINDS) and not when ray_job
stopped the job (a hang, a timeout): ending a job, for any other reason, breaks every rank's connections too.

Everything read is data: files through base/files.py's readers (never through a symlink, bounded), numbers bounded,
every excerpt one printable line cut to EVIDENCE_WIDTH and redacted. Patterns are Ray 2.60's, torch 2.13's gloo
and NCCL's own wording; each is searched once per line, linear in the logs' size.
"""

import collections
import ipaddress
import posixpath
import re

from ansible.module_utils.base import conventions, files
from ansible.module_utils.jobs import stacks
from ansible.module_utils.jobs.status import ADDRESS, Blame
from ansible.module_utils.jobs.status import BLAME_WHY as WHY

MAX_BLAMED = 8  # entries kept, the strongest first
EVIDENCE_WIDTH = 300
INDEX_CAP = 4 << 20  # a processes.json larger than this is not read
DEATH_GRACE_MS = 300_000  # Ray marks a node DEAD some health checks after the job saw it go

_ADDR = r"([0-9A-Fa-f.:]{2,45})"
# Ray 2.60's core worker (a task whose node died) and GCS (an actor whose node died); its raylet's OOM killer.
_TASK_NODE = re.compile(r"Task failed because the node it was running on is dead or unavailable\. Node IP: " + _ADDR)
_ACTOR_NODE = re.compile(r"The actor (?:died|is dead) because its node has died\. Node Id: ([0-9a-f]{4,64})")
_OOM = re.compile(r"Memory on the node \(IP: " + _ADDR + r", ID: ")
# gloo (torch 2.13's, transport/tcp/pair.cc): "<what> rank N ([ip]:port)", older gloo "<what> [ip]:port".
_GLOO = re.compile(r"(?:Connection closed by peer|Read error|Read timeout|Write timeout|Socket closed|"
                   r"Socket unexpectedly closed|writev) (?:rank \d{1,9} \()?\[" + _ADDR + r"\]:\d{1,5}")
# NCCL (misc/socket.cc, transport/net_ib.cc): the peer as "<host><port>", host a name or an address.
_NCCL = re.compile(r"(?:Connection closed by remote peer|Got completion from peer) ([A-Za-z0-9._:-]{1,253})<\d{1,5}>")
# A stack dump's folder as status.json's stall names it, relative to the record.
_DUMP = re.compile(re.escape(stacks.STACKS_DIR) + r"/[0-9A-Za-z_-][0-9A-Za-z._-]{0,63}")
# The diagnoses under which a peer gloo or NCCL names is evidence: the job failed of a broken collective or a dead
# process or node. Under any other (a user's exception, a CUDA OOM) the job's end broke those connections.
PEER_KINDS = ("nccl_gloo", "node_died")


def _line(text):
    return conventions.one_line(str(text)[: 4 * EVIDENCE_WIDTH], EVIDENCE_WIDTH)


def _address(text):
    """text as a node's address (not loopback, not unspecified; as status.json's ADDRESS holds it), else None."""
    if not isinstance(text, str):  # ip_address(7) is 0.0.0.7
        return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    ok = not (ip.is_loopback or ip.is_unspecified) and conventions.matches(ADDRESS, str(ip))
    return str(ip) if ok else None


def _text(value, width=200):
    return _line(value)[:width] if isinstance(value, str) else None


def _rows(value):
    """The mappings of a list (a node or actor list from Ray or a file): anything else is left out."""
    return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []


def _rank(row):
    """One processes.json row as plain bounded values, or None when it is not a row."""
    if not isinstance(row, dict):
        return None
    out = {k: _text(row.get(k)) for k in ("role", "name", "node_ip", "stack", "waits", "in", "what", "why", "file")}
    out["pid"] = files.bounded_int(row.get("pid"))
    out["profiling_off"] = row.get("profiling_off") is True
    return out


def read_ranks(job, stall):
    """The processes of the hang's stack dump (status.stall.stacks/processes.json), or [] when there is none or it
    cannot be trusted (a dump of an older version wrote none)."""
    where = stall.stacks
    if not isinstance(where, str) or not _DUMP.fullmatch(where):
        return []
    try:
        text = files.read_text(posixpath.join(job.rec["dir"], where, stacks.INDEX), INDEX_CAP, base=job.rec["dir"])
        rows = files.loads_bounded(text) if text is not None else []
    except (OSError, ValueError, RecursionError):  # RecordError is a ValueError
        return []
    return [r for r in map(_rank, rows if isinstance(rows, list) else []) if r is not None]


def from_stacks(ranks, where):
    """(ip, why, file, line) of each rank not in the collective others of its class wait in: unreadable (py-spy could
    not read it; a head refusing stacks is no node's fault) or elsewhere, when they are not more than those waiting."""
    actors = [r for r in ranks if r["role"] == "actor" and _address(r["node_ip"])]
    waiting = collections.defaultdict(list)
    for r in actors:
        if r["stack"] == "taken" and r["waits"] == "collective":
            waiting[r["name"]].append(r)
    found = []
    for name, waiters in waiting.items():
        out = [r for r in actors if r["name"] == name and r not in waiters
               and (r["stack"] == "taken" or (r["stack"] == "none" and not r["profiling_off"]))]
        if not out or len(out) > len(waiters):
            continue  # most of the class is not in the collective: no one rank holds it up
        calls = sorted({w["in"] or "a collective" for w in waiters})
        others = f"{len(waiters)} other {name}{'s' if len(waiters) > 1 else ''} wait{'' if len(waiters) > 1 else 's'}"
        for r in out:
            unread = r["stack"] == "none"
            said = f"no stack ({r['why']})" if unread else r["what"]
            found.append((_address(r["node_ip"]), WHY["unreadable" if unread else "elsewhere"], _own(r, where),
                          f"{name} pid {r['pid']} on {r['node_ip']}: {said}; {others} in {', '.join(calls)}"))
    return found or _unanswered(ranks, actors, waiting, where)


def _own(rank, where):
    """Its stack's file, when the index names one in this dump; else the dump."""
    return rank["file"] if (rank["file"] or "").startswith(where + "/") and ".." not in rank["file"] else where


def _unanswered(ranks, actors, waiting, where):
    """When no rank waits in a collective (the peers finished their step and went back to Ray's loop) but the driver
    waits in ray.get: the ranks py-spy cannot read, when fewer than the peers of their class it can."""
    if waiting or not any(r["role"] == "driver" and r["stack"] == "taken" and r["waits"] == "ray" for r in ranks):
        return []
    found = []
    for name in sorted({r["name"] for r in actors}):
        mine = [r for r in actors if r["name"] == name]
        unread = [r for r in mine if r["stack"] == "none" and not r["profiling_off"]]
        read = [r for r in mine if r["stack"] == "taken"]
        if unread and read and len(unread) <= len(read):
            for r in unread:
                line = (f"{name} pid {r['pid']} on {r['node_ip']}: no stack ({r['why']}); the driver waits in ray.get "
                        f"and {len(read)} other {name}(s) were read")
                found.append((_address(r["node_ip"]), WHY["unanswered"], _own(r, where), line))
    return found


def from_node_table(nodes, actors, job_id, driver_node_id, start_ms, end_ms):
    """(ip, why, file, line) of each node Ray calls DEAD that ran the job's driver or one of its actors (so it was
    alive after the job began), and, when Ray says when it ended, ended after the start and not long after the end."""
    ran = collections.Counter(a.get("node_id") for a in _rows(actors) if a.get("job_id") == job_id
                              and isinstance(a.get("node_id"), str))
    found = []
    for node in _rows(nodes):
        if node.get("state") != "DEAD" or not _address(node.get("node_ip")):
            continue
        node_id = node.get("node_id")
        if not isinstance(node_id, str) or not node_id or (node_id != driver_node_id and not ran[node_id]):
            continue
        ended = files.bounded_int(node.get("end_time_ms"), files.MS_MAX)
        if ended is not None and ((start_ms and ended < start_ms) or (end_ms and ended > end_ms + DEATH_GRACE_MS)):
            continue
        what = " and ".join(part for part in ("the driver" if node_id == driver_node_id else "",
                                              f"{ran[node_id]} of its actors" if ran[node_id] else "") if part)
        found.append((_address(node["node_ip"]), WHY["node_died"], "debug/nodes.json",
                      f"node {node_id} ({node['node_ip']}) is DEAD; it ran {what}"))
    return found


def from_logs(sources, nodes, peers=True):
    """(ip, why, file, line) from the logs' words: a node Ray says died (a task's, an actor's: its id through the
    node table), an OOM kill's node, and, with peers, the peer gloo or NCCL names most (in the most files)."""
    by_id = {n.get("node_id"): n.get("node_ip") for n in _rows(nodes) if isinstance(n.get("node_id"), str)}
    by_name = {n.get("node_name").lower(): n.get("node_ip") for n in _rows(nodes) if isinstance(n.get("node_name"), str)}
    found, named = [], collections.defaultdict(dict)  # named: ip -> {file: (why, line)}
    for name, text in sources:
        for line in (text or "").splitlines():
            hit = None
            if "Node IP: " in line and (m := _TASK_NODE.search(line)):
                hit = (_address(m.group(1)), WHY["node_died"])
            elif "Node Id: " in line and (m := _ACTOR_NODE.search(line)):
                hit = (_address(by_id.get(m.group(1)) or ""), WHY["node_died"])
            elif "(IP: " in line and (m := _OOM.search(line)):
                hit = (_address(m.group(1)), WHY["oom"])
            if hit and hit[0]:
                found.append((hit[0], hit[1], name, _line(line)))
                continue
            if peers and "peer" in line:
                if m := _GLOO.search(line):
                    ip, why = _address(m.group(1)), WHY["gloo"]
                elif m := _NCCL.search(line):
                    ip, why = _address(m.group(1)) or _address(by_name.get(m.group(1).lower()) or ""), WHY["nccl"]
                else:
                    continue
                if ip:
                    named[ip].setdefault(name, (why, _line(line)))
    most = max((len(by_file) for by_file in named.values()), default=0)
    for ip, by_file in named.items():
        if len(by_file) == most:
            name, (why, line) = next(iter(by_file.items()))
            found.append((ip, why, name, line))
    return found


def entries(found, nodes, redact):
    """The blame: one entry per node (its first, strongest, evidence), at most MAX_BLAMED, each with the node's name
    when Ray's table gives one other than its address."""
    names = {_address(n.get("node_ip")): n.get("node_name") for n in _rows(nodes)}
    out, seen = [], set()
    for ip, why, where, line in found:
        if ip in seen or len(out) >= MAX_BLAMED:
            continue
        seen.add(ip)
        host = names.get(ip)
        out.append(Blame(node_ip=ip, host=_text(host, 253) if isinstance(host, str) and host != ip else None, why=why,
                         evidence=redact({"file": _line(where), "line": _line(line)})))
    return out


def find(job, status, summary, nodes, actors, sources):
    """The blame of a job that ended FAILED (else []): from its stacks when it hung, the node table, and its logs.

    nodes: the node list taken at the end (evidence.snapshot's, or driver_node_death's newer one); actors: the
    cluster's actors (Ray's summaries, or debug/actors.json's text); sources: the logs as (file, text), the record's
    files they are or will be."""
    if status.state != "FAILED" or status.reason == "PENDING_TIMEOUT":  # a job never placed ran on no node
        return []
    if isinstance(actors, str):
        try:
            actors = files.loads_bounded(actors)
        except (ValueError, RecursionError):
            actors = []
    found = from_stacks(read_ranks(job, status.stall), status.stall.stacks) if status.stall.stacks else []
    found += from_node_table(nodes, actors, summary.get("job_id"), summary.get("driver_node_id"),
                             files.bounded_int(summary.get("start_time"), files.MS_MAX),
                             files.bounded_int(summary.get("end_time"), files.MS_MAX))
    peers = status.reason not in conventions.OWN_STOP_REASONS and status.diagnosis.kind in PEER_KINDS
    found += from_logs(sources, nodes, peers=peers)
    return entries(found, nodes, job.redact)
