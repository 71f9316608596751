"""verl's per-step metrics: read from its own file logger, and (for a job that is not verl) from its console.

A verl job (workload sft, ppo or grpo) runs with verl's `file` logger writing the record's metrics.jsonl
(VERL_FILE_LOGGER_PATH, set by jobspec_render): one JSON object a step, {"step": N, "data": {key: value}}, every
key verl logged with its exact value. read_jsonl turns that file into one row a step: the values (`metrics`) plus the
few that people compare across workloads under one name each (SUMMARY_KEYS): SFT's train/loss and PPO's
actor/pg_loss are both `loss`, and so on. The regression report, its gates and trend, and a job's progress
(module_utils/jobs/progress.py) read these rows.

The console parse stays for one case: a job that is not verl (workload command, a site's own script) printing
`step:N - key:value` lines, whose progress a follower and the hang detector still see (fold). A verl job's console
lines are for people reading driver.log.

A job's files are untrusted data: a line of the file logger is looked at only up to LINE_CAP bytes, keys are short
printable names and values finite numbers; every console pattern runs in time linear in the line.

Imported by modules as ansible.module_utils.verl.metrics: standard library and conventions only.
"""

import json
import math
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
    return value if math.isfinite(value) else None


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
    """(step, {key: value}) from one console-logger line, or None if it is not one."""
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
    return (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int
            and isinstance(pair[1], (int, float)) and not isinstance(pair[1], bool))


def trusted_state(state):
    """Whether state has new_state()'s shape, as fold keeps it: a copy read back from the share is data."""
    return (isinstance(state, dict) and set(state) == set(new_state())
            and (state["last_step"] is None or type(state["last_step"]) is int)
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


def file_row(line):
    """(step, {key: value}) of one line verl's file logger wrote ({"step": N, "data": {...}}), or None.

    Our own rows ({"step": N, "metrics": {...}}, the metrics.jsonl of records from before verl's logger was used) are
    read too. Only finite numbers under short printable keys are kept."""
    if len(line) > JSONL_LINE_CAP:
        return None
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(row, dict):
        return None
    step, data = row.get("step"), row.get("data", row.get("metrics"))
    if type(step) is not int or step < 0 or not isinstance(data, dict):
        return None
    values = {}
    for key, value in data.items():
        if len(values) >= KEYS_CAP:
            break
        if (isinstance(key, str) and 0 < len(key) <= KEY_CAP and key.isprintable()
                and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            values[key] = float(value) if isinstance(value, float) else value
    return step, values


def fold_rows(steps, lines):
    """Fold file-logger lines into {step: {key: value}} (a step logged twice, as SFT logs its validation, merges; a
    restarted trainer's repeated step takes the newest values). Returns the number of lines that were no row."""
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        parsed = file_row(line)
        if parsed is None:
            bad += 1
            continue
        steps.setdefault(parsed[0], {}).update(parsed[1])
    return bad


def read_jsonl(path, limit=1 << 28):
    """The rows (rows_of's form) of a record's metrics.jsonl; [] when it is missing or cannot be read. The file is
    read as the share's data (never through a symlink, at most limit bytes) and line by line."""
    try:
        data = files.read_from(path, 0, limit)
    except (OSError, files.RecordError):
        return []
    steps = {}
    if data is not None:
        fold_rows(steps, data[0].decode("utf-8", errors="replace").splitlines())
    return rows_of(steps)


def series(rows, name):
    """[(step, value)] of one summary name or verl key across rows."""
    out = []
    for row in rows:
        value = row.get(name, (row.get("metrics") or {}).get(name))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((row["step"], float(value)))
    return out
