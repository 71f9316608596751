"""The smoke job: proves a job runs on a worker, imports code from its code path and writes its record.

Run by Ray as `python -m smoke_probe --checkpoint-dir DIR --submission-id ID`, with this file's
directory on PYTHONPATH (the job's code_path).
"""

import argparse
import json
import os
import socket
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--submission-id", required=True)
    args = parser.parse_args()

    import ray

    ray.init()  # the job's cluster (RAY_ADDRESS is set by the job supervisor)
    node_id = ray.get_runtime_context().get_node_id()
    head = [n for n in ray.nodes() if n["NodeID"] == node_id and n["Resources"].get("worker_node") is None]
    report = {
        "submission_id": args.submission_id,
        "hostname": socket.gethostname(),
        "node_id": node_id,
        "on_worker": not head,
        "module_file": os.path.abspath(__file__),
        "python": sys.executable,
        "ray_version": ray.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = os.path.join(args.checkpoint_dir, "smoke.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
    print("smoke_probe:", json.dumps(report, sort_keys=True))
    print("smoke_probe: wrote", path)
    return 0 if report["on_worker"] else 1


if __name__ == "__main__":
    sys.exit(main())
