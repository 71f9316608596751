#!/usr/bin/env python3
"""Run a regression suite from the control host: regression.yml through ansible-runner, under a lock.

  .venv/bin/python scripts/regression.py --suite lab                       # the lab's smoke + sft
  .venv/bin/python scripts/regression.py --suite gpu --inventory inventory/mysite \\
      --report-root /mnt/private/regression

It takes a lock so two runs never overlap (the second says who holds it and exits 75), runs the
suite, keeps ansible-runner's artifacts with the report when the report folder is reachable from
here (--report-root: the control host's view of <shared_root>/regression), and applies retention:
only the newest --keep finished runs keep their report, and the Ray job entries of older runs are
deleted from the cluster (their job records on the shared root stay until they are past retention
too). The cluster's job API and token file are the inventory's (ray_dashboard_url,
ray_auth_control_token_path), as regression.yml reports them to this runner; --dashboard-url and
--token-file override them. Exits with the playbook's status: non-zero when an entry failed or regressed.
"""

import argparse
import datetime
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT as ROOT
from plugin_utils import regression_run

from ansible.module_utils.base import ray_cluster  # isort: skip

LOCK_HELD_EXIT = 75  # EX_TEMPFAIL: try again later


def parse_args(argv=None):
    lab = os.path.join(ROOT, "inventory", "lab")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="lab", help="suites/<SUITE>.yaml (default: lab)")
    parser.add_argument("--inventory", default=lab, help="inventory to run against (default: the lab)")
    parser.add_argument("--keep", type=int, default=14, help="finished runs whose reports are kept (default: 14)")
    parser.add_argument("--state-dir", default=os.path.expanduser("~/.local/state/ray-verl"),
                        help="lock file and ansible-runner's working folder (default: ~/.local/state/ray-verl)")
    parser.add_argument("--report-root", default=os.path.join(ROOT, ".lab", "private", "regression"),
                        help="<shared_root>/regression as seen from here (default: the lab's)")
    parser.add_argument("--dashboard-url", help="for deleting old Ray job entries (default: the inventory's)")
    parser.add_argument("--token-file", help="the cluster token on this host (default: the inventory's)")
    parser.add_argument("--run-id", help="default: <suite>-<UTC time>")
    return parser.parse_args(argv)


def old_runs(report_root, keep):
    """Run ids past retention, from the reports under report_root."""
    runs = []
    for name in sorted(os.listdir(report_root)) if os.path.isdir(report_root) else []:
        path = os.path.join(report_root, name, "report.json")
        try:
            with open(path, encoding="utf-8") as handle:
                started = json.load(handle).get("started_at")
            runs.append((name, started, True))
        except (OSError, ValueError):
            runs.append((name, None, False))  # running, or crashed before its report: never deleted
    return regression_run.retention(runs, keep)


def run_cluster(events):
    """The cluster regression.yml ran against ({dashboard_url, token_file}, its set_stats); {} if it ended first."""
    for event in events:
        if event.get("event") == "playbook_on_stats":
            found = (event.get("event_data") or {}).get("artifact_data") or {}
            return found.get("regression_cluster") or {}
    return {}


def delete_ray_jobs(run_ids, dashboard_url, token_file):
    """Remove finished Ray job entries of old runs (their records on the shared root are separate)."""
    if not run_ids or not dashboard_url or not token_file or not os.path.exists(token_file):
        return 0
    ray_cluster.prepare_client_env(token_file)
    client = ray_cluster.job_client(dashboard_url, ray_cluster.read_token(token_file))
    deleted = 0
    for job in client.list_jobs():
        summary = ray_cluster.job_summary(job)
        sid = summary["submission_id"] or ""
        if summary["status"] in ray_cluster.TERMINAL_JOB_STATES and any(sid.startswith(r + "-") for r in run_ids):
            deleted += bool(client.delete_job(sid))
    return deleted


def main(argv=None):
    args = parse_args(argv)
    run_id = args.run_id or f"{args.suite}-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}"
    os.makedirs(args.state_dir, exist_ok=True)
    try:
        lock = regression_run.RunLock(os.path.join(args.state_dir, "regression.lock"), run_id).acquire()
    except regression_run.LockHeld as exc:
        print(f"regression {run_id} not started: {exc}", file=sys.stderr)
        return LOCK_HELD_EXIT
    try:
        import ansible_runner

        # cron and systemd start us with a bare PATH: ansible-playbook lives beside this Python.
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")

        private = os.path.join(args.state_dir, "runner")
        os.makedirs(private, exist_ok=True)
        result = ansible_runner.run(private_data_dir=private, project_dir=ROOT, playbook="regression.yml",
                                    inventory=os.path.abspath(args.inventory), ident=run_id,
                                    extravars={"suite": args.suite, "run_id": run_id},
                                    rotate_artifacts=max(args.keep, 1))
        artifacts = os.path.join(private, "artifacts", run_id)
        report_dir = os.path.join(args.report_root, run_id)
        if os.path.isdir(report_dir):
            shutil.copytree(artifacts, os.path.join(report_dir, "ansible-runner"), dirs_exist_ok=True)
            artifacts = os.path.join(report_dir, "ansible-runner")
        expired = old_runs(args.report_root, args.keep)
        cluster = run_cluster(result.events)
        deleted = delete_ray_jobs(expired, args.dashboard_url or cluster.get("dashboard_url"),
                                  args.token_file or cluster.get("token_file"))
        for old in expired:
            shutil.rmtree(os.path.join(args.report_root, old), ignore_errors=True)
        print(f"regression {run_id}: {result.status} (rc={result.rc}); report {report_dir}; "
              f"artifacts {artifacts}; retention removed {len(expired)} old report(s), {deleted} Ray job entr(ies)")
        return result.rc
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
