"""The goodput of a chain of attempts: how a first job and its resuming attempts (<id>-r1, -r2, ...) spent their wall
time, productive and lost by cause. It is worked out at each finalize of a chain member (evidence.finalize) and kept in
the first job's status.json (`goodput`, status.py FIELDS).

wall_s runs from the first submission to the last attempt's end (or `at`, while it runs). Lost, by cause:
detection_s (a failed attempt's last progress to its verdict: the hang found, or its end), restart_s (an attempt's end
to the next attempt's first step: the follower's decision, its submission, and the next one's start-up), recomputed_s
(steps the next attempt redid, from its resume checkpoint to where the failed one had got, at the failed one's median
step time), outages_s (head outages lived through), pending_s (waiting for resources). productive_s is what remains.
The parts are whole seconds that add up to wall_s exactly. Every value is data from a record: bounded, and one
missing costs nothing (its part counts 0), never an exception.
"""

import os
import stat
import statistics

from ansible.module_utils.base import conventions, files
from ansible.module_utils.jobs.record.record import (
    STATUS_LOCK_FILE,
    Record,
    RecordError,
    now_ms,
    record_lock,
    status_of,
)
from ansible.module_utils.jobs.record.status import Goodput, StatusFile

# The causes of lost time, in the order they take from the wall time (the measured first, the estimate last), so
# overlapping causes never add up to more than the wall.
LOST = ("pending_s", "outages_s", "detection_s", "restart_s", "recomputed_s")
# How the final line names them.
SHOWN = {"detection_s": "detection", "restart_s": "restart", "recomputed_s": "recomputed", "outages_s": "head outages",
         "pending_s": "pending"}
# The most chain members counted (a record's `attempts` is data of any length).
MEMBERS_MAX = 100


def _ms(value):
    """A time in ms since the epoch, or None (0 is no time anyone recorded)."""
    return files.bounded_int(value, files.MS_MAX) or None


def _seconds_ms(value):
    """A duration given in seconds, as whole ms (0 when it is not a non-negative number)."""
    number = files.bounded_number(value)
    return round(number * 1000) if number is not None and number > 0 else 0


def _list(value):
    return value if isinstance(value, list) else []


def step_ms(status):
    """The attempt's median step time (ms) from progress.step_s, or None."""
    recent = [n for n in (files.bounded_number(s) for s in _list(status.progress.step_s)) if n is not None and n > 0]
    return statistics.median(recent) * 1000 if recent else None


def reached(status):
    """The newest step the attempt got to, or None."""
    step = files.bounded_step(status.progress.step)
    return step if step is not None else files.bounded_step(status.steps)


def resumed_step(status):
    """The step an attempt resumed from: its checkpoint's; 0 when it started over (no checkpoint); None: unknown."""
    found = status.resumed_from
    step = files.bounded_step(found.step)
    if step is not None:
        return step
    return 0 if found and found.path is None else None


def running_ms(status, now):
    """How long the attempt ran (its start to its end, or to now while it runs), or None."""
    start, end = _ms(status.start_time), _ms(status.end_time) if status.final else now
    return max(0, end - start) if start and end else None


def first_step_at(status):
    """When the attempt's first step came (ms), estimated back from its newest step at its median step time; None
    before a step is known."""
    last, at, each = reached(status), _ms(status.progress.step_at), step_ms(status)
    if files.bounded_step(status.progress.step) is None or at is None or each is None:
        return None
    done = max(1, last - (resumed_step(status) or 0))
    start = _ms(status.start_time) or 0
    return max(start, round(at - (done - 1) * each))


def detection_ms(status):
    """A failed attempt's last progress (its newest step's time: step_at means a step only once one is known) to its
    verdict (the hang found, or its end)."""
    if not status.final or status.state == "SUCCEEDED":
        return 0
    verdict = _ms(status.stall.detected_at) or _ms(status.end_time)
    last = _ms(status.progress.step_at) if files.bounded_step(status.progress.step) is not None else None
    return max(0, verdict - max(last, _ms(status.start_time) or 0)) if verdict and last else 0


def restart_ms(failed, following):
    """failed's end to following's first step: the gap to its submission (its start when that is not known), then
    its start to its first step when one is known. Its pending time is pending_s's."""
    end, begin = _ms(failed.end_time), _ms(following.submitted_at) or _ms(following.start_time)
    gap = max(0, begin - end) if end and begin else 0
    start, first = _ms(following.start_time), first_step_at(following)
    return gap + (max(0, first - start) if start and first else 0)


def recomputed_ms(failed, following, now):
    """The steps following redid, from its resume checkpoint up to where failed had got (no more than following has
    done), at failed's median step time (following's when failed has none), bounded by both attempts' running time."""
    got, since = reached(failed), resumed_step(following)
    done = reached(following)
    if got is None or since is None or done is None:
        return 0
    redone = max(0, min(got, done) - since)
    each = step_ms(failed) or step_ms(following) or 0
    bounds = [b for b in (running_ms(failed, now), running_ms(following, now)) if b is not None]
    return round(min([redone * each, *bounds])) if len(bounds) == 2 else 0


def account(chain, now):
    """The goodput (a dict of Goodput's fields) of chain: [(submission id, StatusFile or None: unreadable)], the first
    job first; now: ms."""
    members = [status for _, status in chain if isinstance(status, StatusFile)]
    skipped = [sid for sid, status in chain if not isinstance(status, StatusFile)]
    begins = [t for t in (_ms(s.submitted_at) or _ms(s.start_time) for s in members) if t]
    start = min(begins) if begins else None
    last = members[-1] if members else None
    end = (_ms(last.end_time) or _ms(last.updated_at) or now) if last is not None and last.final else now
    wall = max(0, end - start) if start else 0
    lost = dict.fromkeys(LOST, 0)
    for i, status in enumerate(members):
        lost["pending_s"] += _seconds_ms(status.phases.pending_s)
        lost["outages_s"] += sum(_seconds_ms(getattr(o, "seconds", None)) for o in _list(status.outages))
        lost["detection_s"] += detection_ms(status)
        if i + 1 < len(members):
            lost["restart_s"] += restart_ms(status, members[i + 1])
            lost["recomputed_s"] += recomputed_ms(status, members[i + 1], now)
    left = wall
    for cause in LOST:
        lost[cause] = min(lost[cause], left)
        left -= lost[cause]
    out = {"wall_s": _whole(wall), **_split([*(lost[c] for c in LOST), left], [*LOST, "productive_s"]),
           "attempts": len(members), "at": now}
    notes = ([f"not counted (no readable record): {', '.join(skipped)}"] if skipped else []) + (
        [] if start else ["no submission or start time known"])
    out["note"] = conventions.one_line("; ".join(notes), 300) if notes else None
    return out


def _whole(ms):
    return (ms + 500) // 1000


def _split(parts, names):
    """Whole seconds of each part (ms, non-negative), rounded at their running sums, so they add up to the whole of
    their sum as _whole rounds it."""
    out, total, shown = {}, 0, 0
    for name, part in zip(names, parts):
        total += part
        out[name] = _whole(total) - shown
        shown = _whole(total)
    return out


def _read(shared_root, sid):
    """A member's status, or None when it cannot be read (no record, or status.json lost or untrusted)."""
    try:
        status = status_of(shared_root, sid)
    except (OSError, RecordError, ValueError):
        return None
    return None if status is None or status.rebuilt else status


def chain_of(shared_root, status):
    """(first job's id, [(id, status or None)]) of the chain status belongs to, status itself as given; None when it
    belongs to none (a job without attempts), its first job cannot be read, or the first job does not list it. A
    member counts only when both records list the link (the first job's `attempts`, the member's `attempt_of`): the
    account is written into the first job's record, so no record joins a chain by naming it alone."""
    sid = status.submission_id
    root_sid = status.attempt_of if conventions.matches(conventions.ID_RULE, status.attempt_of) else sid
    if root_sid == sid and not status.attempts:
        return None
    root = status if root_sid == sid else _read(shared_root, root_sid)
    if root is None or (root_sid != sid and sid not in _list(root.attempts)):
        return None
    ids, known = [root_sid], {root_sid: root, sid: status}
    for other in _list(root.attempts):
        if conventions.matches(conventions.ID_RULE, other) and other not in ids and len(ids) < MEMBERS_MAX:
            theirs = known[other] if other in known else _read(shared_root, other)
            # an unreadable member still counts (goodput notes it); a readable one must name this first job
            if theirs is None or theirs.attempt_of == root_sid:
                ids.append(other)
                known[other] = theirs
    return root_sid, [(other, known[other]) for other in ids]


def save(shared_root, root_sid, goodput):
    """Write goodput into the first job's status.json under its status lock. Its record is final, so save_status
    would keep it as it is (a final record is never written over); this adds this one field, as link_attempt adds
    an attempt. Returns whether it was written."""
    record = Record(conventions.job_dir(shared_root, root_sid), root_sid)
    try:
        with record_lock(record.dir, name=STATUS_LOCK_FILE):
            status = record.read_status()
            if status is None:
                return False
            status.goodput = goodput
            StatusFile.from_dict(status.to_dict(), where=f"{record.path['status']} (as goodput would write it)")
            status.updated_at = now_ms()
            record.write_json(record.path["status"], status.to_dict())
    except (OSError, RecordError, ValueError):
        return False
    return True


def record(shared_root, status, now=None):
    """Work out and save the goodput of the chain the just-finalised status belongs to; returns it (None: no chain,
    or not saved). Never raises: the goodput is an account, it must not stop a record's finalize."""
    if not isinstance(shared_root, str) or not shared_root:
        return None
    try:
        found = chain_of(shared_root, status)
        if found is None:
            return None
        goodput = account(found[1], now_ms() if now is None else now)
    except Exception:  # noqa: BLE001 - a record shaped in a way not foreseen leaves no goodput, not a failed finalize
        return None
    return goodput if save(shared_root, found[0], goodput) else None


def shown(shared_root, status):
    """`goodput 72% (lost: detection 60 s, restart 40 s, recomputed 12 s)` for the final line of a chain of more than
    one attempt (its first job's goodput), else ''."""
    if not status.final:
        return ""
    goodput = status.goodput
    if not goodput and conventions.matches(conventions.ID_RULE, status.attempt_of) and isinstance(shared_root, str):
        root = _read(shared_root, status.attempt_of)
        goodput = root.goodput if root is not None and status.submission_id in _list(root.attempts) else None
    return text(goodput)


def text(goodput):
    """The goodput as the final line says it, or '' (one attempt, no wall time, or values that are no numbers)."""
    goodput = Goodput.of(goodput) if isinstance(goodput, dict) or goodput is None else goodput
    wall, productive = files.bounded_int(goodput.wall_s), files.bounded_int(goodput.productive_s)
    if not wall or productive is None or (files.bounded_int(goodput.attempts) or 0) < 2:
        return ""
    lost = [f"{SHOWN[c]} {files.bounded_int(getattr(goodput, c))} s" for c in LOST
            if files.bounded_int(getattr(goodput, c))]
    return f"goodput {round(100 * min(productive, wall) / wall)}%" + (f" (lost: {', '.join(lost)})" if lost else "")


# Reading chains back, as status.yml (ray_cluster_info's recent_records) and the regression report show them.
RECENT_MAX = 50  # the most chains one look shows
BLAME_SHOWN = 16  # the most blame entries shown of one chain (each attempt keeps blame.MAX_BLAMED)


def _status_why(shared_root, sid):
    """(its StatusFile, None), or (None, why it cannot be read: one line). A status.json that the model refuses (a
    goodput or a blame of the wrong shape among them) is unreadable here, never rebuilt from a guess."""
    try:
        status = Record(conventions.job_dir(shared_root, sid), sid).read_status()
    except (OSError, ValueError, RecursionError) as exc:  # RecordError is a ValueError
        return None, conventions.one_line(str(exc) or type(exc).__name__, 300)
    return (status, None) if status is not None else (None, "no status.json (yet)")


def view(shared_root, root_sid, known=None):
    """The chain whose first job is root_sid as a person reads it: {submission_id (the first job), state and final
    (its newest attempt's; state null when that record is unreadable), attempts (the records read), goodput (text's
    line; '' until the newest attempt is final, as the final line), account (the goodput's parts, or null), blame
    ([{node_ip, why, attempt}] of every attempt, strongest first in each), unreadable (["<id>: <why>"])}. known: {id:
    (status, why)} already read. Never raises: every record is data."""
    known = dict(known or {})

    def read(sid):
        if sid not in known:
            known[sid] = _status_why(shared_root, sid)
        return known[sid]

    out = {"submission_id": root_sid, "state": None, "final": False, "attempts": 0, "goodput": "", "account": None,
           "blame": [], "unreadable": []}
    root, why = read(root_sid)
    if root is None:
        out["unreadable"].append(f"{root_sid}: {why}")
        return out
    ids = [root_sid]
    for other in _list(root.attempts):
        if conventions.matches(conventions.ID_RULE, other) and other not in ids and len(ids) < MEMBERS_MAX:
            ids.append(other)
    for sid in ids:
        status, why = read(sid)
        if status is None:
            out["unreadable"].append(f"{sid}: {why}")
            continue
        out["attempts"] += 1
        out["blame"] += [{"node_ip": b.node_ip, "why": b.why, "attempt": sid} for b in status.blame]
    newest = known[ids[-1]][0]
    if newest is not None:
        out.update(state=newest.state, final=bool(newest.final))
    out["blame"] = out["blame"][:BLAME_SHOWN]
    out["goodput"] = text(root.goodput) if out["final"] else ""
    if out["goodput"]:
        out["account"] = {k: files.bounded_int(getattr(root.goodput, k)) for k in ("wall_s", "productive_s", *LOST)}
    return out


def recent(shared_root, count):
    """([view] of the `count` chains whose records were written last, newest first, note or None). A record's folder
    changes each time its status.json is written (a new file renamed in), so one lstat per record orders them and
    only the newest records' status.json are read, however many years of records the share holds."""
    count = max(0, min(int(count), RECENT_MAX))
    jobs = conventions.paths(shared_root)["jobs"]
    dated = []
    try:
        if os.path.islink(jobs):  # the share is data: its jobs folder is never read through a symlink
            return [], f"{jobs}: is a symlink, not read"
        with os.scandir(jobs) as entries:
            for entry in entries:
                if conventions.matches(conventions.ID_RULE, entry.name):
                    try:
                        found = entry.stat(follow_symlinks=False)
                    except OSError:  # removed meanwhile
                        continue
                    if stat.S_ISDIR(found.st_mode):
                        dated.append((found.st_mtime_ns, entry.name))
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"{jobs}: cannot be listed ({exc.strerror or type(exc).__name__})"
    chains, seen, known = [], set(), {}
    for _, sid in sorted(dated, reverse=True)[: count * 20]:  # attempts of one chain share it: a bound on reads
        if len(chains) >= count:
            break
        known[sid] = _status_why(shared_root, sid)
        status = known[sid][0]
        root = status.attempt_of if status is not None and conventions.matches(
            conventions.ID_RULE, status.attempt_of) else sid
        if root not in seen:
            seen.add(root)
            chains.append(view(shared_root, root, known))
    return chains, None
