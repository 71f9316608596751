#!/usr/bin/env python3
"""Measure what history costs (issue 24): the playbooks that look at records, with an empty jobs/ and with
--records finished records on the lab's shared root.

Each figure is the median of --runs runs, printed beside its floor measured in the same run, the same command with
an empty jobs/ (up.yml's reconcile, status.yml, a watcher pass, job.yml -e do=status). The finished records are made
here as a submit leaves a finished job's (status.json final, config/job_spec.json), and one open record of a job
Ray knows (a smoke job submitted first) keeps every reader honest. The first reader after the records appear scans
them once to build the open index (reconcile.open_records): that one-time cost is printed too.

Needs the lab up with a cluster (make lab-up && ansible-playbook up.yml); the real jobs/ is moved aside for the run
and put back after. Usage: .venv/bin/python lab/bench_records.py [--records 50000] [--runs 3]
"""

import argparse
import json
import os
import shutil
import statistics
import time
import uuid

from bench_common import ROOT, playbook

JOBS = os.path.join(ROOT, ".lab", "private", "jobs")


def make_finished(count):
    """count finished records, as a finished job leaves them (what the readers could open)."""
    started = time.monotonic()
    for n in range(count):
        sid = f"bench-done-{n:06d}"
        config = os.path.join(JOBS, sid, "config")
        os.makedirs(config)
        with open(os.path.join(config, "job_spec.json"), "w", encoding="utf-8") as handle:
            json.dump({"submission_id": sid, "workload": "smoke"}, handle)
        status = {"submission_id": sid, "state": "SUCCEEDED", "final": True, "workload": "smoke",
                  "record": f"/private/jobs/{sid}", "attempts": [], "outages": [], "updated_at": 1}
        with open(os.path.join(JOBS, sid, "status.json"), "w", encoding="utf-8") as handle:
            json.dump(status, handle)
    return time.monotonic() - started


def measure(runs, open_id):
    """Median seconds of each reader, over runs."""
    readers = {"up.yml (reconcile)": ["up.yml"], "status.yml": ["status.yml"], "watch.yml (a pass)": ["watch.yml"],
               "job.yml -e do=status": ["job.yml", "-e", f"id={open_id}"]}
    return {name: statistics.median(playbook(*argv)[0] for _ in range(runs)) for name, argv in readers.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    aside = f"{JOBS}.bench-aside-{uuid.uuid4().hex[:6]}"
    os.rename(JOBS, aside)
    try:
        os.makedirs(JOBS)
        shutil.copymode(aside, JOBS)
        # One open record of a job Ray knows: a smoke job that runs for a while (never finished while measured).
        open_id = f"bench-open-{uuid.uuid4().hex[:6]}"
        playbook("submit.yml", "-e", "spec=smoke", "-e", "workload=command", "-e", f"submission_id={open_id}",
                 "-e", 'entrypoint="sleep 3600"')
        floor = measure(args.runs, open_id)
        made = make_finished(args.records)
        # As a shared root written before the open index existed: the first reader scans every record once.
        shutil.rmtree(os.path.join(JOBS, ".open"))
        first = playbook("watch.yml")[0]
        loaded = measure(args.runs, open_id)
        playbook("job.yml", "-e", f"id={open_id}", "-e", "do=stop")
    finally:
        for name in os.listdir(JOBS) if os.path.isdir(JOBS) else []:
            if name.startswith("bench-open-"):
                os.rename(os.path.join(JOBS, name), os.path.join(aside, name))
        shutil.rmtree(JOBS, ignore_errors=True)
        os.rename(aside, JOBS)
    print(f"\nReaders of the shared root with {args.records} finished records beside one open job (the lab, this "
          f"{os.cpu_count()}-core machine), medians of {args.runs}; floor: the same with an empty jobs/:\n")
    print("| reader | empty jobs/ (floor) | with the records | ratio |")
    print("|---|---|---|---|")
    for name, seconds in loaded.items():
        print(f"| {name} | {floor[name]:.1f} s | {seconds:.1f} s | {seconds / floor[name]:.2f}x |")
    print(f"\nMaking the records took {made:.0f} s; the first watcher pass after them (one scan, then the open index) "
          f"{first:.1f} s.")


if __name__ == "__main__":
    main()
