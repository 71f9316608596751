"""verl's per-step metrics, read from its console logger, as metrics.jsonl and an SVG plot in a job's record.

verl's console logger prints one line per step, `step:N - key:value - key:value ...` (SFT prints the last step's
`val/loss` on a line of its own). parse_log turns a driver log into one row per step: every numeric value verl
printed (`metrics`), plus the few that people compare across workloads under one name each (SUMMARY_KEYS): SFT's
train/loss and PPO's actor/pg_loss are both `loss`, and so on. The rows go to the record as metrics.jsonl and as
metrics.svg, small line charts drawn here with plain strings (no plotting library on the nodes).

A job's log is untrusted text: every pattern here runs in time linear in the line (no nested or unbounded
repetition that can backtrack), and a line longer than LINE_CAP is looked at only in its first LINE_CAP characters
(a step line is a few KB at most). fold() parses a log a piece at a time (each poll only the lines the log
gained: see module_utils/jobs/evidence.py refresh_log), keeping what the record needs in a small state.

Imported by modules as ansible.module_utils.verl_metrics: standard library and conventions only.
"""

import json
import math
import re
from xml.sax.saxutils import escape

from ansible.module_utils.conventions import one_line, printable

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "metrics.svg"

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
# Charted in this order when present; each gets a panel.
PLOT_SERIES = ("loss", "reward", "kl", "entropy", "grad_norm", "critic_loss", "response_length", "step_time_s")

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


def parse_log(text):
    """One row per step, in step order: {"step": N, <summary names>..., "metrics": {verl key: value}}.

    A step printed twice (SFT's validation line, a resumed run's replay) merges into one row; a restarted
    trainer's repeated steps take the newest values.
    """
    return fold(new_state(), text)


def shown_step_line(line, width=200):
    """A step line as a progress line shows it: control characters, escapes and Ray's prefix removed, shortened."""
    line = _RAY_PREFIX.sub("", printable(line[:LINE_CAP], keep_newlines=False))
    return one_line(line, width)


def new_state():
    """What fold keeps of a log: the newest step line (shown), the newest step, the first and newest loss."""
    return {"last_line": None, "last_step": None, "first_loss": None, "last_loss": None}


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


def merge_rows(old, new):
    """Rows of metrics.jsonl so far merged with the rows a log's new lines gave (the newer values win)."""
    steps = {}
    for row in [*old, *new]:
        metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
        steps.setdefault(row["step"], {}).update(metrics)
    return rows_of(steps)


def last_step_line(text, width=200):
    """The newest console-logger step line of a log (Ray's prefix and colours removed), shortened, or None."""
    for line in reversed((text or "").splitlines()):
        if _STEP.search(line[:LINE_CAP]):
            return shown_step_line(line, width)
    return None


def step_losses(text):
    """[(step, loss)] in the log's order: SFT's train/loss or PPO/GRPO's actor/pg_loss (SUMMARY_KEYS' loss).

    Log order, not step order: the record's last step is the last one the trainer printed."""
    found = []
    for line in (text or "").splitlines():
        parsed = parse_line(line)
        if parsed:
            loss = summarize(parsed[1]).get("loss")
            if loss is not None:
                found.append((parsed[0], loss))
    return found


def jsonl(rows):
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def read_jsonl(path):
    """Rows of a metrics.jsonl; [] when missing; unreadable lines skipped."""
    rows = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("step"), int):
                    rows.append(row)
    except OSError:
        return []
    return rows


def series(rows, name):
    """[(step, value)] of one summary name or verl key across rows."""
    out = []
    for row in rows:
        value = row.get(name, (row.get("metrics") or {}).get(name))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((row["step"], float(value)))
    return out


# --- SVG ---

PANEL_W, PANEL_H, PAD_L, PAD_R, PAD_T, PAD_B = 320, 170, 56, 12, 26, 28
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _fmt(value):
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.2e}"
    return f"{value:.3g}"


def _panel(x0, y0, title, points, colour, x_label):
    """One chart: a framed plot area, min/max labels on both axes, the line and its points."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    if y_hi == y_lo:
        pad = abs(y_lo) * 0.1 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    left, top = x0 + PAD_L, y0 + PAD_T
    width, height = PANEL_W - PAD_L - PAD_R, PANEL_H - PAD_T - PAD_B

    def at(x, y):
        return (left + (x - x_lo) / (x_hi - x_lo) * width, top + (y_hi - y) / (y_hi - y_lo) * height)

    coords = [at(x, y) for x, y in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    parts = [
        f'<text x="{left}" y="{y0 + 16}" font-size="12" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>',
        f'<text x="{left - 4}" y="{top + 9}" font-size="10" text-anchor="end">{_fmt(y_hi)}</text>',
        f'<text x="{left - 4}" y="{top + height}" font-size="10" text-anchor="end">{_fmt(y_lo)}</text>',
        f'<text x="{left}" y="{top + height + 13}" font-size="10">{_fmt(x_lo)}</text>',
        f'<text x="{left + width}" y="{top + height + 13}" font-size="10" text-anchor="end">{_fmt(x_hi)}</text>',
        (f'<text x="{left + width / 2}" y="{top + height + 13}" font-size="10" text-anchor="middle">'
         f'{escape(x_label)}</text>'),
    ]
    if len(coords) > 1:
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
    parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in coords]
    return parts


def svg_charts(title, charts, x_label="step", columns=2):
    """An SVG of small line charts, `charts` = [(name, [(x, y), ...])]; charts without points are left out."""
    charts = [(name, points) for name, points in charts if points]
    rows = max(1, math.ceil(len(charts) / columns))
    width, height = PANEL_W * columns, PANEL_H * rows + 30
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
              f'viewBox="0 0 {width} {height}" font-family="sans-serif">'),
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="8" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    if not charts:
        parts.append('<text x="8" y="50" font-size="12">no values yet</text>')
    for i, (name, points) in enumerate(charts):
        x0, y0 = (i % columns) * PANEL_W, 30 + (i // columns) * PANEL_H
        parts += _panel(x0, y0, name, points, COLOURS[i % len(COLOURS)], x_label)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def plot_svg(rows, title):
    """The per-job plot: a panel per PLOT_SERIES name that has values."""
    return svg_charts(title, [(name, series(rows, name)) for name in PLOT_SERIES])
