"""The report of one regression run: ${shared_root}/regression/<run_id>/.

A regression run submits a suite of JobSpecs one after another; each job leaves its own
record under ${shared_root}/jobs/<submission_id>/. This file turns those records into
report.json (read back by later runs to spot regressions), junit.xml (for CI) and
summary.md (for a person). The runner's lock and retention are the control host's
(plugin_utils/regression_run.py).

Times (started_at, ended_at) are epoch milliseconds, like the job records. A number read from a record or an
earlier report.json is taken within base/files.py's bounds (a 400-digit integer is no number here, never an
OverflowError), and a job's metrics come from verl.metrics.read_metrics, bounded in memory whatever their length.
"""

import json
import math
import os
import re
import time
import xml.etree.ElementTree as ET

from ansible.module_utils.base import files
from ansible.module_utils.base.conventions import ID_RULE, job_dir, matches, one_line, regression_dir, tensorboard_link
from ansible.module_utils.jobs.record.record import read_json, write_text
from ansible.module_utils.jobs.record.status import MISSING, STATES
from ansible.module_utils.regression import chain as regression_chain
from ansible.module_utils.regression import gates as regression_gates
from ansible.module_utils.regression import svg_charts
from ansible.module_utils.verl.metrics import series

LOG_TAIL_LINES = 40
MESSAGE_WIDTH = 200
TREND_RUNS = 5
TREND_FILE = "trend.svg"
# Per-entry values kept in report.json for the trend plot: (label, metrics.jsonl name, reduction).
TREND_METRICS = (("last loss", "loss", "last"), ("last reward", "reward", "last"),
                 ("mean step s", "step_time_s", "mean"))
# Characters XML 1.0 forbids even escaped (ANSI colour codes in logs are the usual ones): removed.
_XML_INVALID = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# The states a report shows: a record's (module_utils/jobs/record/status.py) and MISSING (no record); anything else read
# from a record or an earlier report.json is shown as INVALID_STATE, never as the text it held.
KNOWN_STATES = (*STATES, MISSING)
INVALID_STATE = "invalid"
# Job text in summary.md (docs/regressions.md): on one line, control characters and bidirectional overrides removed,
# HTML's & < > as entities, and a backslash before every character that starts Markdown inline markup (code, emphasis,
# strikethrough, links and images, table cells) and before what GitHub would turn into a link (http://, www., @).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_MD_MARKUP = re.compile(r"[\\`*~\[\]|!@]|(?<![^\W_])_|_(?![^\W_])|:(?=//)|(?<=www)\.", re.IGNORECASE)
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# A TensorBoard link in report.json: http(s)://host[:port]/?runFilter=<id>#timeseries, nothing Markdown could misread.
_BOARD = re.compile(r"^https?://(?:[A-Za-z0-9.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(:[0-9]{1,5})?/\?runFilter=[A-Za-z0-9._%/\-]{1,600}#timeseries$")


def entry_result(entry_name, spec, submission_id, status, log_tail, record_dir, metric_rows=None, gates=None,
                 tensorboard=None, metrics=None):
    """One suite entry's result from its job's status.json (None if the job left none).

    metrics: what verl.metrics.read_metrics read of the job's metrics.jsonl (its rows, and its stats over every row,
    which the gates and the trend's values reduce); else metric_rows, per-step rows (read_jsonl's form). gates: the
    entry's checked gates, evaluated against them: the entry passes when its job succeeded and every gate holds.
    tensorboard: the URL of its run in the cluster's TensorBoard, if there is one.
    """
    get = (status or {}).get
    phases = get("phases") if isinstance(get("phases"), dict) else {}
    state = known_state(get("state") or MISSING)
    rows = (metrics or {}).get("rows") or metric_rows or []
    stats = (metrics or {}).get("stats")
    gate_results = regression_gates.evaluate_all(gates, rows, stats) if state == "SUCCEEDED" else []
    return {
        "name": entry_name,
        "spec": spec,
        "submission_id": submission_id,
        "state": state,
        "passed": state == "SUCCEEDED" and all(g["ok"] for g in gate_results),
        "gates": gate_results,
        # Its curves: the run in the cluster's TensorBoard (verl's tensorboard logger wrote it beside metrics.jsonl).
        "tensorboard": tensorboard if rows else None,
        "metrics": {label: regression_gates.reduce_stat(stats.get(name), at) if stats is not None
                    else regression_gates.reduce_values([v for _, v in series(rows, name)], at)
                    for label, name, at in TREND_METRICS},
        # What reading metrics.jsonl left out (lines that are no row, numbers out of range, rows thinned), or None.
        "metrics_note": (metrics or {}).get("note"),
        "durations": {"queued_s": queued_s(status), **{key: phases.get(key) for key in ("pending_s", "running_s",
                                                                                        "total_s")}},
        "steps": get("steps"),
        "first_loss": get("first_loss"),
        "last_loss": get("last_loss"),
        "error_type": get("error_type"),
        "reason": get("reason"),
        "message": one_line(get("message"), MESSAGE_WIDTH),
        # Why a failed job failed (module_utils/verl/diagnosis.py, written into its status.json).
        "diagnosis": get("diagnosis"),
        # Its chain of attempts: goodput (productive share, lost by cause) and the nodes blamed (regression/chain.py).
        "chain": regression_chain.entry_chain(status, record_dir),
        "log_tail": "\n".join((log_tail or "").splitlines()[-LOG_TAIL_LINES:]),
        "record": record_dir,
    }


def queued_s(status):
    """Seconds the entry's job waited in the queue (docs/queue.md): from entering it to its admission, or to its end
    when it never left it (stopped, QUEUE_TIMEOUT); 0 when it went to Ray at once; None without a queue part."""
    queue = (status or {}).get("queue")
    since = _number(queue.get("since")) if isinstance(queue, dict) else None
    left = _number(queue.get("admitted_at")) if since is not None else None
    left = left if left is not None else _number((status or {}).get("end_time"))
    if since is None or left is None or not math.isfinite(left - since):
        return None
    return round(max(0.0, left - since) / 1000, 3)


def build_report(run_id, suite, started_at, ended_at, results, previous, loss_rise=0.10, duration_growth=0.50):
    """report.json: the results, counts and what regressed against the newest earlier run."""
    baseline = previous[0] if previous else None
    regressions = _regressions(results, baseline, loss_rise, duration_growth)
    passed = sum(1 for r in results if r["passed"])
    return {
        "run_id": run_id,
        "suite": suite,
        "started_at": started_at,
        "ended_at": ended_at,
        "wall_s": round((ended_at - started_at) / 1000, 3),
        "counts": {
            "total": len(results),
            "passed": passed,
            "failed": len(results) - passed,
            "regressed": len({r["entry"] for r in regressions}),
        },
        "entries": results,
        "regressions": regressions,
        "compared_with": baseline["run_id"] if baseline else None,
        "thresholds": {"loss_rise": loss_rise, "duration_growth": duration_growth},
        "ok": passed == len(results) and not regressions,
    }


def _regressions(results, baseline, loss_rise, duration_growth):
    if not baseline:
        return []
    before = _entries_by_name(baseline)
    found = []

    def add(entry, kind, old, new, text):
        found.append({"entry": entry["name"], "kind": kind, "previous": old, "current": new,
                      "message": f"{text} (vs run {one_line(baseline.get('run_id'), 130)})"})

    for entry in results:
        old = before.get(entry["name"])
        if not isinstance(old, dict):  # a new entry has nothing to regress from
            continue
        if old.get("passed") is True and not entry["passed"]:
            was = known_state(old.get("state"))
            add(entry, "state", was, entry["state"], f"was {was}, now {entry['state']}")
        # A failed job's loss and duration say nothing (it may have been killed at a deadline).
        if not (old.get("passed") is True and entry["passed"]):
            continue
        was, now = _number(old.get("last_loss")), _number(entry["last_loss"])
        if (was is not None and math.isfinite(was) and now is not None
                and (not math.isfinite(now) or now > was + loss_rise * abs(was))):
            add(entry, "loss", was, now, f"last_loss rose {_fmt_loss(was)} → {_fmt_loss(now)}")
        was = _number(old["durations"].get("total_s") if isinstance(old.get("durations"), dict) else None)
        now = _number(entry["durations"].get("total_s"))
        if was and now is not None and now > was * (1 + duration_growth):
            add(entry, "duration", was, now, f"total_s grew {was:.1f} → {now:.1f} (+{(now / was - 1) * 100:.0f} %)")
    return found


def junit_xml(report):
    """JUnit XML: one testcase per entry; a failed or regressed entry carries a <failure>."""
    regressed = {}
    for reg in report["regressions"]:
        regressed.setdefault(reg["entry"], []).append(reg["message"])
    classname = _xml_text(f"regression.{report['suite']}")
    suites = ET.Element("testsuites", name=_xml_text(f"regression {report['suite']}"))
    suite = ET.SubElement(suites, "testsuite", name=classname, errors="0", skipped="0",
                          timestamp=iso_time(report["started_at"], zone=False), time=f"{report['wall_s']:.3f}")
    failures = 0
    for entry in report["entries"]:
        case = ET.SubElement(suite, "testcase", classname=classname, name=_xml_text(entry["name"]),
                             time=f"{entry['durations'].get('total_s') or 0:.3f}")
        notes = regressed.get(entry["name"], [])
        if entry["passed"] and not notes:
            continue
        failures += 1
        message = "; ".join(([] if entry["passed"] else [_failure_text(entry)]) + [f"regression: {n}" for n in notes])
        kind = "REGRESSION" if entry["passed"] else ("GATE" if entry["state"] == "SUCCEEDED" else entry["state"])
        failure = ET.SubElement(case, "failure", message=_xml_text(message), type=_xml_text(kind))
        failure.text = _xml_text(f"record: {entry['record']}\n\n{entry['log_tail']}")
    for element in (suites, suite):
        element.set("tests", str(len(report["entries"])))
        element.set("failures", str(failures))
    suites.set("time", f"{report['wall_s']:.3f}")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def summary_md(report, previous):
    """summary.md: the verdict, a table of entries, and how this run compares with earlier ones.

    Every text from a job, a record or an earlier report goes through md() (states through known_state): a message
    is shown as the text it is, never as a link, an image, HTML or a heading.
    """
    counts = report["counts"]
    verdict = "PASS" if report["ok"] else "FAIL"
    headline = f"{counts['passed']}/{counts['total']} passed"
    if counts["failed"]:
        headline += f", {counts['failed']} failed"
    if counts["regressed"]:
        headline += f", {counts['regressed']} regressed"
    regressed = {r["entry"] for r in report["regressions"]}
    lines = [
        f"# {verdict}: {md(report['suite'])}, {headline}",
        "",
        (f"Run {_code(report['run_id'])}, started {iso_time(report['started_at'])}, "
         f"wall time {_duration(report['wall_s'])}."),
        "",
        "| entry | state | steps | loss first → last | last reward | gates | queued s | total s | record | curves |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in report["entries"]:
        state = known_state(e["state"]) + (" (regressed)" if e["name"] in regressed else "")
        if e["state"] == "SUCCEEDED" and not e["passed"]:
            state += " (gate failed)"
        loss = f"{_fmt_loss(e['first_loss'])} → {_fmt_loss(e['last_loss'])}"
        gates = e.get("gates") or []
        gate_cell = f"{sum(g['ok'] for g in gates)}/{len(gates)}" if gates else "–"
        reward = _fmt_loss((e.get("metrics") or {}).get("last reward"))
        cells = [md(c) for c in (e["name"], state, _fmt(e["steps"]), loss, reward, gate_cell,
                                 _fmt_seconds(e["durations"].get("queued_s")),
                                 _fmt_seconds(e["durations"].get("total_s")))]
        link = _record_link(e["submission_id"])
        cells.append(f"[{md(e['submission_id'])}]({link})" if link else "–")
        board = e.get("tensorboard")
        cells.append(f"[TensorBoard]({board})" if link and _board_link(board, e["submission_id"]) else "–")
        lines.append("| " + " | ".join(cells) + " |")
    gate_lines = [f"- {'✓' if g['ok'] else '✗'} **{md(e['name'])}** {md(g['message'])}"
                  for e in report["entries"] for g in e.get("gates") or []]
    if gate_lines:
        lines += ["", "## Gates", ""] + gate_lines
    failed = [e for e in report["entries"] if not e["passed"]]
    if failed:
        lines += ["", "## Failures", ""]
        lines += [f"- **{md(e['name'])}**: {md(_failure_text(e))}" for e in failed]
    lines += regression_chain.section(report["entries"], md)
    notes = [f"- **{md(e['name'])}**: {md(e['metrics_note'])}" for e in report["entries"] if e.get("metrics_note")]
    if notes:
        lines += ["", "## Metrics notes", ""] + notes
    lines += ["", f"Trend across runs: [{TREND_FILE}]({TREND_FILE})", "", "## Compared with previous runs", ""]
    if not previous:
        lines.append("No earlier run of this suite.")
        return "\n".join(lines) + "\n"
    lines.append(f"Baseline: run {_code(previous[0].get('run_id'))} ({iso_time(previous[0]['started_at'])}).")
    lines += ["", "Regressions:"] + ([f"- **{md(r['entry'])}**: {md(r['message'])}" for r in report["regressions"]]
                                     or ["- none"])
    before = _entries_by_name(previous[0])
    changes = [f"- {md(e['name'])}: new entry ({known_state(e['state'])})" if e["name"] not in before
               else f"- {md(e['name'])}: {known_state(before[e['name']].get('state'))} → {known_state(e['state'])}"
               for e in report["entries"]
               if known_state(before.get(e["name"], {}).get("state")) != known_state(e["state"])]
    lines += ["", "State changes:"] + (changes or ["- none"])
    lines += ["", f"Trends (oldest → this run, up to {TREND_RUNS} earlier runs):"]
    lines += _trends(report["entries"], previous[:TREND_RUNS][::-1]) or ["- no earlier values"]
    return "\n".join(lines) + "\n"


def _trends(entries, older):
    """`- smoke total_s: 6.1, 5.9, 6.4 → 6.0` per entry and metric that has earlier values."""
    metrics = (("total_s", lambda e: e["durations"].get("total_s") if isinstance(e.get("durations"), dict) else None,
                _fmt_seconds),
               ("last_loss", lambda e: e.get("last_loss"), _fmt_loss))
    out = []
    for entry in entries:
        past = [_entries_by_name(run).get(entry["name"]) for run in older]
        for label, value, fmt in metrics:
            values = [value(e) if e else None for e in past]
            if any(v is not None for v in values):
                out.append(f"- {md(entry['name'])} {label}: {', '.join(fmt(v) for v in values)} → {fmt(value(entry))}")
    return out


def trend_svg(report, previous):
    """The suite's trend plot: per entry and TREND_METRICS value (and total s), one point per run, oldest first."""
    runs = previous[:TREND_RUNS][::-1] + [report]
    charts = []
    for entry in report["entries"]:
        getters = [(label, lambda e, label=label: (e.get("metrics") or {}).get(label)) for label, _, _ in TREND_METRICS]
        getters.append(("total s", lambda e: (e.get("durations") or {}).get("total_s")))
        for label, get in getters:
            points = []
            for i, run in enumerate(runs, start=1):
                old = next((e for e in run.get("entries", []) if e.get("name") == entry["name"]), None)
                value = _number(get(old)) if old else None
                if value is not None and math.isfinite(value):
                    points.append((i, value))
            charts.append((f"{entry['name']}: {label}", points))
    title = f"{report['suite']}: the last {len(runs)} runs (x: run, oldest 1 → this run {len(runs)})"
    return svg_charts.svg_charts(title, charts, x_label="run")


def write_report(run_dir, report, previous):
    """Write summary.md, junit.xml, trend.svg and report.json; report.json last, as it marks the run complete."""
    os.makedirs(run_dir, exist_ok=True)
    paths = {name: os.path.join(run_dir, name) for name in ("summary.md", "junit.xml", TREND_FILE, "report.json")}
    write_text(paths[TREND_FILE], trend_svg(report, previous))
    write_text(paths["summary.md"], summary_md(report, previous))
    write_text(paths["junit.xml"], junit_xml(report))
    write_text(paths["report.json"], json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    return paths


def load_previous(regression_root, suite, exclude_run_id, limit=5):
    """Earlier complete reports of `suite`, newest first by their start time; broken files skipped."""
    try:
        names = os.listdir(regression_root)
    except OSError:
        return []
    reports = []
    for name in names:
        report = read_json(os.path.join(regression_root, name, "report.json"))
        if (isinstance(report, dict) and report.get("suite") == suite
                and exclude_run_id not in (name, report.get("run_id"))
                and files.bounded_number(report.get("started_at")) is not None
                and 0 <= report["started_at"] <= files.MS_MAX
                and isinstance(report.get("entries"), list)):
            reports.append(report)
    reports.sort(key=lambda r: r["started_at"], reverse=True)
    return reports[:limit]


def _failure_text(entry):
    """`FAILED / DEADLINE_EXCEEDED / RuntimeError: message`, or the failed gates of a job that succeeded."""
    failed_gates = [g["message"] for g in entry.get("gates") or [] if not g["ok"]]
    if entry["state"] == "SUCCEEDED" and failed_gates:
        return "; ".join(failed_gates)
    head = " / ".join(str(p) for p in (entry["state"], entry["reason"], entry["error_type"]) if p)
    text = f"{head}: {entry['message']}" if entry["message"] else head
    found = entry.get("diagnosis") if isinstance(entry.get("diagnosis"), dict) else {}
    if found.get("kind") and found["kind"] != "unknown":
        text += f" [diagnosis: {found['kind']}: {found.get('hint', '')}]"
    return text


def _board_link(url, sid):
    """Whether url is the TensorBoard link of job sid as conventions.tensorboard_link makes it (report.json is data)."""
    return (isinstance(url, str) and bool(_BOARD.match(url))
            and url == tensorboard_link(url.split("/?", 1)[0], sid))


def _record_link(sid):
    """A job's record relative to a report (<regression>/<run_id>/summary.md); None for anything but an id."""
    if not matches(ID_RULE, sid):
        return None
    return os.path.relpath(job_dir("/", sid), os.path.join(regression_dir("/"), "run")) + "/"


def _entries_by_name(report):
    """An earlier report's entries by name (report.json is data: anything but a mapping with a name is skipped)."""
    entries = report.get("entries") if isinstance(report, dict) else None
    return {e["name"]: e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)} \
        if isinstance(entries, list) else {}


def known_state(state):
    """A record's state as a report shows it: one of KNOWN_STATES, else INVALID_STATE."""
    return state if isinstance(state, str) and state in KNOWN_STATES else INVALID_STATE


def _number(value):
    """A number of a record or an earlier report as a float, or None; an integer past ±files.VALUE_MAX is ±infinity
    (float() of a 400-digit one raises OverflowError), which the report shows and compares as it does a float's."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if isinstance(value, int) and files.bounded_number(value) is None:
        return math.inf if value > 0 else -math.inf
    return float(value)


def _fmt(value):
    return "–" if value is None else str(value)


def _fmt_seconds(value):
    value = _number(value)
    return "–" if value is None else f"{value:.1f}"


def _fmt_loss(value):
    value = _number(value)
    return "–" if value is None else f"{value:.4g}"


def _duration(seconds):
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def iso_time(ms, zone=True):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + ("Z" if zone else "")


def md(text):
    """Job text as inert Markdown on one line: shown as written, never a link, image, HTML, heading or table cell
    of its own (see _MD_MARKUP)."""
    text = one_line(_CONTROLS.sub("", str("" if text is None else text)))
    text = _MD_MARKUP.sub(lambda m: "\\" + m.group(), text)
    return "".join(_HTML.get(c, c) for c in text)


def _code(text):
    """An id as inline code (`run-7`); anything that is not an id as md() text."""
    return f"`{text}`" if matches(ID_RULE, text) else md(text)


def _xml_text(text):
    """Text for junit.xml: ElementTree escapes & < > (and quotes in attributes); what XML 1.0 forbids even escaped
    (NUL, ESC, ...) is removed."""
    return _XML_INVALID.sub("", str(text))
