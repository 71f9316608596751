#!/usr/bin/env python3
"""Measure up.yml on the lab against its floors, at several cluster sizes (issue: fast bring-up).

For each N (workers), builds the lab with N workers and prints, as medians of --runs runs:
  cold        up.yml after down.yml, beside its floor: the same `ray start` commands (read from the
              nodes' state files) over ssh, head first, then the workers in the same waves as up.yml's
              (ray_worker_start_wave of the lab's inventory: that many at once), until every worker is ALIVE;
  idempotent  up.yml on a healthy cluster (changed=0), beside its floor: a one-task playbook (ping)
              on every host.
At the first N it also times status.yml, and submit.yml without wait beside its floor: a one-task
playbook on the head that imports Ray's job SDK there.
Takes the lab down and up again: never run it beside other lab tests. Leaves a lab with 2 workers.
Usage: .venv/bin/python lab/bench_up.py [--workers 2 4 8] [--runs 3]
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from bench_common import BIN, ENV, playbook

import lab  # the lab's addresses and files

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT as ROOT

from ansible.module_utils.base import ray_cluster  # isort: skip
from ansible.module_utils.node.ray_node import REDIS_PASSWORD_ARG  # isort: skip

KEY = str(lab.ssh_key())
TOKEN = str(lab.TOKEN_FILE)
DASHBOARD = lab.DASHBOARD_URL
HEAD_IP = lab.HEAD_IP


def worker_ips(n):
    return [host.ip for host in lab.plan_hosts(n) if host.role == "worker"]


def ssh(ip, command):
    argv = ["ssh", "-i", KEY, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", f"root@{ip}", command]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"ssh {ip} {command[:80]!r} failed: {proc.stderr}{proc.stdout}")
    return proc.stdout


def store_password():
    with open(os.path.join(ROOT, "inventory", "lab", ".secrets", "ray_store_password"), encoding="utf-8") as handle:
        return handle.read().strip()


def start_commands(ips):
    """Each node's `ray start` command line as up.yml ran it (its state file), for the floor."""
    commands = {}
    for ip in ips:
        state = json.loads(ssh(ip, "cat /run/ray-verl/node.json"))
        # The state file shows the store's password as its digest: the floor's head needs the password itself.
        argv = [f"{REDIS_PASSWORD_ARG}{store_password()}" if a.startswith(REDIS_PASSWORD_ARG) else a
                for a in state["argv"]]
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(state["env"].items()))
        path = shlex.quote(os.path.dirname(argv[0]))
        commands[ip] = f"export {exports} PATH={path}:$PATH; {shlex.join(argv)} >/dev/null"
    return commands


def all_workers_alive(ips):
    try:
        alive, ambiguous = ray_cluster.one_alive_per_ip(ray_cluster.list_nodes(DASHBOARD))
    except Exception:  # noqa: BLE001 - the head is still starting
        return False
    return not ambiguous and all(ip in alive for ip in ips)


def start_wave():
    """How many workers up.yml starts at once on the lab (its inventory's ray_worker_start_wave)."""
    import yaml

    with open(os.path.join(ROOT, "inventory", "lab", "group_vars", "ray_cluster.yml"), encoding="utf-8") as handle:
        return int(yaml.safe_load(handle)["ray_worker_start_wave"])


def floor_cold(commands, workers):
    """Raw `ray start`: the head, then the workers in up.yml's waves, until every worker is ALIVE."""
    started = time.monotonic()
    ssh(HEAD_IP, commands[HEAD_IP])
    with concurrent.futures.ThreadPoolExecutor(min(start_wave(), len(workers))) as pool:
        list(pool.map(lambda ip: ssh(ip, commands[ip]), workers))
    while not all_workers_alive(workers):
        if time.monotonic() - started > 300:
            sys.exit("floor: workers did not join within 300 s")
        time.sleep(0.1)
    return time.monotonic() - started


def ping_playbook(hosts):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=ROOT, prefix=".bench-", delete=False) as handle:
        handle.write(f"- name: Floor\n  hosts: {hosts}\n  gather_facts: false\n  tasks:\n"
                     "    - name: Floor | Ping\n      ansible.builtin.ping:\n")
    return handle.name


def sdk_playbook():
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=ROOT, prefix=".bench-", delete=False) as handle:
        handle.write("- name: Floor\n  hosts: ray_head\n  gather_facts: false\n  tasks:\n"
                     "    - name: Floor | Import Ray's job SDK on the head\n"
                     "      ansible.builtin.command: >-\n"
                     "        {{ ray_python }} -c 'from ray.job_submission import JobSubmissionClient'\n"
                     "      changed_when: false\n")
    return handle.name


def median(values):
    return statistics.median(values) if values else float("nan")


def bench(n, runs, extras):
    print(f"\n== {n} workers: building the lab", flush=True)
    if os.path.exists(os.path.join(ROOT, "inventory", "lab", "hosts.yml")):
        playbook("down.yml")  # before hosts go away (see main)
    subprocess.run(["make", "-s", "lab-up", f"WORKERS={n}"], cwd=ROOT, env=ENV, check=True,
                   stdout=subprocess.DEVNULL)
    workers = worker_ips(n)
    playbook("up.yml")
    commands = start_commands([HEAD_IP, *workers])
    ray_cluster.prepare_client_env(TOKEN)
    rows = {"cold": ([], []), "idempotent": ([], [])}
    for run in range(runs):
        playbook("down.yml")
        rows["cold"][1].append(floor_cold(commands, workers))
        playbook("down.yml")
        seconds, out = playbook("up.yml")
        rows["cold"][0].append(seconds)
        print(f"  run {run + 1}: cold floor {rows['cold'][1][-1]:.1f} s, up.yml {seconds:.1f} s", flush=True)
    ping = ping_playbook("ray_cluster")
    try:
        for run in range(runs):
            seconds, out = playbook("up.yml")
            if any(f" changed={c}" in out for c in range(1, 100)):
                sys.exit(f"idempotent up.yml changed something:\n{out[-3000:]}")
            rows["idempotent"][0].append(seconds)
            rows["idempotent"][1].append(playbook(ping)[0])
            print(f"  run {run + 1}: idempotent up.yml {seconds:.1f} s, ping floor {rows['idempotent'][1][-1]:.1f} s",
                  flush=True)
        if extras:
            extras.update(bench_extras(runs))
    finally:
        os.unlink(ping)
    rss = ssh(workers[0], "ps -eo rss= | awk '{s+=$1} END {print s}'").strip()
    return {name: (median(up), median(floor)) for name, (up, floor) in rows.items()}, int(rss) // 1024


def bench_extras(runs):
    """status.yml, and submit.yml without wait beside a one-task playbook that imports the job SDK."""
    sdk = sdk_playbook()
    try:
        status = [playbook("status.yml")[0] for _ in range(runs)]
        floor = [playbook(sdk)[0] for _ in range(runs)]
        submit = [playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id=bench-{uuid.uuid4().hex[:8]}")[0]
                  for _ in range(runs)]
    finally:
        os.unlink(sdk)
    return {"status": median(status), "submit": median(submit), "submit_floor": median(floor)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results, extras = {}, {"wanted": True}
    try:
        for i, n in enumerate(args.workers):
            results[n] = bench(n, args.runs, extras if i == 0 else None)
    finally:
        # Stop Ray before removing hosts: a removed worker's node would stay ALIVE in the head's view until its
        # health checks fail, and a job could be placed on it meanwhile.
        subprocess.run([os.path.join(BIN, "ansible-playbook"), "down.yml"], cwd=ROOT, env=ENV, check=False,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["make", "-s", "lab-up", "WORKERS=2"], cwd=ROOT, env=ENV, check=False,
                       stdout=subprocess.DEVNULL)
    print(f"\nup.yml on the lab (1 head + N workers, this {os.cpu_count()}-core machine), medians of {args.runs}:\n")
    print("| workers | cold up.yml | cold floor (ray start) | ratio | idempotent up.yml | floor (ping) | ratio |"
          " memory per worker |")
    print("|---|---|---|---|---|---|---|---|")
    for n, (rows, rss_mb) in results.items():
        (cold, cold_floor), (idem, ping) = rows["cold"], rows["idempotent"]
        print(f"| {n} | {cold:.1f} s | {cold_floor:.1f} s | {cold / cold_floor:.2f}x | {idem:.1f} s | {ping:.1f} s |"
              f" {idem / ping:.2f}x | {rss_mb} MB |")
    sizes = sorted(results)
    if len(sizes) > 1:
        grow = results[sizes[-1]][0]["idempotent"][0] / results[sizes[0]][0]["idempotent"][0]
        print(f"\nidempotent up.yml grows {grow:.2f}x from {sizes[0]} to {sizes[-1]} workers")
    if "status" in extras:
        print(f"status.yml: {extras['status']:.1f} s; submit.yml (no wait): {extras['submit']:.1f} s beside its floor "
              f"{extras['submit_floor']:.1f} s (a one-task playbook importing Ray's job SDK on the head): "
              f"{extras['submit'] / extras['submit_floor']:.2f}x")


if __name__ == "__main__":
    main()
