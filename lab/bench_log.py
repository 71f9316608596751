#!/usr/bin/env python3
"""Measure what following a job with a big driver log costs (issue 24): a command job prints --mb megabytes, then
waits; `job.yml -e do=status` takes the log whole once (streamed), then each poll reads only what the log gained,
and the poll that finalises the ended job takes seconds. Each figure is printed beside its floor measured in the same
run: the same poll of a job whose log is a few lines. The head's memory is sampled during each poll (the largest
resident size of a module process there).

Needs the lab up with a cluster (make lab-up && ansible-playbook up.yml).
Usage: .venv/bin/python lab/bench_log.py [--mb 200]
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

from bench_common import ROOT, playbook

import lab  # the lab's addresses and files

LINE = 200  # bytes a line of the big log


def head_module_rss_mb():
    """The largest resident size (MB), now, of a module on the head: Ansible's pipelining runs each one as a Python
    with no argument, reading the module from its stdin (Ray's own processes all have arguments)."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "lab", "lab.py"), "ssh", "lab-head", "--",
                           "ps -eo rss=,args= | awk 'NF == 2 && $2 ~ /python3?$/ {print $1}'"],
                          capture_output=True, text=True, check=False, timeout=30)
    sizes = [int(line) for line in proc.stdout.split() if line.isdigit()]
    return max(sizes, default=0) // 1024


def poll(sid):
    """job.yml -e do=status, with the head's ray_job memory sampled meanwhile: (seconds, peak MB)."""
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], head_module_rss_mb())

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(sample)
        try:
            seconds, _ = playbook("job.yml", "-e", f"id={sid}")
        finally:
            done.set()
    return seconds, peak[0]


def submit(sid, lines, wait_s):
    """A command job that prints `lines` lines of LINE bytes at once, then waits wait_s seconds."""
    code = (f"import sys, time; sys.stdout.writelines('line %09d %s\\n' % (i, 'x' * {LINE - 16}) "
            f"for i in range({lines})); sys.stdout.flush(); time.sleep({wait_s})")
    playbook("submit.yml", "-e", "spec=smoke", "-e", "workload=command", "-e", f"submission_id={sid}",
             "-e", json.dumps({"entrypoint": f"python3 -c {shlex.quote(code)}"}))


def ray_status(sid):
    """What Ray's job API says of the job (read here, so no poll of ours finalises it meanwhile)."""
    with open(lab.TOKEN_FILE, encoding="utf-8") as handle:
        token = handle.read().strip()
    request = urllib.request.Request(f"{lab.DASHBOARD_URL}/api/jobs/{sid}",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["status"]


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(2)


def record_size(sid):
    path = os.path.join(ROOT, ".lab", "private", "jobs", sid, "logs", "driver.log")
    return os.path.getsize(path) if os.path.exists(path) else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--wait-s", type=int, default=120, help="how long the big job waits after printing")
    args = parser.parse_args()
    small, big = f"bench-log-s-{uuid.uuid4().hex[:6]}", f"bench-log-b-{uuid.uuid4().hex[:6]}"
    lines = args.mb * (1 << 20) // LINE
    submit(small, 10, args.wait_s)
    submit(big, lines, args.wait_s)
    floor_first, _ = poll(small)  # the first look at a small log
    floor_poll, floor_mb = poll(small)  # a poll that finds nothing new
    # The big job has printed everything once Ray's copy is that long: the first look streams it whole.
    started = time.monotonic()
    first_s, first_mb = poll(big)
    while record_size(big) < lines * LINE:
        if time.monotonic() - started > args.wait_s:
            sys.exit("the big job did not print its log in time (raise --wait-s)")
        first_s, first_mb = poll(big)
    again_s, again_mb = poll(big)  # a poll of a 200 MB log that gained nothing
    wait_until(lambda: ray_status(small) == "SUCCEEDED", args.wait_s + 120, "the small job to end")
    final_floor, _ = poll(small)  # finalises the small job
    wait_until(lambda: ray_status(big) == "SUCCEEDED", args.wait_s + 120, "the big job to end")
    final_s, final_mb = poll(big)  # finalises the big job
    print(f"\nFollowing a job whose driver log is {args.mb} MB (the lab, this {os.cpu_count()}-core machine); "
          f"floor: the same poll of a job whose log is 10 lines:\n")
    print("| poll (job.yml -e do=status) | with the big log | floor (small log) | head's ray_job, peak |")
    print("|---|---|---|---|")
    print(f"| first look (the log streamed whole) | {first_s:.1f} s | {floor_first:.1f} s | {first_mb} MB |")
    print(f"| a poll that finds nothing new | {again_s:.1f} s | {floor_poll:.1f} s | {again_mb} MB "
          f"(floor {floor_mb} MB) |")
    print(f"| the poll that finalises the ended job | {final_s:.1f} s | {final_floor:.1f} s | {final_mb} MB |")
    print(f"\nThe record's driver.log: {record_size(big) / (1 << 20):.0f} MB.")


if __name__ == "__main__":
    main()
