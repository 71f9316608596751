"""verl's per-step metrics: read from its own file logger, and (for a job that is not verl) from its console.

A verl job (workload sft, ppo or grpo) runs with verl's `file` logger writing the record's metrics.jsonl
(VERL_FILE_LOGGER_PATH, set by jobspec/render.py): one JSON object a step, {"step": N, "data": {key: value}}, every
key verl logged with its exact value. read_metrics turns that file into one row a step: the values (`metrics`) plus
the few that people compare across workloads under one name each (SUMMARY_KEYS): SFT's train/loss and PPO's
actor/pg_loss are both `loss`, and so on. The regression report, its gates and trend, and a job's progress
(module_utils/jobs/evidence/progress.py) read these rows.

The console parse stays for one case: a job that is not verl (workload command, a site's own script) printing
`step:N - key:value` lines, whose progress a follower and the hang detector still see (fold). A verl job's console
lines are for people reading driver.log.

A job's files are untrusted data: a line of the file logger over JSONL_LINE_CAP bytes is no row, keys are short
printable names, a step an int in 0..files.STEP_MAX and a value a number within ±files.VALUE_MAX (files.loads_bounded
reads the line: a 400-digit number is out of range, never an OverflowError); a line holding a number out of range
keeps its other values and is counted. Every console pattern runs in time linear in the line. read_metrics, the
report's read, streams the file and keeps at most ROWS_CAP rows (thinned evenly by step) and, over every row, what
the gates reduce a name to (new_stat): its memory is bounded by those caps, never by the file's length.

Imported by modules as ansible.module_utils.verl.metrics: standard library and conventions only.
"""

import re

from ansible.module_utils.base import conventions, files
from ansible.module_utils.base.conventions import one_line, printable

# The record's file verl's file logger writes (record.paths()["metrics"]).
METRICS_FILE = conventions.METRICS_FILE
# A line of verl's file logger longer than this is skipped (a step of a big PPO config is a few KB); a key longer
# than KEY_CAP or not printable is left out, and a row keeps at most KEYS_CAP keys.
JSONL_LINE_CAP = 1 << 20
KEY_CAP = 200
KEYS_CAP = 4096
# What read_metrics keeps of a file however long it is: at most ROWS_CAP rows holding at most VALUES_CAP values in
# all (thinned evenly by step, plus the first and the last step's), and the stats of at most NAMES_CAP verl keys;
# it reads the file's first READ_LIMIT bytes, CHUNK at a time.
ROWS_CAP = 1000
VALUES_CAP = 1 << 18
NAMES_CAP = 4096
READ_LIMIT = 1 << 28
CHUNK = 1 << 18

# Name in metrics.jsonl -> verl's keys for it, first found wins (SFT, then PPO/GRPO names).
SUMMARY_KEYS = {
    "loss": ("train/loss", "actor/pg_loss"),
    "reward": ("critic/score/mean", "critic/rewards/mean", "reward/mean"),
    "kl": ("actor/kl_loss", "actor/ppo_kl"),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "grad_norm": ("train/grad_norm", "actor/grad_norm"),
    "critic_loss": ("critic/vf_loss",),
    "response_length": ("response_length/mean",),
    "step_time_s": ("timing_s/step",),
    "throughput": ("perf/throughput", "train/global_tokens"),
    "val_loss": ("val/loss",),
}

# The line's own step, after whatever precedes it on the line (Ray's "(TaskRunner pid=1) ", a progress bar's
# "...1.36s/it]" without a newline), but never the end of a key like training/global_step:3.
_STEP = re.compile(r"(?<![\w/])step:(\d{1,12}) - ")
# Ray's "(Actor pid=N)" prefix of a worker's lines (its colours are gone with the other escapes, see
# conventions.printable); a progress line shows neither. Bounded, so a line of "(pid=1 pid=1 ..." cannot backtrack.
_RAY_PREFIX = re.compile(r"^\s*\((?=[^()]{0,200}?pid=\d)[^()]{0,200}\)\s*")
# The part of a line the patterns see; a value is at most NUMBER_CAP characters (a float has fewer than 30).
LINE_CAP = 16384
NUMBER_CAP = 64
_PAIR = re.compile(r"(?:^|\s-\s)([A-Za-z_][\w/().@-]*):\s*([^\s]+)")
# numpy 2 reprs scalars as np.float64(0.5); pprint of a plain float is just 0.5.
_NP_SCALAR = re.compile(r"^(?:np|numpy)\.\w+\((.*)\)$")


def _number(text):
    """A finite float from how verl printed a value, or None (words, nan, inf, booleans)."""
    if len(text) > NUMBER_CAP:
        return None
    match = _NP_SCALAR.match(text)
    if match:
        text = match.group(1)
    if text in ("True", "False"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return files.bounded_number(value)


def _parse(line):
    """(step match, values) of one line seen up to LINE_CAP, or (None, None) when it is no step line."""
    line = line[:LINE_CAP]
    match = _STEP.search(line)
    if not match:
        return None, None
    values = {}
    for key, raw in _PAIR.findall(" - " + line[match.end():]):
        value = _number(raw)
        if value is not None:
            values[key] = value
    return match, values


def parse_line(line):
    """(step, {key: value}) from one console-logger line, or None if it is not one. fold reads the log through _parse;
    this is that parser's one-line face, kept for the tests that hold its reading of a line (the lab's included)."""
    match, values = _parse(line)
    return (int(match.group(1)), values) if values else None


def summarize(metrics):
    """The SUMMARY_KEYS view of one step's verl metrics (names without a value are left out)."""
    out = {}
    for name, keys in SUMMARY_KEYS.items():
        for key in keys:
            if key in metrics:
                out[name] = metrics[key]
                break
    return out


def rows_of(steps):
    """parse_log's rows from {step: {verl key: value}}."""
    return [{"step": step, **summarize(values), "metrics": dict(sorted(values.items()))}
            for step, values in sorted(steps.items())]


def shown_step_line(line, width=200):
    """A step line as a progress line shows it: control characters, escapes and Ray's prefix removed, shortened."""
    line = _RAY_PREFIX.sub("", printable(line[:LINE_CAP], keep_newlines=False))
    return one_line(line, width)


def new_state():
    """What fold keeps of a log: the newest step line (shown), the newest step, the first and newest loss."""
    return {"last_line": None, "last_step": None, "first_loss": None, "last_loss": None}


def is_point(pair):
    """A [step, number] pair, as fold keeps a loss (progress.py keeps its losses and pace the same way)."""
    return (isinstance(pair, list) and len(pair) == 2 and files.bounded_step(pair[0]) is not None
            and files.bounded_number(pair[1]) is not None)


def trusted_state(state):
    """Whether state has new_state()'s shape, as fold keeps it: a copy read back from the share is data."""
    return (isinstance(state, dict) and set(state) == set(new_state())
            and (state["last_step"] is None or files.bounded_step(state["last_step"]) is not None)
            and all(state[k] is None or is_point(state[k]) for k in ("first_loss", "last_loss"))
            and (state["last_line"] is None or isinstance(state["last_line"], str) and len(state["last_line"]) <= 4096))


def fold(state, text, width=200):
    """Fold the lines of text (the lines a log gained) into state (new_state()'s form, updated in place); returns
    the rows of the steps they printed (parse_log's form). Linear in the text, whatever its lines' lengths."""
    steps = {}
    for line in (text or "").splitlines():
        match, values = _parse(line)
        if match is None:
            continue
        state["last_line"] = shown_step_line(line, width)
        if not values:
            continue
        step = int(match.group(1))
        steps.setdefault(step, {}).update(values)
        state["last_step"] = step
        loss = summarize(values).get("loss")
        if loss is not None:
            state["last_loss"] = [step, loss]
            state["first_loss"] = state["first_loss"] or [step, loss]
    return rows_of(steps)


def last_step_line(text, width=200):
    """The newest console-logger step line of a log (Ray's prefix and colours removed), shortened, or None."""
    for line in reversed((text or "").splitlines()):
        if _STEP.search(line[:LINE_CAP]):
            return shown_step_line(line, width)
    return None


def read_row(line):
    """(step, {key: value}, how many numbers were out of range) of one line verl's file logger wrote ({"step": N,
    "data": {...}}), or None when the line is no row (not JSON, no step in 0..files.STEP_MAX, over JSONL_LINE_CAP).

    Our own rows ({"step": N, "metrics": {...}}, the metrics.jsonl of records from before verl's logger was used) are
    read too. Only numbers within ±files.VALUE_MAX under short printable keys are kept; a number out of range (NaN,
    Infinity, a 400-digit integer) is left out and counted, anything else (null, a string, a list) left out."""
    if len(line) > JSONL_LINE_CAP:
        return None
    try:
        row = files.loads_bounded(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(row, dict):
        return None
    step, data = row.get("step"), row.get("data", row.get("metrics"))
    if files.bounded_step(step) is None or not isinstance(data, dict):
        return None
    values, dropped = {}, 0
    for key, value in data.items():
        if len(values) >= KEYS_CAP:
            break
        if not (isinstance(key, str) and 0 < len(key) <= KEY_CAP and key.isprintable()
                and isinstance(value, (int, float)) and not isinstance(value, bool)):
            continue
        if files.bounded_number(value) is None:
            dropped += 1
        else:
            values[key] = value
    return step, values, dropped


def file_row(line):
    """read_row's (step, {key: value}) of one line, or None."""
    parsed = read_row(line)
    return parsed and parsed[:2]


def fold_rows(steps, lines, counts=None):
    """Fold file-logger lines into {step: {key: value}} (a step logged twice, as SFT logs its validation, merges; a
    restarted trainer's repeated step takes the newest values). Returns the number of lines that were no row; counts,
    when given, gains under "bad_values" the lines that held a number out of range (left out)."""
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        parsed = read_row(line)
        if parsed is None:
            bad += 1
            continue
        steps.setdefault(parsed[0], {}).update(parsed[1])
        if parsed[2] and counts is not None:
            counts["bad_values"] = counts.get("bad_values", 0) + 1
    return bad


def out_of_range(lines):
    """What a note says of the lines that held a number out of range (read_row's third item)."""
    return f"{lines} line(s) hold a number out of range (NaN, infinite or beyond ±{files.VALUE_MAX:g}), left out"


def new_stat():
    """What read_metrics keeps of one name over every row: the count, sum, min and max of its values, and its values
    at the smallest and the largest step (the newest line's on a tie, as rows merge). A step a restarted trainer
    logged again counts again in count, sum, min and max."""
    return {"count": 0, "sum": 0.0, "min": None, "max": None, "first_step": None, "first": None, "last_step": None,
            "last": None}


def add_to_stat(stat, step, value):
    stat["count"] += 1
    stat["sum"] += value
    if stat["min"] is None or value < stat["min"]:
        stat["min"] = value
    if stat["max"] is None or value > stat["max"]:
        stat["max"] = value
    if stat["first_step"] is None or step <= stat["first_step"]:
        stat["first_step"], stat["first"] = step, value
    if stat["last_step"] is None or step >= stat["last_step"]:
        stat["last_step"], stat["last"] = step, value


class _Fold:
    """read_metrics' fold of a file's lines: memory bounded by ROWS_CAP, VALUES_CAP and NAMES_CAP, whatever the
    file's length. Rows are kept for steps that are multiples of `stride`, which doubles (every other kept row goes)
    whenever the rows or their values pass their caps: an even thinning by step."""

    def __init__(self, rows_cap, values_cap):
        self.rows_cap, self.values_cap = max(1, rows_cap), max(KEYS_CAP, values_cap)
        self.keys, self.summary, self.step = {}, {}, new_stat()
        self.kept, self.kept_values, self.stride, self.ends = {}, 0, 1, {}
        self.rows = self.bad_lines = self.bad_values = self.lost_names = 0
        self.previous = None

    def line(self, line):
        if not line.strip():
            return
        parsed = read_row(line)
        if parsed is None:
            self.bad_lines += 1
            return
        step, values, dropped = parsed
        self.rows += 1
        self.bad_values += bool(dropped)
        if step != self.previous:  # a validation line after its step's line is the same row
            add_to_stat(self.step, step, step)
        self.previous = step
        known = {}
        for key, value in values.items():
            held = self.keys.get(key)
            if held is None:
                if len(self.keys) >= NAMES_CAP:
                    self.lost_names += 1
                    continue
                held = self.keys[key] = (key, new_stat())
            add_to_stat(held[1], step, value)
            known[held[0]] = value  # the name's first string: kept rows share it, not one copy a line
        for name, value in summarize(known).items():
            add_to_stat(self.summary.setdefault(name, new_stat()), step, value)
        self._keep(step, known)

    def _keep(self, step, values):
        for end, newer in (("first", lambda s, e: s < e), ("last", lambda s, e: s > e)):
            held = self.ends.get(end)
            if held is None or newer(step, held[0]):
                self.ends[end] = (step, dict(values))
            elif step == held[0]:
                held[1].update(values)
        if step % self.stride:
            return
        row = self.kept.setdefault(step, {})
        before = len(row)
        row.update(values)
        self.kept_values += len(row) - before
        while len(self.kept) > self.rows_cap or self.kept_values > self.values_cap:
            self.stride *= 2  # at most 40 times: past STEP_MAX only step 0 is left
            self.kept = {s: r for s, r in self.kept.items() if s % self.stride == 0}
            self.kept_values = sum(len(r) for r in self.kept.values())

    def result(self, truncated_at=None):
        steps = dict(self.kept)
        steps.update(self.ends.values())
        rows = rows_of(steps)
        stats = {**{key: stat for key, stat in self.keys.values()}, **self.summary}
        if self.step["count"]:
            stats["step"] = self.step
        problems = [f"only its first {truncated_at} bytes were read"] if truncated_at else []
        if self.bad_lines:
            problems.append(f"{self.bad_lines} line(s) are not verl's rows")
        if self.bad_values:
            problems.append(out_of_range(self.bad_values))
        if self.lost_names:
            problems.append(f"{self.lost_names} value(s) under names past the first {NAMES_CAP} were left out")
        if self.stride > 1:
            problems.append(f"{len(rows)} of its {self.rows} rows are kept (every {self.stride}th step's, the first "
                            "and the last); the gates and values take every row")
        note = one_line("metrics.jsonl: " + "; ".join(problems), 400) if problems else None
        return {"rows": rows, "stats": stats, "lines": self.rows, "bad_lines": self.bad_lines,
                "bad_values": self.bad_values, "stride": self.stride, "note": note}


def read_metrics(path, limit=READ_LIMIT, rows_cap=ROWS_CAP, values_cap=VALUES_CAP):
    """A record's metrics.jsonl read for a report, streamed CHUNK at a time: {"rows": at most rows_cap rows (rows_of's
    form, thinned evenly by step, the first and last step's always), "stats": {name: new_stat's form over every row,
    for "step", the SUMMARY_KEYS names and verl's keys}, "lines", "bad_lines", "bad_values", "stride", "note": what
    was left out, in one line, or None}. The file is read as the share's data (never through a symlink, never
    blocking, at most limit bytes); missing or unreadable, it has no rows."""
    fold = _Fold(rows_cap, values_cap)
    offset, pending, skipping, size = 0, b"", False, 0
    while offset < limit:
        try:
            got = files.read_from(path, offset, min(CHUNK, limit - offset))
        except (OSError, files.RecordError):
            break  # what was read stays
        if got is None or not got[0]:
            break
        data, size = pending + got[0], got[1]
        offset += len(got[0])
        if skipping:  # the rest of a line over JSONL_LINE_CAP
            cut = data.find(b"\n") + 1
            skipping, data = not cut, data[cut:] if cut else b""
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            fold.line(line)
        pending = data[end:]
        if len(pending) > JSONL_LINE_CAP:
            fold.bad_lines, pending, skipping = fold.bad_lines + 1, b"", True
    if pending and not skipping:
        fold.line(pending.decode("utf-8", errors="replace"))
    return fold.result(limit if offset >= limit and size > limit else None)


def read_jsonl(path, limit=READ_LIMIT):
    """read_metrics' rows: at most ROWS_CAP, thinned evenly by step once the file holds more."""
    return read_metrics(path, limit)["rows"]


def series(rows, name):
    """[(step, value)] of one summary name or verl key across rows."""
    out = []
    for row in rows:
        value = row.get(name, (row.get("metrics") or {}).get(name))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((row["step"], float(value)))
    return out
