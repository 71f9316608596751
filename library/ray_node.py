#!/usr/bin/python
"""Ansible module: keep this host's Ray node started with a given configuration, or stopped."""

DOCUMENTATION = r"""
---
module: ray_node
short_description: Start, heal or stop the Ray node on this host
description:
  - Starts Ray as a head or a worker with C(ray start), and records a fingerprint of the
    command, environment and Ray version under O(state_file).
  - A re-run on a healthy node changes nothing and does not import Ray (it is the common case, and
    fast). A node whose Ray died is started again (it rejoins the cluster). A node whose
    configuration drifted is restarted, but not while a job runs on it unless O(force); only then is
    the cluster asked, through O(dashboard_url), which jobs run (for the head, any job, since restarting
    it ends them all). When the cluster cannot be asked, the node is not restarted (fail closed).
  - Checks that O(python) has Ray O(ray_version), and keeps the cluster token at O(token_path).
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
    description:
      - GPUs a worker offers, a whole number, or V(auto) to count them with C(nvidia-smi) (0 where it is missing or
        fails).
    type: str
    default: "0"
  resources:
    description: "Custom resources, e.g. C({\"worker_node\": 1})."
    type: dict
    default: {}
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
  ray_version:
    description: The Ray version O(python) must have; the module fails naming both versions otherwise.
    type: str
  token:
    description: The cluster token, written to O(token_path) (mode 0600) when it differs; a new token restarts the node.
    type: str
  token_path:
    description: Where the node keeps the cluster token (Ray reads it through RAY_AUTH_TOKEN_PATH).
    type: path
  redis_password:
    description:
      - The GCS store's password (a head whose O(env) has RAY_REDIS_ADDRESS keeps its tables in that Redis).
      - Given to C(ray start --head) as C(--redis-password); the state file, the result and any error show its
        digest only, and a new password restarts the head. Ray passes it on to its GCS server's command line,
        so it is visible in the head's process list to root.
      - With the store in O(env), the cluster's tables are deleted from the store once the head's Ray has stopped
        (O(state=stopped), or a restart; Ray's own cleanup), since a head stopped on purpose ends its cluster.
        A head that died and is started again keeps them, and comes back to its cluster.
    type: str
  dashboard_url:
    description: The cluster's dashboard, asked which jobs run before a drifted node is restarted.
    type: str
  socket_ifname:
    description:
      - Sets NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in Ray's environment (so every job's workers on
        this node have them) unless O(env) sets them. C(auto) names the interface that reaches the head
        (on the head, the one holding O(node_ip)), an empty string sets nothing, anything else is the name.
    type: str
    default: ""
  force:
    description: Restart a drifted node even while a job runs on it, or when the cluster cannot tell.
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
    ray_version: "2.60.0"
    node_ip: 10.0.0.10
    dashboard_url: http://10.0.0.10:8265
    socket_ifname: auto
    token: "{{ lookup('ansible.builtin.file', 'inventory/site/.secrets/ray_token') }}"
    token_path: /etc/ray-verl/ray_token
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
  description: What was done (none, start, restart, stop; refuse_busy and refuse_legacy on failure).
  returned: always
  type: str
reason:
  description: Why.
  returned: always
  type: str
num_gpus:
  description: The GPUs the node offers (O(num_gpus), or what C(nvidia-smi) counted for V(auto)).
  returned: when O(state=started)
  type: int
token_changed:
  description: The node's copy of the cluster token was (or, in check mode, would be) rewritten.
  returned: when O(state=started)
  type: bool
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
busy_jobs:
  description: Submission ids of the jobs that keep a drifted node from restarting.
  returned: when a restart was refused
  type: list
  elements: str
store_cleared:
  description: The GCS store namespace whose tables were deleted (a head with a store, stopped or restarted).
  returned: when Ray was stopped or restarted
  type: str
killed_driver_pids:
  description: Orphaned job drivers ended (on stop, on restart, and on a start after Ray died here).
  returned: when Ray was stopped, started or restarted
  type: list
  elements: int
retried:
  description:
    - A worker's C(ray start) timed out (its raylet did not register within Ray's fixed 30 s); once the head's GCS
      answered, Ray was stopped here and started once more.
  returned: when a start was retried
  type: bool
stderr_tail:
  description: The last lines C(ray start) printed (the failure's one-line message names the cause).
  returned: when C(ray start) failed
  type: str
"""

import os
import time

from ansible.module_utils import ray_node_ctl as ctl
from ansible.module_utils.basic import AnsibleModule

# How long a worker whose start timed out waits for the head's GCS to answer before it starts again.
RETRY_WAIT_S = 120

# The installed version from its metadata: importing Ray itself costs about a second.
VERSION_PROBE = "import importlib.metadata as m; print(m.version('ray'))"


def ray_version(module, python, wanted):
    rc, out, err = module.run_command([python, "-c", VERSION_PROBE])
    if rc != 0:
        module.fail_json(msg=f"{python} has no Ray: {' '.join((err or out).strip().splitlines()[-1:])}")
    version = out.strip()
    if wanted and version != wanted:
        module.fail_json(msg=f"{python} has Ray {version}, this cluster wants {wanted}", ray_version=version)
    return version


def stop(module, ray_bin, env, remove_sessions):
    try:
        return ctl.stop(module.run_command, ray_bin, env, remove_sessions)
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))


def hide_password(module, text):
    """text with the GCS store's password replaced (Ray's own messages may quote the command line)."""
    password = module.params["redis_password"]
    return text.replace(password, "<redacted>") if password else text


def clear_store(module, failure, **result):
    """Delete the cluster's tables from the GCS store (ray_node_ctl.clear_store), or fail in one line saying so."""
    try:
        return ctl.clear_store(module.params["env"], module.params["redis_password"])
    except Exception as exc:  # noqa: BLE001 - any failure of Ray's cleanup is one line
        module.fail_json(msg=hide_password(module, f"{failure}: {exc}"), **result)


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
            "num_gpus": {"type": "str", "default": "0"},
            "resources": {"type": "dict", "default": {}},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "env": {"type": "dict", "default": {}},
            "state_file": {"type": "path", "default": "/run/ray-verl/node.json"},
            "ray_version": {"type": "str"},
            "token": {"type": "str", "no_log": True},
            "token_path": {"type": "path", "no_log": False},
            "redis_password": {"type": "str", "no_log": True},
            "dashboard_url": {"type": "str"},
            "socket_ifname": {"type": "str", "default": ""},
            "force": {"type": "bool", "default": False},
            "restart": {"type": "bool", "default": False},
            "cleanup_legacy": {"type": "bool", "default": False},
        },
        required_if=[("state", "started", ("role", "node_ip"))],
        required_together=[("token", "token_path")],
        supports_check_mode=True,
    )
    p = module.params
    python = p["python"]
    ray_bin = os.path.join(os.path.dirname(python), "ray")
    if p["state"] == "started" and p["socket_ifname"]:
        try:
            ifname = ctl.socket_interface(module.run_command, p["socket_ifname"], p["head_ip"] or p["node_ip"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        p["env"] = {**{var: ifname for var in ctl.SOCKET_VARS}, **p["env"]}
    env = ctl.run_env(python, p["env"])
    state = ctl.read_state(p["state_file"])
    raylets = ctl.find_raylets()

    if p["state"] == "stopped":
        drivers = ctl.find_job_drivers()
        if not (raylets or drivers or state):
            module.exit_json(changed=False, action="none", reason="Ray is not running", changes=[],
                             ray_version="", killed_driver_pids=[])
        killed, cleared = [], None
        if not module.check_mode:
            killed = stop(module, ray_bin, env, remove_sessions=False)
            if os.path.exists(p["state_file"]):
                os.unlink(p["state_file"])
            cleared = clear_store(module, "Ray stopped, but its tables stay in the GCS store")
        module.exit_json(changed=True, action="stop", reason=f"stopping {len(raylets)} raylet(s), {len(drivers)} driver(s)", changes=[], ray_version="",
                         killed_driver_pids=killed or drivers, store_cleared=cleared)

    try:
        p["num_gpus"] = ctl.gpu_count(module.run_command, p["num_gpus"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    version = ray_version(module, python, p["ray_version"])
    token_changed = bool(p["token"]) and ctl.keep_token(p["token"], p["token_path"], module.check_mode)
    try:
        argv = ctl.start_command(
            ray_bin, p["role"], p["node_ip"], p["gcs_port"], head_ip=p["head_ip"],
            dashboard_host=p["dashboard_host"], dashboard_port=p["dashboard_port"],
            client_server_port=p["client_server_port"], num_cpus=p["num_cpus"], num_gpus=p["num_gpus"],
            resources=p["resources"], extra_args=p["extra_args"], redis_password=p["redis_password"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    run_argv, argv = argv, ctl.shown_argv(argv)
    recorded_env = {k: str(v) for k, v in sorted(p["env"].items())}
    # The token's digest, not the token: a new token must restart the node, and the state file is no secret.
    token_digest = ctl.digest(p["token"]) if p["token"] else None
    want = {"argv": argv, "env": recorded_env, "ray_version": version, "token_digest": token_digest,
            "fingerprint": ctl.fingerprint(argv, recorded_env, version, token_digest)}
    gcs_alive = p["role"] != "head" or not raylets or bool(ctl.find_gcs_servers())
    action, reason = ctl.plan(bool(raylets), state, want["fingerprint"], p["cleanup_legacy"], p["restart"], gcs_alive)
    changes = ctl.diff_state(state, want)
    result = {"action": action, "reason": reason, "changes": changes, "ray_version": version, "argv": argv,
              "token_changed": token_changed, "num_gpus": p["num_gpus"]}
    if action == "none":
        module.exit_json(changed=token_changed, **result)
    if action == "restart" and not (p["restart"] or p["force"]):
        # Asked only now: a healthy node never pays for importing Ray and reading the cluster.
        try:
            token_path = p["token_path"] or p["env"].get("RAY_AUTH_TOKEN_PATH")
            busy = ctl.jobs_in_the_way(p["role"], p["node_ip"], p["dashboard_url"], token_path) \
                if p["dashboard_url"] else None
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot tell"
            busy = None
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
        else:
            why = "no dashboard_url to ask"
        if busy is None:
            module.fail_json(msg="Ray on this node must restart ({}: {}) but the cluster cannot tell whether jobs run "
                             "on it ({}); re-run with -e force=true to restart anyway".format(
                                 reason, ", ".join(changes), why), **dict(result, action="refuse_busy"))
        if busy:
            module.fail_json(msg="Ray on this node must restart ({}: {}) but jobs run on it ({}); "
                             "re-run with -e force=true to restart anyway".format(
                                 reason, ", ".join(changes), ", ".join(busy)),
                             busy_jobs=busy, **dict(result, action="refuse_busy"))
    if action == "refuse_legacy":
        module.fail_json(msg=f"{reason}; set ray_cleanup_legacy=true to stop it and start ours", **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)

    result["killed_driver_pids"] = []
    if action == "restart":
        result["killed_driver_pids"] = stop(module, ray_bin, env, remove_sessions=state is None)
        # A restarted head starts a new cluster: the old one's tables must not come back from the store.
        result["store_cleared"] = (clear_store(module, "the GCS store could not be cleared for the new head", **result)
                                   if p["role"] == "head" else None)
    elif action == "start" and raylets:  # what is left of a head whose GCS server died
        result["killed_driver_pids"] = stop(module, ray_bin, env, remove_sessions=False)
    elif action == "start":
        # Drivers left running when Ray died here belong to jobs the cluster has lost: end them before rejoining.
        result["killed_driver_pids"] = ctl.kill_pids(ctl.find_job_drivers())
    # The readiness gate accepts only a node the cluster saw start after this moment.
    result["started_at_ms"] = int(time.time() * 1000)
    rc, out, err = module.run_command(run_argv, environ_update=env)
    why, timed_out = ctl.start_failure(out + err) if rc != 0 else (None, False)
    if timed_out and p["role"] == "worker":
        # Ray waits a fixed 30 s for a new raylet to register: once the head answers, this node starts again, once.
        result["retried"] = True
        if ctl.wait_for_port(p["head_ip"], p["gcs_port"], RETRY_WAIT_S):
            stop(module, ray_bin, env, remove_sessions=False)
            rc, out, err = module.run_command(run_argv, environ_update=env)
            why, timed_out = ctl.start_failure(out + err) if rc != 0 else (None, False)
        else:
            why = f"{why}; the head's GCS {p['head_ip']}:{p['gcs_port']} did not answer for {RETRY_WAIT_S}s after it"
    if rc != 0:
        # One line naming the node and the cause; the output's tail is in the result (stderr_tail), not the message.
        result["stderr_tail"] = hide_password(module, "\n".join((out + err).strip().splitlines()[-15:]))
        module.fail_json(msg=hide_password(module, f"ray start failed on {p['node_ip']} (rc={rc}"
                                                   f"{', started twice' if result.get('retried') else ''}): {why}"),
                         **result)
    ctl.write_state(p["state_file"], want)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
