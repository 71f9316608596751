#!/usr/bin/env python3
"""Measure one admission decision of the queue (issue 41): over 10, 100, 1,000 and 10,000 queued jobs on a 16-worker
cluster's resources, each figure beside its floor measured in the same run: reading and checking those N entries
from JSON files in a temporary folder (files.read_json and model.entry_of, as the queue's reader will).

The cluster: 16 workers of 8 GPUs and 64 CPUs with the custom worker_node, most of it held by 24 running jobs of
three classes (some with max_run_s, some without), so entries wait, backfill, hit quotas and preempt. The entries:
20 submitters, the three classes, gangs of 1 to 4 nodes of 1 to 8 GPUs with a driver, max_run_s or none; fair share
from 500 finished and running records. Each figure is the median of --runs runs. The decision is timed twice: as
generated (placements of a few shapes, as a team's jobs are) and with every placement made distinct (its worst case:
no fit answer reused). The decision must grow no faster
than the queue and, at 1,000, be within 1.5x of its floor.

Needs no lab. Usage: .venv/bin/python lab/bench_queue.py [--runs 5] [--sizes 10,100,1000,10000] [--seed 41]
"""

import argparse
import dataclasses
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.base import files  # isort: skip
from ansible.module_utils.queue import admit, model, share  # isort: skip

NOW = 1_800_000_000
WORKERS = 16
SUBMITTERS = [f"user{n:02d}" for n in range(20)]


def cluster(rng):
    """(workers, running jobs): 24 running jobs placed on the 16 workers, what is left free per worker."""
    free = {f"10.0.0.{11 + n}": {"GPU": 8, "CPU": 64, "worker_node": 1} for n in range(WORKERS)}
    running = []
    for n in range(24):
        gpus, nodes = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2])
        able = [w for w, res in free.items() if res["GPU"] >= gpus and res["CPU"] >= 8 * gpus]
        if len(able) < nodes:
            continue
        holds = {}
        for w in rng.sample(able, nodes):
            holds[w] = {"GPU": gpus, "CPU": 8 * gpus}
            free[w] = {**free[w], "GPU": free[w]["GPU"] - gpus, "CPU": free[w]["CPU"] - 8 * gpus}
        running.append(model.running_of({
            "id": f"run-{n:03d}", "submitter": rng.choice(SUBMITTERS), "priority": rng.choice(model.CLASSES),
            "started_s": NOW - rng.randint(60, 86400), "holds": holds,
            "max_run_s": rng.choice([None, rng.randint(3600, 3 * 86400)])}))
    workers = [model.worker_of({"id": w, "free": res}) for w, res in free.items()]
    return workers, running


def entry_data(rng, n):
    gpus = rng.choice([1, 2, 4, 8])
    data = {"id": f"queued-{n:06d}", "submitter": rng.choice(SUBMITTERS), "priority": rng.choice(model.CLASSES),
            "enqueued_s": NOW - rng.randint(0, 86400),
            "placement": {"nodes": rng.choice([1, 1, 2, 4]), "per_node": {"GPU": gpus, "CPU": 8 * gpus},
                          "driver": {"worker_node": 1, "CPU": 1}}}
    if rng.random() < 0.7:
        data["max_run_s"] = rng.randint(600, 2 * 86400)
    return data


def usages(rng):
    out = []
    for _ in range(500):
        start = NOW - rng.randint(0, 14 * 86400)
        end = rng.choice([None, min(NOW, start + rng.randint(60, 86400))])
        out.append(model.usage_of({"submitter": rng.choice(SUBMITTERS), "ranks": rng.choice([1, 8, 16]),
                                   "start_s": start, "end_s": end}))
    return out


def distinct(entries):
    """The same entries, each placement's driver asking a slightly different CPU: no two alike, so the decision's
    per-shape cache never helps (its worst case)."""
    out = []
    for n, e in enumerate(entries):
        driver = {**e.placement.driver, "CPU": 1 + n / 1e6}
        out.append(dataclasses.replace(e, placement=dataclasses.replace(e.placement, driver=driver)))
    return out


def read_entries(folder):
    """The floor: every entry file read (bounded, no symlink followed) and checked."""
    return [model.entry_of(files.read_json(os.path.join(folder, name))) for name in sorted(os.listdir(folder))]


def median_s(runs, fn):
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--seed", type=int, default=41)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workers, running = cluster(rng)
    quotas = model.quotas_of({"default": {"jobs": 6, "gpus": 32}, "users": {"user00": {"jobs": 20, "gpus": 64}}})
    history = usages(rng)
    print(f"{WORKERS} workers, {len(running)} running jobs, {sum(w.free['GPU'] for w in workers)} GPUs free; "
          f"median of {args.runs} runs")
    print(f"{'queued':>8} {'decision':>11} {'floor (read)':>13} {'ratio':>6} {'per entry':>10} "
          f"{'all distinct':>13} {'ratio':>6}  verdicts")
    per_entry = {}
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-queue-") as folder:
            for n in range(size):
                files.write_json(os.path.join(folder, f"queued-{n:06d}.json"), entry_data(rng, n))
            floor, entries = median_s(args.runs, lambda folder=folder: read_entries(folder))

        def decision(entries=entries):
            return admit.decide(entries, running, workers, NOW, quotas, share.gpu_seconds(history, NOW))

        took, decided = median_s(args.runs, decision)
        unlike = distinct(entries)
        worst, _ = median_s(args.runs, lambda unlike=unlike: decision(unlike))
        counts = {}
        for d in decided:
            counts[d.reason] = counts.get(d.reason, 0) + 1
        per_entry[size] = took / size
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"{size:>8} {took * 1000:>9.2f}ms {floor * 1000:>11.2f}ms {took / floor:>6.2f} "
              f"{took / size * 1e6:>8.1f}us {worst * 1000:>11.2f}ms {worst / floor:>6.2f}  {shown}")
    sizes = sorted(per_entry)
    if len(sizes) > 1:
        growth = per_entry[sizes[-1]] / per_entry[sizes[0]]
        print(f"per-entry cost at {sizes[-1]} vs {sizes[0]}: {growth:.2f}x (linear: 1x or less)")


if __name__ == "__main__":
    main()
