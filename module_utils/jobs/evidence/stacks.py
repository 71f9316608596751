"""The Python stacks of a job's processes, on demand (job.yml -e do=stacks; a hang found by a follower).

Which processes: the job's driver (Ray's job details, /api/jobs/<submission_id>) and its actors (the state API,
filtered by the job's job_id; node ids mapped to IPs through the node list). Each stack comes from the dashboard's
/worker/traceback, which runs `py-spy dump` on the process's node through that node's agent; Ray answers 403 there
unless the head's Ray runs with RAY_DASHBOARD_ENABLE_PROFILING=1 (ray_node_env). Each request has its own timeout
and they run side by side, so a stopped process (py-spy may hang on it) costs one "no stack" line, never the dump.
The stacks go into the record, redacted, under debug/stacks/<UTC time>/<node_ip>-<pid>-<name>.txt, with one
processes.json beside them: a record per process (its node, pid, class, whether its stack was read and what it waits
in), which blame.py reads to name the node of a rank that cannot be read or is elsewhere while the others wait in a
collective.
"""

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.base import conventions
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.base.files import json_text
from ansible.module_utils.jobs.evidence import worker_logs
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.record.record import now_ms

TRACEBACK_TIMEOUT_S = 20  # one py-spy dump, through the head and the node's agent
API_TIMEOUT_S = 30
MAX_STACK_BYTES = 1 << 20  # a stack read is cut here
MAX_API_BYTES = 32 << 20
PARALLEL = 8
STACKS_DIR = "debug/stacks"
INDEX = "processes.json"  # a dump's per-process records, beside its stacks
SUMMARY_WIDTH = 600
LINE_WIDTH = 240
PROFILING_OFF = "Profiling is disabled"  # Ray's 403 text on /worker/traceback

_COLLECTIVES = frozenset((
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "_all_gather_base", "broadcast",
    "broadcast_object_list", "barrier", "monitored_barrier", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "allreduce", "allgather", "reducescatter"))
# Names too common to mean a collective unless the file is a distributed one.
_POINT = frozenset(("send", "recv", "isend", "irecv", "batch_isend_irecv", "reduce", "gather", "scatter"))
_BACKENDS = ("nccl", "gloo")
_RANK = {"collective": 0, "ray": 1, "data": 2, "sleep": 3}


class ProfilingOff(Failed):
    """The head's Ray does not take stacks (403): the one line names the fix."""


def profiling_off(job):
    return (f"Ray at {job.client.url} refuses stacks (403: profiling is off): set RAY_DASHBOARD_ENABLE_PROFILING=1 "
            "in the head's Ray environment (ray_node_env: the project default has it; a site's own ray_node_env "
            "must keep it) and run up.yml once no job runs (it restarts the head with it)")


def _get(job, path, timeout, limit):
    """(HTTP status, text cut at limit bytes) of GET <dashboard><path> with the token; OSError when unanswered."""
    request = urllib.request.Request(job.client.url.rstrip("/") + path, headers=rc.auth_headers(job.client.token))
    try:
        with rc.dashboard_opener().open(request, timeout=timeout) as response:
            return response.status, _read(response, limit)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, _read(exc, limit)


def _read(response, limit):
    raw = response.read(limit + 1) or b""
    text = raw[:limit].decode("utf-8", errors="replace")
    return text + f"\n... (cut at {limit} bytes)\n" if len(raw) > limit else text


def _listed(job, kind, query=""):
    """Rows of the state API's list of kind (actors, nodes)."""
    code, text = _get(job, f"/api/v0/{kind}?limit=10000{query}", API_TIMEOUT_S, MAX_API_BYTES)
    if code != 200:  # runner.connection_problem makes it one line (401/403: the token)
        raise RuntimeError(f"GET /api/v0/{kind}: HTTP {code}: {conventions.one_line(text, 200)}")
    reply = json.loads(text)
    if not reply.get("result"):
        raise RuntimeError(f"GET /api/v0/{kind}: {conventions.one_line(reply.get('msg'), 200)}")
    return ((reply.get("data") or {}).get("result") or {}).get("result") or []


def processes(job):
    """The job's processes: [{role: driver|actor, name, pid, node_ip, node_id, state}], the driver first."""
    code, text = _get(job, f"/api/jobs/{urllib.parse.quote(job.sid, safe='')}", API_TIMEOUT_S, MAX_API_BYTES)
    if code == 404:
        raise Failed(f"{job.sid}: Ray does not know this job", submission_id=job.sid)
    if code != 200:
        raise RuntimeError(f"GET /api/jobs/{job.sid}: HTTP {code}: {conventions.one_line(text, 200)}")
    details = json.loads(text)
    job.learn_secrets(details.get("runtime_env"))  # its secret values are hidden in every stack written
    found = []
    driver = details.get("driver_info") or {}
    if str(driver.get("pid") or "").isdigit():
        found.append({"role": "driver", "name": "driver", "pid": int(driver["pid"]),
                      "node_ip": driver.get("node_ip_address"), "node_id": details.get("driver_node_id"),
                      "state": details.get("status")})
    job_id = details.get("job_id")
    if job_id:
        ips = {n.get("node_id"): n.get("node_ip") for n in _listed(job, "nodes")}
        query = "&filter_keys=job_id&filter_predicates=%3D&filter_values=" + urllib.parse.quote(job_id, safe="")
        actors = [a for a in _listed(job, "actors", query) if a.get("job_id") == job_id]
        for a in sorted(actors, key=lambda a: (ips.get(a.get("node_id")) or "", a.get("pid") or 0)):
            found.append({"role": "actor", "name": a.get("class_name") or "actor", "pid": a.get("pid"),
                          "node_ip": ips.get(a.get("node_id")), "node_id": a.get("node_id"), "state": a.get("state")})
    return found


def takeable(proc):
    """A process that runs now, where a stack can be asked for."""
    alive = proc["state"] == ("RUNNING" if proc["role"] == "driver" else "ALIVE")
    return alive and isinstance(proc["pid"], int) and proc["pid"] > 0 and bool(proc["node_ip"])


def _take(job, proc):
    """proc with its stack `text`, or `why` there is none."""
    query = urllib.parse.urlencode({"pid": proc["pid"], "ip": proc["node_ip"], "native": 0})
    try:
        code, text = _get(job, f"/worker/traceback?{query}", TRACEBACK_TIMEOUT_S, MAX_STACK_BYTES)
    except (OSError, http.client.HTTPException) as exc:  # URLError, a timeout, a connection reset
        reason = getattr(exc, "reason", exc)
        if isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError):
            why = f"timed out after {TRACEBACK_TIMEOUT_S}s: stopped?"
        else:
            why = f"{type(reason).__name__}: {reason}"
        return dict(proc, text=None, why=why)
    if code == 200:
        return dict(proc, text=text, why=None)
    if code == 403 and PROFILING_OFF in text:
        return dict(proc, text=None, why="403: profiling is off on the head (RAY_DASHBOARD_ENABLE_PROFILING)", off=True)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    after = lines[lines.index("=== stderr ===") + 1:] if "=== stderr ===" in lines else lines
    said = next((ln for ln in after if not ln.startswith("===")), "no reason given")
    who = "py-spy failed" if text.startswith("Failed to execute") else "the dashboard said"
    return dict(proc, text=None, why=f"{who} (HTTP {code}): {said}")


def _stamp(when_ms):
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(when_ms / 1000)) + f".{when_ms % 1000:03d}Z"


def _file_name(proc):
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{proc['node_ip']}-{proc['pid']}-{proc['name']}")[:150]
    return name.lstrip(".") + ".txt"


def dump(job, when_ms, procs=None):
    """Take the stacks of the job's processes (procs: as processes() gives them, or asked for here) into the record.

    Returns {"dir", "files" (both relative to the record), "summary", "lines", "processes"}; ProfilingOff (one line
    naming the fix) when the head refused every stack, and nothing is written then."""
    procs = [p for p in (processes(job) if procs is None else procs) if takeable(p)]
    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(procs)))) as pool:
        taken = list(pool.map(lambda p: _take(job, p), procs))
    worker_logs.copy(job, "stacks", {p.get("node_id") for p in procs})  # what the ranks said, beside their stacks
    if taken and all(t.get("off") for t in taken):
        raise ProfilingOff(profiling_off(job), submission_id=job.sid)
    told = summarize(taken)
    rel = f"{STACKS_DIR}/{_stamp(when_ms)}"
    files = []
    if taken:
        directory = f"{job.rec['dir']}/{rel}"
        os.makedirs(directory, exist_ok=True)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when_ms / 1000))
        for t, line in zip(taken, told["lines"], strict=True):
            head = (f"# {line}\n# {t['role']} on node {t['node_id']}, {t['state']}; py-spy dump through Ray's "
                    f"/worker/traceback at {when}\n\n")
            body = t["text"] if t["text"] is not None else f"no stack: {t['why']}\n"
            job.record.write_text(f"{directory}/{_file_name(t)}", job.redact(head + body))
            files.append(f"{rel}/{_file_name(t)}")
        records = [_record(t, f) for t, f in zip(taken, files, strict=True)]
        job.record.write_text(f"{directory}/{INDEX}", json_text(job.redact(records)))
    return {"dir": rel if files else None, "files": files, "summary": job.redact(told["summary"]),
            "lines": job.redact(told["lines"]), "processes": procs}


def _frame(line):
    """(function, "file:line") of a py-spy frame line `    func (file:line)`, or None (linear: no backtracking)."""
    if not line.startswith((" ", "\t")) or not line.endswith(")"):
        return None
    cut = line.rfind(" (")
    return (line[:cut].strip(), line[cut + 2:-1]) if cut > 0 else None


def _short(where):
    """A file name as py-spy shortens it: without the site-packages prefix (an absolute one: its last two parts)."""
    for mark in ("site-packages/", "dist-packages/"):
        if mark in where:
            return where.rsplit(mark, 1)[1]
    return "/".join(where.split("/")[-2:]) if where.startswith("/") else where


def _kind(qualname, where):
    """What a frame says the thread waits for: (kind, phrase), or None. py-spy 0.4 names methods Class.method."""
    func, low = qualname.rsplit(".", 1)[-1], where.rpartition(":")[0].lower() or where.lower()
    # Every function of torch's c10d module is a process group's call: py-spy names all_gather_into_tensor's frame
    # all_gather_single (torch 2.13), which no list of names would have.
    if func in _COLLECTIVES or (func in _POINT and ("distributed" in low or "collective" in low)) \
            or low.endswith("distributed_c10d.py") or any(b in low for b in _BACKENDS):
        return "collective", f"waits in {func}"
    if low.endswith("ray/_private/worker.py") and func in ("get", "wait", "get_objects"):
        return "ray", "waits in ray." + ("get" if func == "get_objects" else func)
    if func == "_next_data" or "dataloader" in low or "DataLoader" in qualname:
        return "data", "loads data (DataLoader)"
    if func == "sleep":
        return "sleep", "sleeps"
    return None


def verdict(text):
    """One phrase for a py-spy dump: a collective wait, ray.get/wait, data loading, sleeping, else where the main
    thread is (its innermost frame). Linear in the text."""
    return read(text)[1]


def read(text):
    """(kind, phrase, function) of a py-spy dump: kind is what the process waits in (collective, ray, data, sleep;
    None: elsewhere), the phrase is verdict's, the function the frame it was told from (None: no Python frames)."""
    threads, backend = [], None  # [(name, first frame, innermost (kind, phrase, function) found)]
    for line in text.splitlines():
        if line.startswith("Thread "):
            name = line.split('"')[1] if line.count('"') >= 2 else ""
            threads.append([name, None, None])
            continue
        frame = _frame(line) if threads else None
        if frame is None:
            continue
        low = (frame[0] + " " + frame[1]).lower()
        backend = backend or next((b for b in _BACKENDS if b in low), None)
        thread = threads[-1]
        thread[1] = thread[1] or frame
        kind = None if thread[2] else _kind(*frame)
        thread[2] = thread[2] or (kind and (*kind, frame[0].rsplit(".", 1)[-1]))
    if not any(t[1] for t in threads):
        return None, "no Python frames", None
    found = [(_RANK[t[2][0]], t[0] != "MainThread", t[2]) for t in threads if t[2]]
    if found:
        kind, phrase, func = min(found, key=lambda f: f[:2])[2]
        return kind, f"{phrase} ({backend})" if kind == "collective" and backend else phrase, func
    main = next((t for t in threads if t[0] == "MainThread" and t[1]), None) or next(t for t in threads if t[1])
    return None, f"in {main[1][0]} ({_short(main[1][1])})", main[1][0]


def _record(taken, stack_file):
    """One process of a dump as processes.json keeps it: who and where, whether its stack was read (`stack`: taken
    or none, and `why` not), what it waits in (`waits`: collective, ray, data, sleep or null) and `in` which function,
    its stack's file (relative to the record), and whether the head refused it (`profiling_off`)."""
    kind, what, func = read(taken["text"]) if taken["text"] is not None else (None, None, None)
    return {"role": taken["role"], "name": taken["name"], "pid": taken["pid"], "node_ip": taken["node_ip"],
            "node_id": taken["node_id"], "state": taken["state"], "stack": "none" if taken["text"] is None else "taken",
            "waits": kind, "in": func, "what": what, "why": taken["why"], "profiling_off": bool(taken.get("off")),
            "file": stack_file}


def summarize(stacks):
    """{"lines": one line per process, "summary": one line for all}. stacks: dicts as dump takes them (role, name,
    pid, node_ip and the stack `text`, or `why` there is none); processes alike are told once with their count."""
    lines, groups = [], {}
    for s in stacks:
        what = verdict(s["text"]) if s.get("text") is not None else f"no stack ({s.get('why')})"
        where = f"pid {s['pid']} on {s['node_ip']}"
        lines.append(conventions.one_line(f"{s['name'] if s['role'] == 'actor' else 'driver'} {where}: {what}",
                                          LINE_WIDTH))
        groups.setdefault((s["role"], s["name"], what), []).append(where)
    parts = []
    for (role, name, what), wheres in groups.items():
        sep = ":" if what.startswith("no stack") else ""
        if len(wheres) > 1:
            parts.append(f"{len(wheres)}x {name}{sep} {what}")
        else:
            parts.append(f"driver{sep} {what}" if role == "driver" else f"{name} {wheres[0]}{sep} {what}")
    summary = "; ".join(parts) if parts else "no running process to take a stack of"
    return {"lines": lines, "summary": conventions.one_line(summary, SUMMARY_WIDTH)}


def stacks_action(module, job):
    """action=stacks: the stacks of a running job's processes into its record (in check mode: which it would take)."""
    status, info = job.status(), job.info()
    state = jc.summary(info)["status"] if info is not None else "unknown to Ray"
    if state != "RUNNING":
        raise Failed(f"{job.sid}: not running ({state}): no stacks to take", submission_id=job.sid)
    if status.state != state and not status.final and not module.check_mode:
        status.state = state  # what Ray says, as action=status would record it
        job.save_status(status)
    if module.check_mode:
        procs = [p for p in processes(job) if takeable(p)]
        names = [f"{p['name']} pid {p['pid']} on {p['node_ip']}" for p in procs]
        line = conventions.one_line(f"would take the stacks of {len(procs)} processes: {', '.join(names)}",
                                    SUMMARY_WIDTH)
        taken = {"dir": None, "files": [], "summary": line, "lines": names, "processes": procs}
        return dict(job.result(status, f"{job.sid}: {line}"), changed=bool(procs), stacks=taken)
    taken = dump(job, now_ms())
    where = f" (in {taken['dir']})" if taken["dir"] else ""
    return dict(job.result(status, f"{job.sid}: {taken['summary']}{where}"), stacks=taken)
