"""A verl job's progress, from the metrics.jsonl its file logger writes into the record, read a look at a time.

Each look (a wait's poll, a watcher's pass, do=status, finalize) reads only the bytes the file gained since the last
one: logs/metrics.state.json keeps the offset of the whole lines taken and what they said (the first and newest step
and loss, the newest step's values people watch, two points of the pace, the lines that were no row). Following a
multi-day job costs its new lines, never its history.

The pace is verl's own timing_s/step where the workload logs it (PPO, GRPO); else the file's modification times at
two looks that read it to its end (when the logger wrote the newest step each saw), so the poll interval does not
matter. The file is the job's data: read as files.read_from reads (no symlink, no FIFO, at most READ_CAP a look),
each line bounded (verl.metrics.read_row: a step in 0..files.STEP_MAX, values within ±files.VALUE_MAX, a line with
a number out of range counted in `bad_values`), and the state file is taken only in the shape this module writes,
its numbers within the same bounds.
"""

from ansible.module_utils.base import conventions, files
from ansible.module_utils.jobs.record.record import json_text
from ansible.module_utils.jobspec.fields import TRAINERS
from ansible.module_utils.verl import metrics

# What one look reads of metrics.jsonl at most; the rest waits for the next look.
READ_CAP = 8 << 20
_INTS = ("offset", "bad_lines", "bad_values")
_OPTIONAL = ("first_step", "last_step")


def new_state():
    return {"offset": 0, "bad_lines": 0, "bad_values": 0, "skipping": False, "partial": False,
            "first_step": None, "last_step": None, "first_loss": None, "last_loss": None, "last": {}, "pace": []}


def from_console(parsed):
    """A state holding only what the driver log's console lines told (verl.metrics.fold's state): the newest step and
    its loss. For a verl job whose metrics.jsonl has no row yet, so its progress still reads as `step N of M, loss
    X` rather than verl's raw console line (its record's metrics_note says why the file is missing)."""
    state = new_state()
    if parsed and files.bounded_step(parsed.get("last_step")) is not None:
        state["last_step"] = parsed["last_step"]
        loss = parsed.get("last_loss")
        if metrics.is_point(loss) and loss[0] == parsed["last_step"]:
            state["last"] = {"loss": loss[1]}
    return state


def _number(value):
    return files.bounded_number(value) is not None


def _trusted(state):
    """The state read back when it has the shape this module writes (the share is data), else None."""
    if not isinstance(state, dict) or set(state) != set(new_state()):
        return None
    if not all(files.bounded_int(state[k]) is not None for k in _INTS):
        return None
    if not all(state[k] is None or files.bounded_step(state[k]) is not None for k in _OPTIONAL):
        return None
    if not all(isinstance(state[k], bool) for k in ("skipping", "partial")):
        return None
    pace = state["pace"]
    if not isinstance(pace, list) or len(pace) > 2 or not all(metrics.is_point(p) for p in pace):
        return None
    if not all(state[k] is None or metrics.is_point(state[k]) for k in ("first_loss", "last_loss")):
        return None
    last = state["last"]
    if not isinstance(last, dict) or not all(isinstance(k, str) and _number(v) for k, v in last.items()):
        return None
    return state


def read_state(job):
    try:
        text = files.read_text(job.rec["metrics_state"], 1 << 16, base=job.rec["dir"])
        return _trusted(files.loads_bounded(text)) if text else None
    except (OSError, ValueError, RecursionError, files.RecordError):
        return None


def refresh(job, final=False):
    """Read what metrics.jsonl gained since the last look and keep it in the state file; returns the state (new_state's
    form), or None when the record has no metrics.jsonl. final: the job ended, so the file is read to its end and a
    last line without its newline is the logger cut short (noted as `partial`)."""
    state = read_state(job) or new_state()
    before = dict(state)
    while True:
        try:
            read = _look(job, state, final)
        except (OSError, files.RecordError):
            return state if state["offset"] else None
        if read is None:
            return None
        if not (final and read):  # a job that ended is read to the end, a look at a time
            break
    if state != before:
        try:
            job.record.write_text(job.rec["metrics_state"], json_text(state))
        except OSError:
            pass  # the next look reads these lines again
    return state


def _look(job, state, final):
    """One read of at most READ_CAP bytes folded into state; returns how many bytes it took, or None (no file)."""
    path, base = job.rec["metrics"], job.rec["dir"]
    got = files.read_from(path, state["offset"], READ_CAP, base=base)
    if got is not None and got[1] < state["offset"]:  # a shorter file: another one, read from the start
        state.update(new_state())
        got = files.read_from(path, 0, READ_CAP, base=base)
    if got is None:
        return None
    data, size, mtime_ms = got
    start = state["offset"]
    if state["skipping"]:  # the rest of a line longer than READ_CAP
        cut = data.find(b"\n") + 1
        state["skipping"] = not cut
        state["offset"] += cut if cut else len(data)
        data = data[cut:] if cut else b""
    end = data.rfind(b"\n") + 1
    if not end and len(data) >= READ_CAP:  # a line longer than a look reads: skip it
        state.update(offset=state["offset"] + len(data), skipping=True, bad_lines=state["bad_lines"] + 1)
        end, data = 0, b""
    steps, counts = {}, {}
    state["bad_lines"] += metrics.fold_rows(steps, data[:end].decode("utf-8", errors="replace").splitlines(), counts)
    state["bad_values"] += counts.get("bad_values", 0)
    state["offset"] += end
    at_end = state["offset"] == size
    # What is left after the last newline, when this look read to the file's end, is a line still being written,
    # or (final) one the logger never finished.
    state["partial"] = bool(final and not at_end and state["offset"] + len(data) - end == size)
    _take(state, steps, mtime_ms if at_end else None)
    return state["offset"] - start


def _take(state, steps, mtime_ms):
    """Fold the rows of a look into the state; mtime_ms: when the file was last written, if this look read to its
    end (a point of the pace)."""
    for step in sorted(steps):
        values = steps[step]
        summary = metrics.summarize(values)
        for key in ("timing_s/step", "perf/throughput", "train/global_tokens"):
            if key in values:
                summary[key] = values[key]
        if state["last_step"] is None or step >= state["last_step"]:
            state["last"] = {**(state["last"] if step == state["last_step"] else {}), **summary}
            state["last_step"] = step
        if state["first_step"] is None or step < state["first_step"]:
            state["first_step"] = step
        if "loss" in summary:
            state["last_loss"] = [step, summary["loss"]]
            state["first_loss"] = state["first_loss"] or [step, summary["loss"]]
    if steps and mtime_ms is not None:
        point = [state["last_step"], mtime_ms]
        state["pace"] = [state["pace"][0], point] if state["pace"] else [point]


def step_s(state):
    """Seconds per step: verl's timing_s/step, else from the pace's two points, else None."""
    logged = state["last"].get("timing_s/step")
    if _number(logged) and logged > 0:
        return float(logged)
    if len(state["pace"]) == 2:
        (s0, t0), (s1, t1) = state["pace"]
        if s1 > s0 and t1 >= t0:
            return (t1 - t0) / 1000 / (s1 - s0)
    return None


def _short(value):
    return f"{value:.4g}"


# A time left beyond this is no estimate (a step time from a broken logger): it is not shown.
LEFT_CAP_S = 10 * 365 * 86400


def _duration(seconds):
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def readable(state, total=None):
    """What people watch of a verl job, from its state: step N of M, loss, reward, seconds per step, throughput and
    the time left (each only when known), e.g. `step 12 of 100, loss 0.5321, reward 0.41, 3.2 s/step, 1520 tok/s,
    4m41s left`. None before the first step."""
    step = state["last_step"]
    if step is None:
        return None
    last = state["last"]
    total = total if files.bounded_step(total) else None
    parts = [f"step {step}" + (f" of {total}" if total else "")]
    parts += [f"{name} {_short(last[name])}" for name in ("loss", "reward") if name in last]
    pace = step_s(state)
    if pace:
        parts.append(f"{pace:.3g} s/step")
    tokens = last.get("perf/throughput")
    if tokens is None and pace and _number(last.get("train/global_tokens")):
        tokens = last["train/global_tokens"] / pace
    if tokens:
        parts.append(f"{tokens:.0f} tok/s" if tokens < 1e6 else f"{tokens:.3g} tok/s")
    left = pace * (total - step) if pace and total and total > step else None
    if left is not None and left < LEFT_CAP_S:
        parts.append(f"{_duration(left)} left")
    return ", ".join(parts)


def note(state, workload, console_step):
    """Why a verl job's metrics.jsonl is missing or cut short, or None (a job that is not verl: None).

    console_step: the newest step the driver log printed (the console logger's), to tell a file logger cut short."""
    if workload not in TRAINERS:
        return None
    if state is None or state["last_step"] is None:
        bad = state["bad_lines"] if state is not None else 0
        if console_step is not None:
            why = (f"no step in metrics.jsonl, but the driver log printed step {console_step}: verl's file logger "
                   "did not write (trainer.logger without file?)")
            return why + (f"; {bad} line(s) of it are not verl's rows" if bad else "")
        if bad:
            return f"metrics.jsonl has no row of verl's: its {bad} line(s) are not verl's rows"
        return "no metrics.jsonl: verl's file logger wrote no step (the trainer logged none)"
    problems = []
    if state["partial"]:
        problems.append("its last line is cut short")
    if console_step is not None and console_step > state["last_step"]:
        problems.append(f"it ends at step {state['last_step']} but the driver log printed step {console_step}")
    if state["bad_lines"]:
        problems.append(f"{state['bad_lines']} line(s) are not verl's rows")
    if state["bad_values"]:
        problems.append(metrics.out_of_range(state["bad_values"]))
    return conventions.one_line("metrics.jsonl: " + "; ".join(problems), 300) if problems else None
