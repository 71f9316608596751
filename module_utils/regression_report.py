"""The report of one regression run: ${shared_root}/regression/<run_id>/.

A regression run submits a suite of JobSpecs one after another; each job leaves its own
record under ${shared_root}/jobs/<submission_id>/. This file turns those records into
report.json (read back by later runs to spot regressions), junit.xml (for CI) and
summary.md (for a person). The runner's lock and retention are the control host's
(plugin_utils/regression_run.py).

Times (started_at, ended_at) are epoch milliseconds, like the job records.
"""

import json
import math
import os
import re
import time
import xml.etree.ElementTree as ET

from ansible.module_utils import regression_gates, verl_metrics
from ansible.module_utils.conventions import job_dir, one_line, regression_dir
from ansible.module_utils.jobs.record import read_json, write_text

LOG_TAIL_LINES = 40
MESSAGE_WIDTH = 200
TREND_RUNS = 5
TREND_FILE = "trend.svg"
# Per-entry values kept in report.json for the trend plot: (label, metrics.jsonl name, reduction).
TREND_METRICS = (("last loss", "loss", "last"), ("last reward", "reward", "last"),
                 ("mean step s", "step_time_s", "mean"))
# Characters XML 1.0 forbids even escaped (ANSI colour codes in logs are the usual ones).
_XML_INVALID = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def entry_result(entry_name, spec, submission_id, status, log_tail, record_dir, metric_rows=None, gates=None):
    """One suite entry's result from its job's status.json (None if the job left none).

    metric_rows are the job's per-step metrics (verl_metrics rows); gates the entry's checked gates, evaluated
    against them: the entry passes when its job succeeded and every gate holds.
    """
    get = (status or {}).get
    phases = get("phases") or {}
    state = get("state") or "MISSING"
    rows = metric_rows or []
    gate_results = regression_gates.evaluate_all(gates, rows) if state == "SUCCEEDED" else []
    return {
        "name": entry_name,
        "spec": spec,
        "submission_id": submission_id,
        "state": state,
        "passed": state == "SUCCEEDED" and all(g["ok"] for g in gate_results),
        "gates": gate_results,
        # The record holds metrics.svg whenever the job printed metrics (the job follower or the report writes it).
        "metrics_plot": bool(rows),
        "metrics": {label: regression_gates.reduce_values([v for _, v in verl_metrics.series(rows, name)], at)
                    for label, name, at in TREND_METRICS},
        "durations": {key: phases.get(key) for key in ("pending_s", "running_s", "total_s")},
        "steps": get("steps"),
        "first_loss": get("first_loss"),
        "last_loss": get("last_loss"),
        "error_type": get("error_type"),
        "reason": get("reason"),
        "message": one_line(get("message"), MESSAGE_WIDTH),
        # Why a failed job failed (module_utils/diagnosis.py, written into its status.json).
        "diagnosis": get("diagnosis"),
        "log_tail": "\n".join((log_tail or "").splitlines()[-LOG_TAIL_LINES:]),
        "record": record_dir,
    }


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
    before = {e["name"]: e for e in baseline.get("entries", [])}
    found = []

    def add(entry, kind, old, new, text):
        found.append({"entry": entry["name"], "kind": kind, "previous": old, "current": new,
                      "message": f"{text} (vs run {baseline['run_id']})"})

    for entry in results:
        old = before.get(entry["name"])
        if old is None:  # a new entry has nothing to regress from
            continue
        if old.get("passed") and not entry["passed"]:
            add(entry, "state", old["state"], entry["state"], f"was {old['state']}, now {entry['state']}")
        # A failed job's loss and duration say nothing (it may have been killed at a deadline).
        if not (old.get("passed") and entry["passed"]):
            continue
        was, now = _number(old.get("last_loss")), _number(entry["last_loss"])
        if (was is not None and math.isfinite(was) and now is not None
                and (not math.isfinite(now) or now > was + loss_rise * abs(was))):
            add(entry, "loss", was, now, f"last_loss rose {_fmt_loss(was)} → {_fmt_loss(now)}")
        was = _number((old.get("durations") or {}).get("total_s"))
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
    suites = ET.Element("testsuites", name=f"regression {report['suite']}")
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
        failure = ET.SubElement(case, "failure", message=_xml_text(message), type=kind)
        failure.text = _xml_text(f"record: {entry['record']}\n\n{entry['log_tail']}")
    for element in (suites, suite):
        element.set("tests", str(len(report["entries"])))
        element.set("failures", str(failures))
    suites.set("time", f"{report['wall_s']:.3f}")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def summary_md(report, previous):
    """summary.md: the verdict, a table of entries, and how this run compares with earlier ones."""
    counts = report["counts"]
    verdict = "PASS" if report["ok"] else "FAIL"
    headline = f"{counts['passed']}/{counts['total']} passed"
    if counts["failed"]:
        headline += f", {counts['failed']} failed"
    if counts["regressed"]:
        headline += f", {counts['regressed']} regressed"
    regressed = {r["entry"] for r in report["regressions"]}
    lines = [
        f"# {verdict}: {report['suite']}, {headline}",
        "",
        f"Run `{report['run_id']}`, started {iso_time(report['started_at'])}, wall time {_duration(report['wall_s'])}.",
        "",
        "| entry | state | steps | loss first → last | last reward | gates | total s | record | plot |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in report["entries"]:
        state = e["state"] + (" (regressed)" if e["name"] in regressed else "")
        if e["state"] == "SUCCEEDED" and not e["passed"]:
            state += " (gate failed)"
        loss = f"{_fmt_loss(e['first_loss'])} → {_fmt_loss(e['last_loss'])}"
        gates = e.get("gates") or []
        gate_cell = f"{sum(g['ok'] for g in gates)}/{len(gates)}" if gates else "–"
        reward = _fmt_loss((e.get("metrics") or {}).get("last reward"))
        cells = [_md(c) for c in (e["name"], state, _fmt(e["steps"]), loss, reward, gate_cell,
                                  _fmt_seconds(e["durations"].get("total_s")))]
        link = _record_link(e["submission_id"]) if e["submission_id"] else None
        cells.append(f"[{_md(e['submission_id'])}]({link})" if link else "–")
        cells.append(f"[metrics]({link}{verl_metrics.PLOT_FILE})" if link and e.get("metrics_plot") else "–")
        lines.append("| " + " | ".join(cells) + " |")
    gate_lines = [f"- {'✓' if g['ok'] else '✗'} **{_md(e['name'])}** {_md(g['message'])}"
                  for e in report["entries"] for g in e.get("gates") or []]
    if gate_lines:
        lines += ["", "## Gates", ""] + gate_lines
    failed = [e for e in report["entries"] if not e["passed"]]
    if failed:
        lines += ["", "## Failures", ""]
        lines += [f"- **{e['name']}**: {_md(_failure_text(e))}" for e in failed]
    lines += ["", f"Trend across runs: [{TREND_FILE}]({TREND_FILE})", "", "## Compared with previous runs", ""]
    if not previous:
        lines.append("No earlier run of this suite.")
        return "\n".join(lines) + "\n"
    lines.append(f"Baseline: run `{previous[0]['run_id']}` ({iso_time(previous[0]['started_at'])}).")
    lines += ["", "Regressions:"] + ([f"- **{r['entry']}**: {r['message']}" for r in report["regressions"]]
                                     or ["- none"])
    before = {e["name"]: e for e in previous[0].get("entries", [])}
    changes = [f"- {e['name']}: new entry ({e['state']})" if e["name"] not in before
               else f"- {e['name']}: {before[e['name']]['state']} → {e['state']}"
               for e in report["entries"]
               if before.get(e["name"], {}).get("state") != e["state"]]
    lines += ["", "State changes:"] + (changes or ["- none"])
    lines += ["", f"Trends (oldest → this run, up to {TREND_RUNS} earlier runs):"]
    lines += _trends(report["entries"], previous[:TREND_RUNS][::-1]) or ["- no earlier values"]
    return "\n".join(lines) + "\n"


def _trends(entries, older):
    """`- smoke total_s: 6.1, 5.9, 6.4 → 6.0` per entry and metric that has earlier values."""
    metrics = (("total_s", lambda e: (e.get("durations") or {}).get("total_s"), _fmt_seconds),
               ("last_loss", lambda e: e.get("last_loss"), _fmt_loss))
    out = []
    for entry in entries:
        past = [next((e for e in run.get("entries", []) if e["name"] == entry["name"]), None) for run in older]
        for label, value, fmt in metrics:
            values = [value(e) if e else None for e in past]
            if any(v is not None for v in values):
                out.append(f"- {entry['name']} {label}: {', '.join(fmt(v) for v in values)} → {fmt(value(entry))}")
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
    return verl_metrics.svg_charts(title, charts, x_label="run")


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
                and isinstance(report.get("started_at"), (int, float))
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
    found = entry.get("diagnosis") or {}
    if found.get("kind") and found["kind"] != "unknown":
        text += f" [diagnosis: {found['kind']}: {found.get('hint', '')}]"
    return text


def _record_link(sid):
    """A job's record relative to a report (<regression>/<run_id>/summary.md)."""
    return os.path.relpath(job_dir("/", sid), os.path.join(regression_dir("/"), "run")) + "/"


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt(value):
    return "–" if value is None else str(value)


def _fmt_seconds(value):
    return "–" if _number(value) is None else f"{value:.1f}"


def _fmt_loss(value):
    return "–" if _number(value) is None else f"{value:.4g}"


def _duration(seconds):
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def iso_time(ms, zone=True):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + ("Z" if zone else "")


def _md(text):
    """Free text in Markdown: a `|` would split a table cell, a `<` could start hidden HTML."""
    return str(text).replace("|", "\\|").replace("<", "&lt;")


def _xml_text(text):
    return _XML_INVALID.sub("\ufffd", str(text))
