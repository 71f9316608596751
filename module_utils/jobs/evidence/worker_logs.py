"""The job's own Ray workers' logs copied into its record, so the blame can be read after the cluster is gone.

Each actor of the job writes worker-<worker id>-<job id>-<pid>.out and .err on its node; Ray keeps them there, and
a cluster rebuilt (or a node that died) takes them along. When the stacks of a job are taken (a hang found, or
job.yml -e do=stacks) and when it is finalised (every final state), the tail of each of them on every node the job
ran on (its actors' nodes and its driver's, from Ray's state API) is copied, redacted, to
logs/workers/<node_ip>/<file name>, and logs/workers/README says what was copied, what was skipped and why, and the
bounds. A later copy overwrites a file with its newer tail and never removes what an earlier one got from a node that
cannot be read any more. Best effort: copy() never raises.

A node's IP and a file's name come from Ray, so they are data: the IP must be an address (ipaddress, its canonical
form is the folder's name), the name a worker log's of this job (NAME); anything else is skipped, never a path. Files
are written through the record's writer (no symlink followed, nothing outside the record).
"""

import errno
import ipaddress
import os
import re
import time

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record.record import now_ms

# A worker's log ends where it says what it did last; these bound one file, whatever its lines' length.
TAIL_LINES = 2000
TAIL_BYTES = 256 << 10
# What logs/workers may hold for one job (files kept from earlier copies count): a job on many nodes must not fill
# the share; 128 files are 8 ranks' .out and .err on 8 nodes.
MAX_FILES = 128
MAX_BYTES = 32 << 20
# A copy's wall time: an unanswering node costs a request's timeout, and finalize and the hang's stop wait for this.
BUDGET_S = 90
DIR = ("logs", "workers")
README = "README"
# Ray's ids are hex: a worker's 28 bytes, a job's 4 (room is left for either to grow).
NAME = re.compile(r"worker-[0-9a-f]{8,64}-(?P<job>[0-9a-f]{4,32})-[0-9]{1,10}\.(?:out|err)")
JOB_ID = re.compile(r"[0-9a-f]{4,32}")
_IP_TEXT = re.compile(r"[0-9A-Fa-f.:]{2,45}")  # no zone (fe80::1%eth0), no other character
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def folder_ip(value):
    """The canonical text of an IP Ray gave, or None when it is not an address."""
    if not isinstance(value, str) or not _IP_TEXT.fullmatch(value):
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def wanted(name, job_id):
    """Whether a name from Ray's listing is a log of one of this job's workers."""
    found = NAME.fullmatch(name) if isinstance(name, str) else None
    return found is not None and found["job"] == job_id


def tail(text):
    """(text, whether it was cut): at most TAIL_LINES lines and TAIL_BYTES bytes of its end; a line cut by the bytes
    is dropped whole (a secret cut in two would escape redaction)."""
    lines = text.splitlines(keepends=True)
    cut = len(lines) > TAIL_LINES
    text = "".join(lines[-TAIL_LINES:]) if cut else text
    data = text.encode("utf-8", errors="replace")
    if len(data) > TAIL_BYTES:
        data, cut = data[-TAIL_BYTES:], True
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
    return data.decode("utf-8", errors="replace"), cut


def copy(job, why, node_ids=(), job_id=None, nodes=None):
    """Copy the job's workers' logs into its record (see the module's doc); why: what took the copy ("final",
    "stacks"). node_ids: nodes known to have run the job (its actors' nodes are asked for too); job_id: Ray's, else
    from its JobInfo; nodes: Ray's node table if the caller has it. Returns what README says, as a dict; None when
    nothing could be done (then README says why, where it can)."""
    try:
        return _copy(job, why, set(node_ids), job_id, nodes)
    except Exception as exc:  # noqa: BLE001 - evidence is best effort: it never stops a finalize or a hang's stop
        try:
            said = f"no copy: {conventions.one_line(str(exc), 200)}"
            _write(job, [], README, job.redact(_readme(why, None, {}, [said])))
        except Exception:  # noqa: BLE001, S110 - the record cannot be written: nothing more to say where
            pass
        return None


def _copy(job, why, node_ids, job_id, nodes):
    if job_id is None:
        info = job.info()
        job_id = jc.summary(info)["job_id"] if info is not None else None
        node_ids.add(jc.summary(info)["driver_node_id"] if info is not None else None)
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        raise ValueError("Ray gave no job id of the hex it uses")
    notes = []
    try:
        node_ids |= {a.get("node_id") for a in job.client.actors() if a.get("job_id") == job_id}
    except Exception as exc:  # noqa: BLE001 - the nodes known already are still read
        notes.append(f"the job's actors could not be listed: {conventions.one_line(str(exc), 200)}")
    table = {n.get("node_id"): n for n in (job.client.nodes() if nodes is None else nodes) if isinstance(n, dict)}
    deadline = time.monotonic() + BUDGET_S
    found, hosts = {}, {}  # {ip: [(node_id, name)]}, {ip: {"node": ..., "skipped": [...], "copied": [...]}}
    for node_id in sorted(n for n in node_ids if isinstance(n, str) and n):
        shown = conventions.one_line(node_id, 20)
        node = table.get(node_id)
        ip = folder_ip(node.get("node_ip")) if node else None
        if node is None or ip is None:
            why = "not in Ray's node table" if node is None else "its IP from Ray is not an address"
            notes.append(f"node {shown}: skipped, {why}")
            continue
        host = hosts.setdefault(ip, {"nodes": [], "skipped": [], "copied": [], "names": 0})
        host["nodes"].append(shown)
        if node.get("state") == "DEAD":
            host["skipped"].append(f"node {shown} is DEAD in Ray's node table")
            continue
        if time.monotonic() >= deadline:
            host["skipped"].append(f"node {shown}: not asked, out of time ({BUDGET_S} s)")
            continue
        try:
            names = job.client.worker_log_names(node_id, job_id)
        except Exception as exc:  # noqa: BLE001 - a node that cannot be read (it may be dead) is skipped and noted
            host["skipped"].append(f"node {shown} cannot be read: {conventions.one_line(str(exc), 200)}")
            continue
        good = sorted({n for n in names if wanted(n, job_id)})
        host["names"] += len([n for n in names if not wanted(n, job_id)])
        found.setdefault(ip, []).extend((node_id, n) for n in good)
    on_disk = {ip: _listing(job, ip) for ip in hosts}
    count = sum(len(names) for names in on_disk.values())
    total = sum(size for names in on_disk.values() for size in names.values())
    for ip, node_id, name in _round_robin(found):
        host, kept = hosts[ip], on_disk[ip]
        if any(c[0] == name for c in host["copied"]):
            continue  # the same file through a second node id of one IP (a node restarted on it)
        if time.monotonic() >= deadline:
            host["skipped"].append(f"{name}: out of time ({BUDGET_S} s)")
            continue
        if name not in kept and count >= MAX_FILES:
            host["skipped"].append(f"{name}: the job's cap of {MAX_FILES} files is reached")
            continue
        try:
            text, cut = tail(job.client.worker_log_tail(node_id, name, TAIL_LINES, TAIL_BYTES))
        except Exception as exc:  # noqa: BLE001 - one file that cannot be read is that file only
            host["skipped"].append(f"{name} cannot be read: {conventions.one_line(str(exc), 200)}")
            continue
        data = job.redact(text).encode("utf-8")
        if total - kept.get(name, 0) + len(data) > MAX_BYTES:
            host["skipped"].append(f"{name}: the job's cap of {MAX_BYTES} bytes is reached")
            continue
        _write(job, [ip], name, data)
        count, total = count + (name not in kept), total - kept.get(name, 0) + len(data)
        kept[name] = len(data)
        host["copied"].append((name, len(data), cut))
    for ip, host in hosts.items():
        copied = {c[0] for c in host["copied"]}
        host["kept"] = sorted(n for n in on_disk[ip] if n not in copied)
    _write(job, [], README, job.redact(_readme(why, job_id, hosts, notes)))
    return {"job_id": job_id, "hosts": hosts, "notes": notes}


def _round_robin(found):
    """(ip, node_id, name) taking each node's files in turn, so one node with many workers cannot use up the cap."""
    queues = [[(ip, *item) for item in sorted(items, key=lambda i: i[1])] for ip, items in sorted(found.items())]
    for i in range(max((len(q) for q in queues), default=0)):
        yield from (q[i] for q in queues if i < len(q))


def _dir_fd(job, parts, make):
    """A descriptor of the record's logs/workers/<parts>, reached through no symlink (made when make; else None when
    it is not there)."""
    fd = os.open(job.rec["dir"], _DIR_FLAGS)
    try:
        for part in (*DIR, *parts):
            if make:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(exc.errno, "not a directory of the record (a symlink is never followed)",
                                  os.path.join(*DIR, *parts)) from None
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _listing(job, ip):
    """{name: size} of the worker logs an earlier copy left in logs/workers/<ip>/ (regular files of NAME's shape)."""
    fd = _dir_fd(job, [ip], make=False)
    if fd is None:
        return {}
    try:
        return {e.name: e.stat(follow_symlinks=False).st_size for e in os.scandir(fd)
                if NAME.fullmatch(e.name) and e.is_file(follow_symlinks=False)}
    finally:
        os.close(fd)


def _write(job, parts, name, data):
    os.close(_dir_fd(job, parts, make=True))
    job.record.write_text(os.path.join(job.rec["dir"], *DIR, *parts, name), data)


def _readme(why, job_id, hosts, notes):
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ms() / 1000))
    lines = ["The job's own Ray workers' logs (worker-<worker id>-<job id>-<pid>.out and .err), copied from each node",
             "it ran on through Ray's state API, redacted; of each file its last lines only.",
             f"Bounds: {TAIL_LINES} lines and {TAIL_BYTES} bytes a file; {MAX_FILES} files and {MAX_BYTES} bytes in",
             f"all; {BUDGET_S} s a copy. A later copy overwrites a file with its newer tail; a file from a node that",
             "cannot be read any more stays as an earlier copy left it.",
             "", f"Last copy: {when} ({why}); Ray's job id: {job_id or 'unknown'}", ""]
    for ip, host in sorted(hosts.items()):
        lines.append(f"{ip}/ (node {', '.join(host['nodes'])}):")
        lines += [f"  copied {n} ({size} bytes{', its tail' if cut else ''})" for n, size, cut in host["copied"]]
        lines += [f"  kept from an earlier copy: {n}" for n in host.get("kept", ())]
        lines += [f"  skipped: {s}" for s in host["skipped"]]
        if host["names"]:
            lines.append(f"  skipped: {host['names']} names Ray listed that are not a worker log of this job")
    lines += [f"Note: {n}" for n in notes]
    return "\n".join(lines) + "\n"
