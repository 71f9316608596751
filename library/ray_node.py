#!/usr/bin/python
"""Ansible module: keep this host's Ray node started with a given configuration, or stopped."""

DOCUMENTATION = r"""
---
module: ray_node
short_description: Start, heal or stop the Ray node on this host
description:
  - Starts Ray as a head or a worker with C(ray start), and records a fingerprint of the
    command, environment and Ray version under O(state_file).
  - A re-run on a healthy node changes nothing. A node whose Ray died is started again
    (it rejoins the cluster). A node whose configuration drifted is restarted, but not while
    O(busy) unless O(force).
  - With O(state=stopped) stops Ray and also ends job drivers that Ray left orphaned.
options:
  state:
    description: Whether Ray should run on this host.
    type: str
    choices: [started, stopped]
    default: started
  role:
    description: Head or worker.
    type: str
    choices: [head, worker]
  python:
    description: Python interpreter that has Ray installed; its C(ray) script is used.
    type: path
    required: true
  node_ip:
    description: Address this node announces to the cluster.
    type: str
  head_ip:
    description: Address of the head (workers only).
    type: str
  gcs_port:
    description: GCS port of the head.
    type: int
    default: 6379
  dashboard_host:
    description: Address the head's dashboard binds to; defaults to O(node_ip).
    type: str
  dashboard_port:
    description: Dashboard port of the head.
    type: int
    default: 8265
  client_server_port:
    description: Ray client server port of the head (must be outside the worker port range).
    type: int
    default: 10001
  num_cpus:
    description: CPUs a worker offers; Ray detects them when unset.
    type: int
  num_gpus:
    description: GPUs a worker offers.
    type: int
    default: 0
  resources:
    description: Custom resources, e.g. C({"worker_node": 1}).
    type: dict
    default: {}
  temp_dir:
    description: Ray's temporary directory on this node.
    type: path
  extra_args:
    description: More C(ray start) arguments.
    type: list
    elements: str
    default: []
  env:
    description: Environment for C(ray start) (e.g. RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH).
    type: dict
    default: {}
  state_file:
    description: Where the node records how it was started.
    type: path
    default: /run/ray-verl/node.json
  busy:
    description: A job runs on this node; a drifted node is then not restarted unless O(force).
    type: bool
    default: false
  force:
    description: Restart a drifted node even while a job runs on it.
    type: bool
    default: false
  restart:
    description: Restart even when the configuration is unchanged (e.g. the head was restarted).
    type: bool
    default: false
  cleanup_legacy:
    description: Replace a Ray this project did not start (and remove its session directories).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Ray | Start the head
  ray_node:
    role: head
    python: /opt/ray/bin/python
    node_ip: 10.0.0.10
    env:
      RAY_AUTH_MODE: token
      RAY_AUTH_TOKEN_PATH: /etc/ray-verl/token

- name: Ray | Stop Ray and orphaned drivers
  ray_node:
    state: stopped
    python: /opt/ray/bin/python
"""

RETURN = r"""
action:
  description: What was done (none, start, restart, stop).
  returned: always
  type: str
reason:
  description: Why.
  returned: always
  type: str
changes:
  description: What differs from the recorded configuration.
  returned: always
  type: list
  elements: str
ray_version:
  description: Ray version of O(python).
  returned: always
  type: str
started_at_ms:
  description: When C(ray start) began (epoch ms, this host's clock); the new node's start time is later.
  returned: when Ray was started or restarted
  type: int
killed_driver_pids:
  description: Orphaned job drivers ended on stop.
  returned: when state=stopped
  type: list
  elements: int
"""

import glob
import os
import shutil
import time

from ansible.module_utils import ray_node_ctl as ctl
from ansible.module_utils.basic import AnsibleModule


def ray_version(module, python):
    rc, out, err = module.run_command([python, "-c", "import ray; print(ray.__version__)"])
    if rc != 0:
        module.fail_json(msg=f"{python} cannot import ray: {(err or out).strip().splitlines()[-1:]}")
    return out.strip()


def run_env(python, env):
    # Jobs inherit the node's PATH: the Ray venv must come first or entrypoints run
    # `python` from the system and fail with "No module named 'ray'".
    merged = dict(os.environ)
    merged.update({k: str(v) for k, v in env.items()})
    merged["PATH"] = os.path.dirname(python) + os.pathsep + merged.get("PATH", "/usr/bin:/bin")
    return merged


# SIGTERM lets the raylet tell the head it leaves, so the cluster lists it DEAD at once
# (after a SIGKILL it stays ALIVE until its health checks fail); SIGKILL after this grace.
STOP_GRACE_S = 10


def stop(module, ray_bin, env, temp_dir, remove_sessions):
    rc, out, err = module.run_command([ray_bin, "stop", f"--grace-period={STOP_GRACE_S}"], environ_update=env)
    if rc != 0:
        module.fail_json(msg=f"ray stop failed: {(err or out).strip()}")
    for _ in range(50):
        if not ctl.find_raylets():
            break
        time.sleep(0.2)
    killed = ctl.kill_pids(ctl.find_job_drivers())
    if remove_sessions:
        for path in glob.glob(os.path.join(temp_dir or "/tmp/ray", "session_*")):
            if os.path.islink(path):
                os.unlink(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
    return killed


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
            "role": {"type": "str", "choices": ["head", "worker"]},
            "python": {"type": "path", "required": True},
            "node_ip": {"type": "str"},
            "head_ip": {"type": "str"},
            "gcs_port": {"type": "int", "default": 6379},
            "dashboard_host": {"type": "str"},
            "dashboard_port": {"type": "int", "default": 8265},
            "client_server_port": {"type": "int", "default": 10001},
            "num_cpus": {"type": "int"},
            "num_gpus": {"type": "int", "default": 0},
            "resources": {"type": "dict", "default": {}},
            "temp_dir": {"type": "path"},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "env": {"type": "dict", "default": {}},
            "state_file": {"type": "path", "default": "/run/ray-verl/node.json"},
            "busy": {"type": "bool", "default": False},
            "force": {"type": "bool", "default": False},
            "restart": {"type": "bool", "default": False},
            "cleanup_legacy": {"type": "bool", "default": False},
        },
        required_if=[("state", "started", ("role", "node_ip"))],
        supports_check_mode=True,
    )
    p = module.params
    python = p["python"]
    ray_bin = os.path.join(os.path.dirname(python), "ray")
    env = run_env(python, p["env"])
    state = ctl.read_state(p["state_file"])
    raylets = ctl.find_raylets()

    if p["state"] == "stopped":
        drivers = ctl.find_job_drivers()
        if not (raylets or drivers or state):
            module.exit_json(changed=False, action="none", reason="Ray is not running", changes=[],
                             ray_version="", killed_driver_pids=[])
        killed = []
        if not module.check_mode:
            killed = stop(module, ray_bin, env, p["temp_dir"], remove_sessions=False)
            if os.path.exists(p["state_file"]):
                os.unlink(p["state_file"])
        module.exit_json(changed=True, action="stop", reason=f"stopping {len(raylets)} raylet(s), {len(drivers)} driver(s)", changes=[], ray_version="",
                         killed_driver_pids=killed or drivers)

    version = ray_version(module, python)
    try:
        argv = ctl.start_command(
            ray_bin, p["role"], p["node_ip"], p["gcs_port"], head_ip=p["head_ip"],
            dashboard_host=p["dashboard_host"], dashboard_port=p["dashboard_port"],
            client_server_port=p["client_server_port"], num_cpus=p["num_cpus"], num_gpus=p["num_gpus"],
            resources=p["resources"], temp_dir=p["temp_dir"], extra_args=p["extra_args"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    recorded_env = {k: str(v) for k, v in sorted(p["env"].items())}
    want = {"argv": argv, "env": recorded_env, "ray_version": version,
            "fingerprint": ctl.fingerprint(argv, recorded_env, version)}
    action, reason = ctl.plan(bool(raylets), state, want["fingerprint"], p["busy"], p["force"],
                              p["cleanup_legacy"], p["restart"])
    changes = ctl.diff_state(state, want)
    result = {"action": action, "reason": reason, "changes": changes, "ray_version": version, "argv": argv}
    if action == "none":
        module.exit_json(changed=False, **result)
    if action == "refuse_busy":
        module.fail_json(msg="Ray on this node must restart ({}: {}) but a job runs on it; "
                         "re-run with -e force=true to restart anyway".format(reason, ", ".join(changes)), **result)
    if action == "refuse_legacy":
        module.fail_json(msg=f"{reason}; set ray_cleanup_legacy=true to stop it and start ours", **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)

    if action == "restart":
        stop(module, ray_bin, env, p["temp_dir"], remove_sessions=state is None)
    # The readiness gate accepts only a node the cluster saw start after this moment.
    result["started_at_ms"] = int(time.time() * 1000)
    rc, out, err = module.run_command(argv, environ_update=env)
    if rc != 0:
        tail = "\n".join((out + err).strip().splitlines()[-15:])
        module.fail_json(msg=f"ray start failed (rc={rc}): {tail}", **result)
    ctl.write_state(p["state_file"], want)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
