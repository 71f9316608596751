"""Which nodes a failed or hung attempt's evidence points at: status.json's `blame`, each {node_ip, host, why,
evidence: {file, line}}, strongest first, one entry per node.

A blame is a lever on the cluster (a retry cordons the blamed), so it rests on what Ray says, never on what the job
says: a node is blamed only when Ray's own tables list it as having run the attempt's driver or one of its actors
(ran_on), and its address always comes from Ray's node table. The sources, each over what the record already holds:
  from_stacks      the hang's stacks (stacks.dump's processes.json, written by this module from Ray's tables and
                   py-spy's reading): while ranks of one class wait in a collective, a rank of that class py-spy could
                   not read, or one that is elsewhere, names its node; each rank counts only when Ray's actor table
                   lists an actor of this job with its pid on its node
  from_node_table  Ray's node table at the end (debug/nodes.json): a node DEAD that ran the job's driver or one of
                   its actors, so it died after the job began (before its end, when Ray says when)
The job's logs (its driver's, its workers') are the job's own words: a dataset prompt can print Ray's words for a
dead node naming any address. They feed the diagnosis, never the blame. An OOM kill is no node's fault (the job's
memory), and a broken gloo or NCCL connection names a peer whose node Ray's table shows dead when it is one.
A failure whose evidence names no node (a bad config, an import error, a user's exception) gets none: no guess.

Everything read is data: files through base/files.py's readers (never through a symlink, bounded), numbers bounded,
every excerpt one printable line cut to EVIDENCE_WIDTH and redacted; every pass is linear in what it reads.
"""

import collections
import ipaddress
import posixpath
import re

from ansible.module_utils.base import conventions, files
from ansible.module_utils.jobs.evidence import stacks
from ansible.module_utils.jobs.record.status import ADDRESS, Blame
from ansible.module_utils.jobs.record.status import BLAME_WHY as WHY

MAX_BLAMED = 8  # entries kept, the strongest first
EVIDENCE_WIDTH = 300
INDEX_CAP = 4 << 20  # a processes.json larger than this is not read
DEATH_GRACE_MS = 300_000  # Ray marks a node DEAD some health checks after the job saw it go

# A stack dump's folder as status.json's stall names it, relative to the record.
_DUMP = re.compile(re.escape(stacks.STACKS_DIR) + r"/[0-9A-Za-z_-][0-9A-Za-z._-]{0,63}")


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


def _is_id(value):
    return isinstance(value, str) and bool(value)


def _rows(value):
    """The mappings of a list (a node or actor list from Ray or a file): anything else is left out."""
    return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []


def _rank(row):
    """One processes.json row as plain bounded values, or None when it is not a row."""
    if not isinstance(row, dict):
        return None
    out = {k: _text(row.get(k))
           for k in ("role", "name", "node_ip", "node_id", "stack", "waits", "in", "what", "why", "file")}
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


def ran_on(nodes, actors, job_id, driver_node_id):
    """{node_id: address} of the nodes Ray's tables show ran this job: its driver's node and each node Ray's actor
    table places one of its actors on, each address as Ray's node table gives it (a node it does not list counts
    not)."""
    ids = {a["node_id"] for a in _rows(actors) if job_id and a.get("job_id") == job_id and _is_id(a.get("node_id"))}
    ids.add(driver_node_id if _is_id(driver_node_id) else None)
    return {n["node_id"]: ip for n in _rows(nodes) if n.get("node_id") in ids and isinstance(n.get("node_id"), str)
            and (ip := _address(n.get("node_ip")))}


def verified(ranks, nodes, actors, job_id):
    """The actor ranks of a dump that Ray's actor table vouches for (an actor of this job with that pid on that node),
    each with its node's address from Ray's node table, not from the dump; the driver's rank as the dump has it (it
    is never blamed, only read)."""
    where = ran_on(nodes, actors, job_id, None)
    known = {(a.get("node_id"), files.bounded_int(a.get("pid"))) for a in _rows(actors)
             if job_id and a.get("job_id") == job_id and _is_id(a.get("node_id")) and a["node_id"] in where}
    out = []
    for r in ranks:
        if r["role"] == "driver":
            out.append(r)
        elif r["role"] == "actor" and (r["node_id"], r["pid"]) in known:
            out.append(dict(r, node_ip=where[r["node_id"]]))
    return out


def from_stacks(ranks, where):
    """(ip, why, file, line) of each rank not in the collective others of its class wait in: unreadable (py-spy could
    not read it; a head refusing stacks is no node's fault) or elsewhere, when they are not more than those waiting.
    ranks: verified's (their addresses Ray's). One pass to group them by class, one over each class."""
    by_class = collections.defaultdict(list)
    for r in ranks:
        if r["role"] == "actor" and _address(r["node_ip"]):
            by_class[r["name"]].append(r)
    found, waiting = [], False
    for name, mine in by_class.items():
        waiters = [r for r in mine if r["stack"] == "taken" and r["waits"] == "collective"]
        if not waiters:
            continue
        waiting = True
        out = [r for r in mine if not (r["stack"] == "taken" and r["waits"] == "collective")
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
    return found or ([] if waiting else _unanswered(ranks, by_class, where))


def _own(rank, where):
    """Its stack's file, when the index names one in this dump; else the dump."""
    return rank["file"] if (rank["file"] or "").startswith(where + "/") and ".." not in rank["file"] else where


def _unanswered(ranks, by_class, where):
    """When no rank waits in a collective (the peers finished their step and went back to Ray's loop) but the driver
    waits in ray.get: the ranks py-spy cannot read, when fewer than the peers of their class it can."""
    if not any(r["role"] == "driver" and r["stack"] == "taken" and r["waits"] == "ray" for r in ranks):
        return []
    found = []
    for name in sorted(by_class):
        unread = [r for r in by_class[name] if r["stack"] == "none" and not r["profiling_off"]]
        read = sum(1 for r in by_class[name] if r["stack"] == "taken")
        if unread and read and len(unread) <= read:
            for r in unread:
                line = (f"{name} pid {r['pid']} on {r['node_ip']}: no stack ({r['why']}); the driver waits in ray.get "
                        f"and {read} other {name}(s) were read")
                found.append((_address(r["node_ip"]), WHY["unanswered"], _own(r, where), line))
    return found


def from_node_table(nodes, actors, job_id, driver_node_id, start_ms, end_ms):
    """(ip, why, file, line) of each node Ray calls DEAD that ran the job's driver or one of its actors (so it was
    alive after the job began), and, when Ray says when it ended, ended after the start and not long after the end."""
    ran = collections.Counter(a.get("node_id") for a in _rows(actors) if job_id and a.get("job_id") == job_id
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


def find(job, status, summary, nodes, actors):
    """The blame of a job that ended FAILED (else []): from its stacks when it hung and from the node table, both
    over Ray's own tables. nodes: the node list taken at the end (evidence.snapshot's, or driver_node_death's newer
    one); actors: the cluster's actors (Ray's summaries, or debug/actors.json's text). An actor listing that cannot be
    read vouches for no rank: no stacks blame (fail closed)."""
    if status.state != "FAILED" or status.reason == "PENDING_TIMEOUT":  # a job never placed ran on no node
        return []
    if isinstance(actors, str):
        try:
            actors = files.loads_bounded(actors)
        except (ValueError, RecursionError):
            actors = []
    job_id = summary.get("job_id")
    found = []
    if status.stall.stacks:
        ranks = verified(read_ranks(job, status.stall), nodes, actors, job_id)
        found = from_stacks(ranks, status.stall.stacks)
    found += from_node_table(nodes, actors, job_id, summary.get("driver_node_id"),
                             files.bounded_int(summary.get("start_time"), files.MS_MAX),
                             files.bounded_int(summary.get("end_time"), files.MS_MAX))
    return entries(found, nodes, job.redact)
