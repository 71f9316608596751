"""A job's driver log, copied into its record a look at a time: each look reads about what the log gained.

Ray's job API has no ranged read (GET /api/jobs/<id>/logs returns the log whole; its websocket streams it from the
start), but its state API serves a file's last N lines (/api/v0/logs/file?submission_id=<id>&lines=N, read by the
driver node's agent from the end). So a look asks for the log's last lines and finds where the record's copy ends in
them: the last whole lines the record took (at most ANCHOR_LINES lines and ANCHOR characters; only "\n" ends a line,
as for Ray's log agent), found once and only once (the sidecar PARSED_FILE beside driver.log keeps their digest and
length, never the text: a log holds secrets until it is redacted). What follows is new: redacted, appended to
logs/driver.log and parsed (verl/metrics.py's fold). The number of lines asked for follows what the last look needed
and grows eightfold until the anchor shows, so a poll costs about the bytes the log gained, whatever its size.

When the anchor cannot be placed for sure (the first look, a tail that holds it twice: a log repeating itself, a log
replaced, a sidecar or driver.log that is not what this module wrote), the log is taken whole, streamed in chunks and
written through a temporary file, so the head's memory stays bounded by a chunk and the longest line. Only whole lines
are taken while the job runs, and never part of a secret the job knows that spans lines (a secret is never redacted
in halves); the final look takes the rest. The parse is of the redacted text, since the sidecar keeps it. Without Ray's
log (the driver's node died, the head forgot the job) the record keeps what it has, never replaced by nothing.
"""

import codecs
import hashlib
import itertools
import os

from ansible.module_utils.base import conventions, files
from ansible.module_utils.jobs.evidence import progress
from ansible.module_utils.jobs.record.record import LockTimeout, json_text, record_lock
from ansible.module_utils.verl import metrics

# The parse so far, beside logs/driver.log, the lock its writers hold, and how long one waits for it.
PARSED_FILE = "driver.log.parsed.json"
LOCK_FILE = ".driver_log.lock"
LOCK_WAIT_S = 30
# How much of the end of the text taken marks where the record's copy ends: its last ANCHOR_LINES lines, at most
# ANCHOR characters (a block a log repeats word for word must be longer than that to be mistaken for it, and come back
# after more lines than a tail holds); and the tail sizes asked for, which always hold the anchor and what follows.
ANCHOR, ANCHOR_LINES = 64 << 10, 100
MIN_LINES, MAX_LINES = 200, 1 << 20
# What a LogText carries of the text (its end: do=logs and the diagnosis read the record's file).
SHOWN = 1 << 20


class LogText(str):
    """The end of the driver log's text as this look saw it, control characters and escapes removed
    (conventions.printable), carrying `parsed`, verl/metrics.py fold's state of the whole log (its console step lines),
    `size`, the length Ray's log had, and `metrics`, progress.refresh's state of the record's metrics.jsonl (None:
    there is none)."""


def log_text(text, parsed, size=None, metrics=None):
    out = LogText(conventions.printable(text[-SHOWN:]))
    out.parsed, out.size, out.metrics = parsed, len(text) if size is None else size, metrics
    return out


def _sidecar(job):
    return os.path.join(os.path.dirname(job.rec["driver_log"]), PARSED_FILE)


def read_state(job):
    """The sidecar's state when it has the shape _save writes, its numbers in bounds (files.bounded_int), else None
    (the log is then taken whole)."""
    try:
        state = files.loads_bounded(files.read_text(_sidecar(job), 1 << 16, base=job.rec["dir"]) or "null")
    except (OSError, ValueError, RecursionError, files.RecordError):
        return None
    if (not isinstance(state, dict)
            or not all(files.bounded_int(state.get(k)) is not None for k in ("offset", "log_bytes"))
            or files.bounded_int(state.get("lines"), MAX_LINES) is None
            or not _anchor_shape(state.get("anchor"))
            or not metrics.trusted_state(state.get("parsed"))):
        return None
    return state


def _anchor_shape(anchor):
    return anchor is None or (isinstance(anchor, dict) and set(anchor) == {"size", "sha", "last"}
                              and files.bounded_int(anchor["size"], low=1) is not None
                              and all(isinstance(anchor[k], str) and len(anchor[k]) == 64 for k in ("sha", "last")))


def _digest(text):
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def _lines(text):
    """text's lines, each with its "\n": only "\n" ends a line here, as for Ray's log agent (a "\r" of a progress
    bar does not)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def anchor_of(text):
    """Where a copy ending with text ends: the digest and length of its last whole lines (up to ANCHOR characters,
    at least one line), and of its last line; None for no text."""
    lines = _lines(text)
    if not lines:
        return None
    kept = [lines.pop()]
    size = len(kept[0])
    while lines and size + len(lines[-1]) <= ANCHOR and len(kept) < ANCHOR_LINES:
        kept.insert(0, lines.pop())
        size += len(kept[0])
    return {"size": size, "sha": _digest("".join(kept)), "last": _digest(kept[-1])}


def find_anchor(tail, anchor):
    """The ends of anchor's places in tail: one is the place; none, it is older than the tail; more, the log repeats
    itself (no place for sure). Each line of the tail is hashed once, the anchor's whole only where its last
    line matches: linear in the tail."""
    found, start = [], 0
    for line in _lines(tail):
        end = start + len(line)
        if _digest(line) == anchor["last"] and end >= anchor["size"]:
            begin = end - anchor["size"]
            if (begin == 0 or tail[begin - 1] == "\n") and _digest(tail[begin:end]) == anchor["sha"]:
                found.append(end)
        start = end
    return found


def refresh_log(job, final=False):
    """Bring the record's logs/driver.log up to date with Ray's (see the module's doc) and parse what it gained;
    verl's own metrics (the record's metrics.jsonl) are read alongside, their new lines only (progress.py).
    Returns a LogText."""
    metrics_state = progress.refresh(job, final)
    try:
        with record_lock(job.rec["dir"], timeout_s=LOCK_WAIT_S, name=LOCK_FILE):
            return _look(job, final, metrics_state)
    except LockTimeout:  # another run holds the log for long: this look writes nothing
        state = read_state(job)
        return _kept(job, state["parsed"] if state else None, metrics_state, state["offset"] if state else None)


def _kept(job, parsed, metrics_state, size=None):
    """What the record holds, when Ray serves no log: its end, and its parse (from the sidecar, else of that end);
    size: how much of Ray's log the record holds (the sidecar's offset), for hang tracking."""
    try:
        kept = files.read_text(job.rec["driver_log"], SHOWN, tail=True, base=job.rec["dir"]) or ""
    except (OSError, files.RecordError):
        kept = ""
    if parsed is None:
        parsed = metrics.new_state()
        metrics.fold(parsed, kept)
    return log_text(kept, parsed, size=size, metrics=metrics_state)


def _look(job, final, metrics_state):
    state = read_state(job)
    found = _tail_after_anchor(job, state) if state is not None and state["anchor"] else None
    if found is None:
        return _whole(job, final, metrics_state, state)
    tail, at = found
    new = tail[at:]
    end = _cut(job, new, final)
    taken = new[:end]
    if taken:
        shown = job.redact(taken)
        size = _append(job, shown, state["log_bytes"])
        if size is None:  # driver.log is not what the sidecar says: the log is taken whole
            return _whole(job, final, metrics_state, state)
        metrics.fold(state["parsed"], shown)
        state.update(offset=state["offset"] + end, log_bytes=size, anchor=anchor_of(tail[:at + end][-SHOWN:]))
    lines = min(MAX_LINES, max(MIN_LINES, 2 * new.count("\n") + ANCHOR_LINES))
    if taken or lines != state["lines"]:  # a look that found nothing new writes nothing
        state["lines"] = lines
        _save(job, state)
    return log_text(new, state["parsed"], size=state["offset"] + len(new) - end, metrics=metrics_state)


def _tail_after_anchor(job, state):
    """(Ray's log's tail, where the record's copy ends in it), or None when that cannot be placed for sure."""
    lines = state["lines"] or MIN_LINES
    while True:
        try:
            tail = job.client.log_tail(job.sid, lines)
        except Exception:  # noqa: BLE001 - no tail (the state API or the node's agent): the log is taken whole
            return None
        found = find_anchor(tail, state["anchor"])
        if len(found) == 1:
            return tail, found[0]
        if found or tail.count("\n") < lines - 1 or lines >= MAX_LINES:  # twice, or the whole log without it
            return None
        lines = min(MAX_LINES, lines * 8)


def _append(job, text, expected_size):
    """Append text to driver.log if it is still expected_size bytes long (not through a link); its new size, or
    None when the file is not what the sidecar says."""
    try:
        with files.open_append(job.rec["driver_log"], expected_size, base=job.rec["dir"]) as handle:
            handle.write(text.encode("utf-8"))
            size = handle.tell()
    except (OSError, files.RecordError):
        return None
    job.record.changed = True
    return size


def _whole(job, final, metrics_state, state):
    """Take Ray's log whole, streamed: driver.log written anew through a temporary file, parsed from the start."""
    chunks = _chunks(job)
    if chunks is None:
        return _kept(job, state["parsed"] if state else None, metrics_state, state["offset"] if state else None)
    parsed, decoder = metrics.new_state(), codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending, taken, tail = "", 0, ""
    with files.AtomicWriter(job.rec["driver_log"], base=job.rec["dir"]) as out:
        try:
            for chunk in chunks:
                pending += decoder.decode(chunk)
                cut = _cut(job, pending, False)
                if cut:
                    _take(job, out, parsed, pending[:cut])
                    taken, tail, pending = taken + cut, (tail + pending[:cut])[-SHOWN:], pending[cut:]
        except Exception:  # noqa: BLE001 - the stream broke off (a node that died): the record keeps what it has
            out.discard()
            return _kept(job, state["parsed"] if state else None, metrics_state, state["offset"] if state else None)
        pending += decoder.decode(b"", final=True)
        if final and pending:
            _take(job, out, parsed, pending)
            taken, tail, pending = taken + len(pending), (tail + pending)[-SHOWN:], ""
        if not taken:  # Ray has no text yet: the record keeps what it has
            out.discard()
            return _kept(job, state["parsed"] if state else None, metrics_state, state["offset"] if state else None)
        new = {"offset": taken, "log_bytes": out.size, "anchor": anchor_of(tail), "lines": MIN_LINES, "parsed": parsed}
        if state is not None and all(state[k] == new[k] for k in ("offset", "log_bytes", "anchor")):
            out.discard()  # the record holds this text already (Ray's tail was not to be had): nothing changes
            return log_text(tail + pending, parsed, size=taken + len(pending), metrics=metrics_state)
    job.record.changed = True
    _save(job, new)
    return log_text(tail + pending, parsed, size=taken + len(pending), metrics=metrics_state)


def _take(job, out, parsed, text):
    """Redact, parse and write a piece of whole lines (the parse is of the redacted text: it is kept in the sidecar)."""
    shown = job.redact(text)
    metrics.fold(parsed, shown)
    out.write(shown.encode("utf-8"))


def _cut(job, text, final):
    """How much of text to take now: all of it when the job ended, else its whole lines, but never part of a secret
    the job knows that spans lines (a key, a JSON credential): a cut that a line-prefix of one ends at moves before
    the line it starts on, so the secret is redacted whole, on a later look."""
    if final:
        return len(text)
    cut = text.rfind("\n") + 1
    prefixes = [value[:i + 1] for value in getattr(job, "secrets", ()) if isinstance(value, str)
                for i, char in enumerate(value[:-1]) if char == "\n"]
    moved = True
    while cut and moved:
        moved = False
        for prefix in prefixes:
            if text.endswith(prefix, 0, cut):
                cut, moved = text.rfind("\n", 0, cut - len(prefix)) + 1, True
                break
    return cut


def _chunks(job):
    """Ray's log as byte chunks (its state API's stream of the whole file), else its job API's text whole; None
    when Ray has no log for the job."""
    try:
        stream = iter(job.client.log_stream(job.sid))
        first = next(stream, None)
    except Exception:  # noqa: BLE001 - no stream (the state API or the node's agent): the job API below
        first = None
    if first is not None:
        return itertools.chain([first], stream)
    try:
        text = job.client.logs(job.sid)
    except Exception:  # noqa: BLE001 - logs are best effort while a job starts
        return None
    return [text.encode("utf-8")] if text else None


def _save(job, state):
    try:
        job.record.write_text(_sidecar(job), json_text(state))
    except OSError:
        pass  # the next look takes the log whole
