#!/usr/bin/python
"""Ansible module: judge a site acceptance run from its jobs' records and write its report (acceptance.yml)."""

DOCUMENTATION = r"""
---
module: ray_acceptance
short_description: Judge a site acceptance run and write result.json, table.txt and junit.xml
description:
  - Reads the measuring job's result (C(checkpoints/acceptance/acceptance.json) in its record, written by
    C(acceptance_probe) on a worker; at most 4 MiB, never through a symlink, read as data and checked field by field,
    every number finite and bounded) and the status of the measuring and SFT jobs' records, and judges every node
    against the others (module_utils/acceptance/judgement.py; docs/acceptance.md); a node under O(threshold) of a
    median fails, named.
  - Writes C(<shared_root>/acceptance/<run_id>/) with C(result.json) (the verdict and the raw measurement),
    C(table.txt) (the per-node table) and C(junit.xml) (one testcase per check), and returns the table.
options:
  run_id:
    description: The acceptance run's id (the id rule); its report's folder name.
    type: str
    required: true
  shared_root:
    description: The shared root holding jobs/ and acceptance/.
    type: path
    required: true
  workers:
    description:
      - The inventory's workers, each C({host, ip}), so nodes are named as the inventory names them.
      - A measured node at another address is refused (a failing check names it) and left out of the judgement.
    type: list
    elements: dict
    required: true
  measure_id:
    description: The measuring job's submission id.
    type: str
    required: true
  sft_id:
    description: The SFT job's submission id; omitted when it was not run.
    type: str
  errors:
    description: Jobs that failed before they had a record, C(measure) or C(sft) -> the error.
    type: dict
    default: {}
  threshold:
    description: A node under this fraction of a median (TFLOP/s, link bandwidth) fails.
    type: float
    default: 0.5
  require_gpus:
    description:
      - Fail a node whose torch sees other than its Ray GPUs even when torch is a CPU build (by default that is
        checked only where torch has CUDA, so the lab's declared GPUs and CPU torch pass).
    type: bool
    default: false
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: In check mode the verdict is made but nothing is written.
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Acceptance | Judge the run and write its report
  ray_acceptance:
    run_id: acceptance-20270101T000000Z
    shared_root: /private
    workers: [{host: lab-worker1, ip: 198.18.0.11}, {host: lab-worker2, ip: 198.18.0.12}]
    measure_id: acceptance-20270101T000000Z-measure
    sft_id: acceptance-20270101T000000Z-sft
"""

RETURN = r"""
ok:
  description: Whether every check passed.
  returned: always
  type: bool
failures:
  description: One line per failed check, naming the node, pair or job.
  returned: always
  type: list
  elements: str
table:
  description: The per-node table and its summary lines, as table.txt holds them.
  returned: always
  type: list
  elements: str
slowest:
  description: The slowest node by matrix product (C(tflops)) and by link (C(link)), each [host, value].
  returned: always
  type: dict
common_node:
  description: The node in every slow pair, or null.
  returned: always
  type: str
report_dir:
  description: Where the report is (or, in check mode, would be).
  returned: always
  type: str
"""

import os

from ansible.module_utils.acceptance import judgement, report
from ansible.module_utils.base import conventions, files
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.jobs.record import record as jr

RESULT_CAP = 4 << 20


def read_result(shared_root, measure_id, worker_ips):
    """(the parsed result or None, why there is none). Read as every job file is (files.read_small: at most RESULT_CAP
    bytes, no symlink followed from the record down, regular files only; files.loads_bounded), and only the inventory's
    workers (worker_ips) kept."""
    path = judgement.result_path(shared_root, measure_id)
    try:
        raw = files.read_small(path, RESULT_CAP, base=conventions.job_dir(shared_root, measure_id))
        if raw is None:
            return None, "it left no result"
        return judgement.parse_result(files.loads_bounded(raw.decode("utf-8")), worker_ips), None
    except judgement.AcceptanceError as exc:
        return None, f"its result is malformed: {exc}"
    except (OSError, ValueError, RecursionError) as exc:  # RecordError, UnsafeFile and JSON errors are ValueErrors
        return None, f"its result cannot be read: {conventions.one_line(exc, 300)}"


def job_of(shared_root, sid, error):
    """{submission_id, state, error} from the job's record (or the error it failed with before it had one)."""
    if sid is None:
        return None
    status = jr.status_of(shared_root, sid)
    if status is None:
        return {"submission_id": sid, "state": "NOT_SUBMITTED" if error else None, "error": error}
    why = None if status.state == "SUCCEEDED" else error or status.message
    return {"submission_id": sid, "state": status.state, "error": why, "record": status.record}


def report_dir(shared_root, run_id, create):
    """<shared_root>/acceptance/<run_id>, made (0755) when create; the acceptance folder is never a symlink."""
    top = conventions.acceptance_dir(shared_root)
    run_dir = os.path.join(top, run_id)
    if not create:
        return run_dir
    for path, what in ((top, "the acceptance reports' folder"), (run_dir, "the run's report folder")):
        files.make_folder(path, what)
    return run_dir


def main():
    module = AnsibleModule(
        argument_spec={
            "run_id": {"type": "str", "required": True},
            "shared_root": {"type": "path", "required": True},
            "workers": {"type": "list", "elements": "dict", "required": True},
            "measure_id": {"type": "str", "required": True},
            "sft_id": {"type": "str"},
            "errors": {"type": "dict", "default": {}},
            "threshold": {"type": "float", "default": judgement.THRESHOLD},
            "require_gpus": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        for field in ("run_id", "measure_id", "sft_id"):
            if p[field] is not None:
                conventions.check_id(field, p[field])
        if not 0 < p["threshold"] < 1:
            raise ValueError("threshold: must be a fraction between 0 and 1")
        workers = [{"host": conventions.one_line(w.get("host"), 128), "ip": conventions.one_line(w.get("ip"), 64)}
                   for w in p["workers"]]
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    errors = {k: conventions.one_line(v, 300) for k, v in p["errors"].items()}
    result, why = read_result(p["shared_root"], p["measure_id"], [w["ip"] for w in workers])
    measure = job_of(p["shared_root"], p["measure_id"], errors.get("measure"))
    if why:  # no usable result fails the measuring check (judge), with the job's own error first when it has one
        measure["error"] = measure["error"] or why
    sft = job_of(p["shared_root"], p["sft_id"], errors.get("sft"))
    verdict = judgement.judge(result, workers, measure, sft, p["threshold"], p["require_gpus"])
    lines = report.table(verdict)
    try:
        run_dir = report_dir(p["shared_root"], p["run_id"], create=not module.check_mode)
        if not module.check_mode:
            base = p["shared_root"]
            jobs = {"measure": measure, "sft": sft}
            files.write_json(os.path.join(run_dir, "result.json"),
                             report.record(verdict, p["run_id"], result, jobs), base=base)
            files.write_atomic(os.path.join(run_dir, "table.txt"), ("\n".join(lines) + "\n").encode("utf-8"), base=base)
            files.write_atomic(os.path.join(run_dir, "junit.xml"),
                               report.junit(verdict, p["run_id"]).encode("utf-8"), base=base)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"acceptance report {p['run_id']}: {conventions.one_line(exc, 300)}", table=lines)
    module.exit_json(changed=not module.check_mode, ok=verdict["ok"], failures=verdict["failures"], table=lines,
                     slowest=verdict["slowest"], common_node=verdict["common_node"], report_dir=run_dir)


if __name__ == "__main__":
    main()
