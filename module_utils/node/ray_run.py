"""library/ray_node.py's run: what one call does on its node, from its parameters to its result.

Check the Ray version and the token, build the `ray start` command and its fingerprint, compare it with what the
node records (ray_node_ctl.plan), refuse a restart that would end running jobs, then stop and start as planned,
starting a worker once more when Ray's fixed registration wait ran out. The steps themselves are in ray_node_ctl;
this file decides and reports (module.exit_json / fail_json, each failure one line).
"""

import importlib.metadata
import os
import sys
import time

from ansible.module_utils.daemons import redis_store
from ansible.module_utils.node import probe as node_probe
from ansible.module_utils.node import ray_ctl as ctl
from ansible.module_utils.node import shared_root_run

# How long a worker whose start timed out waits for the head's GCS to answer before it starts again.
RETRY_WAIT_S = 120

# The installed version from its metadata: importing Ray itself costs about a second.
VERSION_PROBE = "import importlib.metadata as m; print(m.version('ray'))"


def ray_version(module, python, wanted):
    if os.path.abspath(sys.executable) == os.path.abspath(python):
        # The module runs under that Python (the roles set it as the interpreter): no second one to start.
        try:
            version = importlib.metadata.version("ray")
        except importlib.metadata.PackageNotFoundError:
            module.fail_json(msg=f"{python} has no Ray: no package metadata for ray")
    else:
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


def check_store(module, where):
    """The GCS store's facts (redis_store.check), or the module fails in one line naming the store."""
    try:
        found = redis_store.check(where["host"], where["port"], module.params["redis_password"], where["namespace"])
    except redis_store.StoreError as exc:
        module.fail_json(msg=hide_password(module, str(exc)), store={"reachable": exc.answered})
    except ValueError as exc:  # a port or namespace out of range: nothing was sent
        module.fail_json(msg=f"store: {exc}")
    problem = redis_store.persistence_problem(where["host"], where["port"], found)
    if problem:
        module.fail_json(msg=problem, store=found)
    return found


def clear_store(module, failure, **result):
    """Delete the cluster's tables from the GCS store (ray_node_ctl.clear_store), or fail in one line saying so."""
    try:
        return ctl.clear_store(module.params["env"], module.params["redis_password"])
    except Exception as exc:  # noqa: BLE001 - any failure of Ray's cleanup is one line
        module.fail_json(msg=hide_password(module, f"{failure}: {exc}"), **result)


def run(module):
    """Do what the module's parameters ask on this node; ends the module (exit_json or fail_json)."""
    p = module.params
    python = p["python"]
    # Ray's part only looks in check mode and when asked to plan (the shared root below is settled either way).
    dry = module.check_mode or p["plan"]
    # The shared root first: Ray never starts on a node whose jobs would write to its local disk.
    if p["state"] == "stopped" and (p["shared_root"] or p["store"]):
        module.fail_json(msg="ray_node: shared_root and store are for state=started only")
    mount = shared_root_run.run(module, p["shared_root"]) if p["shared_root"] else None
    # The head's store before the head: whether it holds this cluster's tables decides what a start means.
    store = check_store(module, p["store"]) if p["store"] else None
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
        if not dry:
            killed = stop(module, ray_bin, env, remove_sessions=False)
            if os.path.exists(p["state_file"]):
                os.unlink(p["state_file"])
            cleared = clear_store(module, "Ray stopped, but its tables stay in the GCS store")
        module.exit_json(changed=True, action="stop",
                         reason=f"stopping {len(raylets)} raylet(s), {len(drivers)} driver(s)", changes=[],
                         ray_version="", killed_driver_pids=killed or drivers, store_cleared=cleared)

    try:
        p["num_gpus"] = node_probe.gpu_count(module.run_command, p["num_gpus"])
    except ValueError as exc:
        module.fail_json(msg=f"{p['node_ip']}: {exc}")
    version = ray_version(module, python, p["ray_version"])
    token_changed = bool(p["token"]) and ctl.keep_token(p["token"], p["token_path"], dry)
    try:
        argv = ctl.start_command(
            ray_bin, p["role"], p["node_ip"], p["gcs_port"], head_ip=p["head_ip"],
            dashboard_host=p["dashboard_host"], dashboard_port=p["dashboard_port"],
            client_server_port=p["client_server_port"], num_cpus=p["num_cpus"], num_gpus=p["num_gpus"],
            resources=p["resources"], extra_args=p["extra_args"], redis_password=p["redis_password"],
            carries_work=p["carries_work"])
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
              "token_changed": token_changed, "num_gpus": p["num_gpus"],
              "node_ip": p["node_ip"], "resources": p["resources"]}
    if mount is not None:
        result["shared_root"] = mount
    if store is not None:
        result["store"] = store
    if action == "none":
        module.exit_json(changed=token_changed or bool(mount and mount["changed"]), **result)
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
    if dry:
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
