"""The queue on the head: what the decision core (module_utils/queue/, plain data) is asked with, read from the share
and from Ray, and what its answer is written back as. submit.py's admit() holds the lock and submits; this file reads
and records, and submits nothing.

- The lock: an exclusive flock on <shared_root>/jobs/.queue.lock (QUEUE_LOCK, a regular file opened without following
  a symlink, files.open_lock), held while one admission reads, decides and submits, so two control hosts (a submit, a
  follower's wait, a watcher's pass) never admit one job twice nor over-commit the workers. Taken before any record's
  own lock, never while one is held.
- The queue: the open records (open_index) whose status.json is QUEUED, each with its spec (config/job_spec.json)
  as the entry's placement.
- What runs: every job Ray has not ended (list_jobs). One with a record of ours is its submitter's, of its class;
  one without (submitted around the queue, with the token) is AROUND's, of the default class, never preemptible, with
  no max_run_s. What each holds is what Ray says its placement groups hold (the state API, by the driver's job id),
  plus its driver's entrypoint resources on the driver's node (Ray's job info, ours or not); Ray's available
  resources already count everything held, so a job around the queue uses what it takes whether or not its holds are
  known. What a job of ours was admitted to take and Ray does not show held yet (its driver before it starts, its
  gang before its groups are made; a command job's gang always) is reserved from the free resources where it would
  go (reserve_unplaced), so two admissions a second apart never give the same workers twice.
- The workers: each live node that carries worker_node, with Ray's total and available resources (the GCS's view,
  ray_cluster.node_resources), cordoned when the cordons' folder names it (a cordoned one takes no admission).
- Fair share: the records changed within the window (a directory's mtime, so years of records cost one stat each)
  with their own start and end times and ranks.
"""

import contextlib
import errno
import os
import time

from ansible.module_utils.base import conventions, files
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.cordons import cordons
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.record.record import Record, now_ms, read_json, record_lock
from ansible.module_utils.jobs.record.status import FAILED, QUEUED, TERMINAL, RecordError
from ansible.module_utils.queue import admit, fit, share
from ansible.module_utils.queue import model as qm

QUEUE_LOCK = ".queue.lock"
LOCK_WAIT_S = 300  # an admission that holds the lock longer (a dashboard that never answers) fails the next one
AROUND = "unqueued"  # the submitter of a job Ray runs without a record of ours (NAME_RULE)
SPEC_CAP = 1 << 20


class QueueBusy(OSError):
    """Another admission held the queue's lock for longer than we wait."""


@contextlib.contextmanager
def queue_lock(shared_root, timeout_s=None):
    """Hold the queue's lock (see the module's doc), waiting up to timeout_s (LOCK_WAIT_S) for it."""
    timeout_s = LOCK_WAIT_S if timeout_s is None else timeout_s
    jobs = conventions.paths(shared_root)["jobs"]
    path = os.path.join(jobs, QUEUE_LOCK)

    def busy():
        return QueueBusy(errno.EBUSY, f"another admission has held the queue's lock for {timeout_s}s; is it stuck?",
                         path)

    with files.held_lock(path, timeout_s, busy):
        yield


def ranks(spec):
    """What quotas and fair share count as GPUs: nodes x ranks a node (n_gpus_per_node)."""
    res = spec.get("resources") if isinstance(spec, dict) else None
    res = res if isinstance(res, dict) else {}
    return int(res.get("nnodes") or 1) * int(res.get("n_gpus_per_node") or 0)


def placement(spec, gpus):
    """What a resolved spec's placement asks (queue/model.py PLACEMENT_FIELDS): resources.nnodes bundles of
    n_gpus_per_node GPUs (on a cluster without GPUs, such as the lab's, that many CPUs: verl's CPU ranks), and its
    driver's entrypoint resources. gpus: whether any worker has GPUs."""
    res = spec["resources"]
    per_rank = "GPU" if gpus else "CPU"
    per_node = {per_rank: res["n_gpus_per_node"]} if res["n_gpus_per_node"] else {}
    driver = {"CPU": res["entrypoint_num_cpus"], "GPU": res["entrypoint_num_gpus"],
              **(res["entrypoint_resources"] or {})}
    return {"nodes": res["nnodes"], "per_node": per_node, "ranks_per_node": res["n_gpus_per_node"],
            "driver": {k: v for k, v in driver.items() if v}}


def queue_part(spec, submitter, since_ms):
    """The record's queue part of a job entering the queue."""
    queue = spec.get("queue") or {}
    priority = queue.get("priority") or qm.DEFAULT_CLASS
    preemptible = queue.get("preemptible")
    preemptible = priority in qm.PREEMPTIBLE_BY_DEFAULT if preemptible is None else preemptible
    return {"submitter": submitter, "priority": priority, "preemptible": preemptible, "since": since_ms,
            "ranks": ranks(spec), "position": None, "reason": None, "words": None, "admitted_at": None}


def entry(sid, part, spec, gpus):
    """A queue entry (queue/model.py ENTRY_FIELDS) of a record's queue part and spec."""
    return {"id": sid, "submitter": part.submitter, "priority": part.priority, "preemptible": part.preemptible,
            "enqueued_s": (part.since or 0) / 1000, "placement": placement(spec, gpus),
            "max_run_s": (spec.get("timeouts") or {}).get("max_run_s")}


class Queued:
    """One QUEUED record: its Record, status and spec (config/job_spec.json, secrets redacted)."""

    def __init__(self, sid, record, status, spec):
        self.sid, self.record, self.status, self.spec = sid, record, status, spec
        self.resolved = None  # the JobSpec it would be submitted with (submit.py resolves it before deciding)


class State:
    """What one admission decides over: the queue, the running jobs, the workers, the use; read by read()."""

    def __init__(self):
        self.queued, self.running, self.workers, self.usage = [], [], [], []
        self.ray_ids = set()  # every submission id Ray knows, ended or not
        self.problems, self.gpus, self.now_ms = [], False, now_ms()

    def decide(self, quotas, preempting, extra=(), window_s=share.WINDOW_S):
        """The decision core's answer, {id: decision}, over this state and the extra entries (a new submission)."""
        entries = [entry(q.sid, q.status.queue, q.spec, self.gpus) for q in self.queued] + list(extra)
        decided = admit.decide_data(entries, self.running, self.workers, self.now_ms / 1000, quotas, self.usage,
                                    window_s, preempting)
        return {d["id"]: d for d in decided}


def read_queued(shared_root, state):
    """The QUEUED records of the open index, oldest first; a record that cannot be read is a problem, skipped."""
    jobs = conventions.paths(shared_root)["jobs"]
    ids = open_index.listed(jobs)
    if ids is None:  # no complete index yet: every record (the watcher's or reconcile's first pass writes it)
        ids = sorted(n for n in (os.listdir(jobs) if os.path.isdir(jobs) else [])
                     if conventions.matches(conventions.ID_RULE, n))
    statuses = {}
    for sid in ids:
        record = Record(conventions.job_dir(shared_root, sid), sid)
        try:
            status = record.read_status()
        except RecordError as exc:
            state.problems.append(f"{sid}: {exc}")
            continue
        if status is None or status.final:
            continue
        statuses[sid] = status
        if status.state != QUEUED:
            continue
        spec = read_json(record.path["job_spec"], base=record.dir, limit=SPEC_CAP)
        try:  # a record anyone on the share may have shaped: checked whole here, so one bad one stops nobody else
            if not isinstance(spec, dict) or not isinstance(spec.get("resources"), dict) or not status.queue.submitter:
                raise qm.QueueError("no readable spec or queue part")
            qm.entry_of(entry(sid, status.queue, spec, gpus=False))
        except (qm.QueueError, KeyError, TypeError, ValueError) as exc:
            state.problems.append(f"{sid}: QUEUED, but its record cannot be queued ({conventions.one_line(exc, 200)})"
                                  ": not admitted")
            continue
        state.queued.append(Queued(sid, record, status, spec))
    return statuses


# Ray's own resources that no placement here asks and the queue does not weigh: memory in bytes (past the core's
# amounts) and the implicit per-node names (node:<ip>, accelerator_type:<name>).
_IMPLICIT = ("memory", "object_store_memory")
_IMPLICIT_PREFIXES = ("node:", "accelerator_type:")


def placeable(name):
    """Whether a resource of Ray's is one the queue weighs: a named resource a placement may ask for."""
    return (name not in _IMPLICIT and not name.startswith(_IMPLICIT_PREFIXES)
            and conventions.matches(qm.RESOURCE_RULE, name))


def read_workers(gcs_address, shared_root, state):
    """The workers (Ray's resource view), cordoned ones marked; {node_id: ip}."""
    nodes = rc.node_resources(gcs_address)
    cordoned = cordons.cordoned(shared_root)
    ips = {}
    for node in nodes:
        ip = cordons.canonical(node.get("node_ip"))
        if not ip or "worker_node" not in (node.get("total") or {}):
            continue
        ips[node.get("node_id")] = ip
        state.gpus = state.gpus or bool((node.get("total") or {}).get("GPU"))
        state.workers.append({"id": ip, "free": {k: v for k, v in (node.get("available") or {}).items()
                                                 if placeable(k)},
                              "total": {k: v for k, v in (node.get("total") or {}).items() if placeable(k)},
                              "cordoned": ip in cordoned})
    return ips


def read_running(client, shared_root, statuses, ips, state):
    """Every job Ray has not ended, as the decision's running jobs."""
    try:
        bundles = rc.job_bundles(client.url)
    except Exception as exc:  # noqa: BLE001 - without the holds, backfill and preemption see less; admission stands
        bundles = {}
        state.problems.append(f"what each job's placement groups hold cannot be read: {conventions.one_line(exc, 200)}")
    for job in client.jobs():
        sid = job.get("submission_id")
        state.ray_ids.add(sid)
        if not sid or job.get("status") in TERMINAL or not conventions.matches(conventions.ID_RULE, sid):
            continue
        status = statuses.get(sid)
        if status is None and os.path.isdir(conventions.job_dir(shared_root, sid)):
            with contextlib.suppress(RecordError):
                status = Record(conventions.job_dir(shared_root, sid), sid).read_status()
        holds = {}
        for node_id, held in (bundles.get(job.get("job_id")) or {}).items():
            if node_id in ips:
                holds[ips[node_id]] = {k: v for k, v in held.items() if placeable(k)}
        started = (job.get("start_time") or state.now_ms) / 1000
        mine = status is not None and status.queue and status.queue.submitter
        placed_on, driver_ip = set(holds), ips.get(job.get("driver_node_id"))  # holds: its groups' bundles so far
        if driver_ip:  # what Ray reserved for its driver, ours or not
            holds[driver_ip] = fit.plus(holds.get(driver_ip, {}), driver_holds(job))
        if mine:
            spec = read_json(Record(conventions.job_dir(shared_root, sid), sid).path["job_spec"],
                             base=conventions.job_dir(shared_root, sid), limit=SPEC_CAP)
            if isinstance(spec, dict) and isinstance(spec.get("resources"), dict):
                asked = placement(spec, state.gpus)
                for ip, taken in reserve_unplaced(state, sid, asked, placed_on,
                                                  driver_placed=bool(driver_ip)).items():
                    holds[ip] = fit.plus(holds.get(ip, {}), taken)
        state.running.append({
            "id": sid, "submitter": status.queue.submitter if mine else AROUND,
            "priority": status.queue.priority if mine else qm.DEFAULT_CLASS,
            "preemptible": bool(status.queue.preemptible) if mine else False, "started_s": started,
            "max_run_s": status.timeouts.max_run_s if mine else None, "holds": holds,
            "ranks": status.queue.ranks if mine and status.queue.ranks is not None else None})


def driver_holds(job):
    """What Ray reserved for a job's driver (its entrypoint resources), as the queue names resources."""
    held = {"CPU": job.get("entrypoint_num_cpus") or 0, "GPU": job.get("entrypoint_num_gpus") or 0}
    extra = job.get("entrypoint_resources")
    held.update(extra if isinstance(extra, dict) else {})
    return {k: v for k, v in held.items() if isinstance(v, (int, float)) and v > 0
            and placeable(k)}


def reserve_unplaced(state, sid, asked, placed_on, driver_placed):
    """What a job of ours was admitted to take but Ray does not show it holding yet is taken from the workers' free
    resources where it would go ({worker: taken}), so the next admission cannot give it away: a job's driver before
    it starts, and its gang's nodes that hold no bundle of its groups yet (verl makes a group a node, placed one by
    one; a command job makes none, so the queue keeps what it declared). placed_on: the workers its groups hold."""
    missing = max(0, asked["nodes"] - len(placed_on))
    unplaced = qm.Placement(missing or 1, asked["per_node"] if missing else {}, asked["ranks_per_node"],
                            {} if driver_placed else asked["driver"])
    if not any(unplaced.per_node.values()) and not any(unplaced.driver.values()):
        return {}
    where = fit.place(unplaced, {w["id"]: w["free"] for w in state.workers
                                 if not w["cordoned"] and (w["id"] not in placed_on or not missing)})
    if where is None:  # Ray holds it PENDING until something ends; nothing is taken twice
        state.problems.append(f"{sid}: what it was admitted to take is not free now; Ray places it when it is")
        return {}
    for worker in state.workers:
        if worker["id"] in where:
            worker["free"] = fit.minus(worker["free"], where[worker["id"]])
    return where


def read_usage(shared_root, state, window_s=share.WINDOW_S):
    """Each record's use within the window: its submitter's ranks from its start to its end (or now)."""
    jobs = conventions.paths(shared_root)["jobs"]
    since = time.time() - window_s
    try:
        names = os.listdir(jobs)
    except OSError:
        return
    for sid in names:
        if not conventions.matches(conventions.ID_RULE, sid):
            continue
        path = os.path.join(jobs, sid)
        try:
            if os.lstat(path).st_mtime < since:
                continue
            status = Record(path, sid).read_status()
        except (OSError, RecordError):
            continue
        if status is None or not status.queue or not status.queue.submitter or not status.start_time:
            continue
        state.usage.append({"submitter": status.queue.submitter, "ranks": status.queue.ranks or 0,
                            "start_s": status.start_time / 1000,
                            "end_s": max(status.end_time, status.start_time) / 1000 if status.end_time else None})


def read(client, config, state):
    """Fill the State one admission decides over (the caller holds the queue's lock). Ray's resources or the cordons
    that cannot be read raise: nothing is admitted from a guess (state.queued is read first, so the caller knows
    whether anyone waits)."""
    shared_root = config.shared_root
    statuses = read_queued(shared_root, state)
    ips = read_workers(config.address, shared_root, state)
    read_running(client, shared_root, statuses, ips, state)
    read_usage(shared_root, state)
    return state


def expired(queued, now):
    """Whether a QUEUED record waited longer than its timeouts.queue_s."""
    limit = queued.status.timeouts.queue_s
    return bool(limit and queued.status.queue.since and now - queued.status.queue.since > limit * 1000)


def end_queued(record, state, reason, message):
    """Take a QUEUED record out of the queue with a final record (FAILED for QUEUE_TIMEOUT, else STOPPED), under
    the record's lock, so an admission submitting it meanwhile wins or loses whole. Returns its status after."""
    with record_lock(record.dir):
        status = record.status()
        if status.final or status.state != QUEUED:
            return status
        status.state = FAILED if reason == conventions.QUEUE_TIMEOUT_REASON else "STOPPED"
        status.final, status.reason, status.message = True, reason, message
        status.end_time = now_ms()
        record.save_status(status)
        return status


def waits(queued, decision):
    """Write a waiting entry's position, reason and words into its record (when they changed)."""
    part = queued.status.queue
    if (part.position, part.reason, part.words) == (decision["position"], decision["reason"], decision["words"]):
        return
    status = queued.status.copy()
    status.queue.position, status.queue.reason = decision["position"], decision["reason"]
    status.queue.words = decision["words"]
    queued.record.save_status(status)


def ask_preempt(shared_root, victims, by):
    """Phase 1 of preemption: each victim's record says who asked for its place and when; it runs on."""
    for sid in victims:
        record = Record(conventions.job_dir(shared_root, sid), sid)
        with contextlib.suppress(OSError, RecordError):
            status = record.read_status()
            if status is not None and not status.final and not status.preempt:
                status.preempt = {"by": by, "at": now_ms()}
                record.save_status(status)


def line(sid, queue):
    """A QUEUED job's line: its place and why it waits."""
    where = f"position {queue.position}" if queue.position else "in the queue"
    return f"{sid}: QUEUED ({where}, {queue.priority}, {queue.submitter}): {queue.words or 'not asked yet'}"


def listing(shared_root, now=None):
    """The queue in order, as status.yml shows it: (rows, lines). Each row: submission_id, submitter, priority,
    waited_s (so far), position, reason, words, as the last admission wrote them (a job not placed yet comes last)."""
    state = State()
    read_queued(shared_root, state)
    now = state.now_ms if now is None else now
    rows = []
    for q in sorted(state.queued, key=lambda q: (q.status.queue.position or float("inf"), q.status.queue.since or 0,
                                                 q.sid)):
        part = q.status.queue
        rows.append({"submission_id": q.sid, "submitter": part.submitter, "priority": part.priority,
                     "waited_s": max(0, (now - (part.since or now)) // 1000), "position": part.position,
                     "reason": part.reason, "words": part.words})
    lines = [f"{index}. {r['submission_id']}: {r['priority']}, {r['submitter']}, waiting {waited(r['waited_s'])}: "
             f"{r['words'] or 'not asked yet'}" for index, r in enumerate(rows, 1)]
    return rows, lines + [f"not listed: {problem}" for problem in state.problems]


def waited(seconds):
    """'3d04h', '2h05m', '4m10s'."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
