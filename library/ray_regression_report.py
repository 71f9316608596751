#!/usr/bin/python
"""Ansible module: write a regression run's report from its jobs' records."""

DOCUMENTATION = r"""
---
module: ray_regression_report
short_description: Write report.json, junit.xml and summary.md of a regression run
description:
  - Reads each suite entry's job record (C(<shared_root>/jobs/<run_id>-<entry>/status.json) and its driver log),
    compares the run with the suite's earlier runs, and writes C(<shared_root>/regression/<run_id>/).
  - An entry that could not be submitted (a bad spec, say) is reported as failed with the error it got.
  - Each entry's per-step metrics come from its record's C(metrics.jsonl), which verl's own file logger wrote (every
    key it logged, exact values); an entry's C(gates) are checked against them, and a failed gate fails the entry.
    An entry with metrics links to its run in the cluster's TensorBoard when C(tensorboard_url) is given.
  - C(metrics.jsonl) is data of any length and shape. It is streamed, so the report's memory does not grow with it;
    the gates and values reduce every row, a sample of rows evenly spread is kept, and what was left out (lines that
    are no row, a number out of range such as NaN or a 400-digit integer, rows thinned) is the entry's C(metrics_note)
    in report.json and summary.md.
  - Besides report.json, junit.xml and summary.md, the run gets C(trend.svg), the suite's values across runs.
  - A job's text (its message, reason, diagnosis, a gate's metric) is data. summary.md escapes it for Markdown and
    HTML (never a link, an image, HTML or a heading), junit.xml for XML (characters XML 1.0 forbids removed); a state
    that is not one a record can have is shown as C(invalid).
options:
  run_id:
    description: The regression run's id.
    type: str
    required: true
  suite:
    description: The suite's name.
    type: str
    required: true
  started_at:
    description: When the run started (epoch milliseconds).
    type: int
    required: true
  shared_root:
    description: The shared root holding jobs/ and regression/.
    type: path
    required: true
  entries:
    description:
      - The suite's entries, each with C(name) and C(spec), and optional C(gates) (module_utils/regression/gates.py
        documents them).
    type: list
    elements: dict
    required: true
  tensorboard_url:
    description: Where the cluster's TensorBoard serves the shared root's runs (C(ray_config.tensorboard_url)).
    type: str
  errors:
    description: Entries that could not be submitted, name -> error message.
    type: dict
    default: {}
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: In check mode the report is built but not written.
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Regression | Write the report
  ray_regression_report:
    run_id: lab-20261122T023000Z
    suite: lab
    started_at: 1795323728000
    shared_root: /private
    entries:
      - {name: smoke, spec: smoke}
      - {name: grpo, spec: grpo, gates: [{metric: step, min: 2}, {metric: reward, at: last, min: 0.01}]}
"""

RETURN = r"""
ok:
  description: Every entry passed and nothing regressed.
  returned: always
  type: bool
summary:
  description: summary.md's text.
  returned: always
  type: str
report_dir:
  description: Where the report is.
  returned: always
  type: str
failed_entries:
  description: Names of the entries that did not succeed.
  returned: always
  type: list
  elements: str
regressed_entries:
  description: Names of the entries that regressed against the previous run.
  returned: always
  type: list
  elements: str
failed_gates:
  description: "The gates that failed, C(<entry>: <gate message>) each (the message names the metric and its value)."
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.base import conventions
from ansible.module_utils.base.files import RecordError, read_text
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record.status import StatusFile
from ansible.module_utils.regression import gates as rg
from ansible.module_utils.regression import report as rr
from ansible.module_utils.verl.metrics import read_metrics

# The report shows a log's last rr.LOG_TAIL_LINES lines: this many bytes hold them, however long the lines.
LOG_TAIL_BYTES = 256 * 1024


def main():
    module = AnsibleModule(
        argument_spec=dict(
            run_id=dict(type="str", required=True),
            suite=dict(type="str", required=True),
            started_at=dict(type="int", required=True),
            shared_root=dict(type="path", required=True),
            entries=dict(type="list", elements="dict", required=True),
            errors=dict(type="dict", default={}),
            tensorboard_url=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    results = []
    gates = {}
    for entry in p["entries"]:
        try:
            gates[entry["name"]] = rg.check_gates(entry.get("gates"), f"entry {entry['name']!r} gates")
        except rg.GateError as exc:
            module.fail_json(msg=str(exc))
    for entry in p["entries"]:
        sid = f"{p['run_id']}-{entry['name']}"
        record = conventions.job_dir(p["shared_root"], sid)
        files = jr.paths(record)
        # Through the record's model: an untrusted status.json reads as UNKNOWN, saying why (never a traceback).
        status = jr.status_of(p["shared_root"], sid)
        attempts = status.attempts if status is not None else []
        if attempts and conventions.matches(conventions.ID_RULE, attempts[-1]):
            # Retried: the entry's outcome, log and metrics are its last attempt's (the first one's stay linked).
            sid = attempts[-1]
            record = conventions.job_dir(p["shared_root"], sid)
            files = jr.paths(record)
            status = jr.status_of(p["shared_root"], sid)
            if status is not None:
                status.attempts = attempts
        if status is not None and not os.path.lexists(files["status"]):
            status = None  # a directory without status.json: the entry's job left no record of its own
        if status is not None and status.rebuilt and not status.message:
            status.message = status.rebuilt  # an untrusted record says why it is UNKNOWN
        if status is None and entry["name"] in p["errors"]:
            status = StatusFile(sid, state="FAILED", reason="NOT_SUBMITTED", message=str(p["errors"][entry["name"]]))
        try:
            # Only its last lines go in the report: its tail, never the whole of a multi-day run's log, never through
            # a link, never blocking on a FIFO (base/files.py's read_text).
            log = read_text(files["driver_log"], limit=LOG_TAIL_BYTES, tail=True, base=record) or ""
        except (OSError, RecordError):  # a link, a FIFO: the entry has no log to show
            log = ""
        metrics = read_metrics(files["metrics"])
        results.append(rr.entry_result(entry["name"], entry["spec"], sid, status.to_dict() if status else None, log,
                                       record, metrics=metrics, gates=gates[entry["name"]],
                                       tensorboard=conventions.tensorboard_link(p["tensorboard_url"], sid)))
    regression_root = conventions.regression_dir(p["shared_root"])
    previous = rr.load_previous(regression_root, p["suite"], p["run_id"])
    report = rr.build_report(p["run_id"], p["suite"], p["started_at"], jr.now_ms(), results, previous)
    run_dir = f"{regression_root}/{p['run_id']}"
    if not module.check_mode:
        rr.write_report(run_dir, report, previous)
    module.exit_json(
        changed=not module.check_mode, ok=report["ok"], summary=rr.summary_md(report, previous), report_dir=run_dir,
        failed_entries=[r["name"] for r in results if not r["passed"]],
        regressed_entries=sorted({r["entry"] for r in report["regressions"]}),
        failed_gates=[f"{r['name']}: {g['message']}" for r in results for g in r["gates"] if not g["ok"]])


if __name__ == "__main__":
    main()
