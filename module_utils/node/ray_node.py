"""Start, inspect and stop the Ray processes of one node (the host we run on): the work of library/ray_node.py,
which keeps its documentation, its argument spec and main().

The steps (the first half of this file): the node records what it was started with (a fingerprint of the command,
environment and Ray version) so a re-run can tell "healthy, leave it" from "drifted, restart it" without asking Ray.
Commands run through a `run_command(argv, environ_update=None) -> (rc, out, err)` given by the caller
(AnsibleModule.run_command).

The run (the second half): what one call does on its node, from its parameters to its result. Check the Ray version
and the token, build the `ray start` command and its fingerprint, compare it with what the node records (plan),
refuse a restart that would end running jobs, then stop and start as planned, starting a worker once more when
Ray's fixed registration wait ran out. The run decides and reports (module.exit_json / fail_json, each failure one
line).
"""

import glob
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import sys
import time

# Only the files helpers: the record's module would bring the whole job model into every node check.
from ansible.module_utils.base import files
from ansible.module_utils.daemons import redis_store
from ansible.module_utils.node import probe as node_probe
from ansible.module_utils.node import shared_root

# A Ray job's driver carries this variable; the job supervisor sets it.
DRIVER_ENV_MARKER = b"RAY_JOB_CONFIG_JSON_ENV_VAR="


def start_command(ray_bin, role, node_ip, gcs_port, head_ip=None, dashboard_host=None,
                  dashboard_port=8265, client_server_port=10001, num_cpus=None, num_gpus=None,
                  resources=None, extra_args=(), redis_password=None, carries_work=False):
    """The `ray start` argv for a head or a worker (with the GCS store's password: shown_argv hides it).
    carries_work: the head is also the site's one worker (a one-box site): it offers CPUs, GPUs and resources."""
    argv = [ray_bin, "start", f"--node-ip-address={node_ip}"]
    if role == "head":
        # No work lands on a head of its own: it owns neither CPUs nor GPUs.
        offers = (([f"--num-cpus={int(num_cpus)}"] if num_cpus is not None else [])
                  + [f"--num-gpus={int(num_gpus or 0)}"])
        argv += ["--head", f"--port={gcs_port}", *(offers if carries_work else ["--num-cpus=0", "--num-gpus=0"]),
                 f"--dashboard-host={dashboard_host or node_ip}",
                 f"--dashboard-port={dashboard_port}",
                 f"--ray-client-server-port={client_server_port}"]
        if redis_password:
            argv.append(f"{REDIS_PASSWORD_ARG}{redis_password}")
    elif role == "worker":
        if not head_ip:
            raise ValueError("a worker needs head_ip")
        argv.append(f"--address={head_ip}:{gcs_port}")
        if num_cpus is not None:
            argv.append(f"--num-cpus={int(num_cpus)}")
        argv.append(f"--num-gpus={int(num_gpus or 0)}")
    else:
        raise ValueError(f"role must be head or worker, got {role!r}")
    if resources:
        argv.append("--resources={}".format(json.dumps(resources, sort_keys=True, separators=(",", ":"))))
    for arg in extra_args:
        if str(arg).split("=")[0] == "--ray-debugger-external":
            # It makes Ray's legacy debugger listen on 0.0.0.0: anyone who reaches the node could attach.
            raise ValueError("extra_args: --ray-debugger-external would open the debugger on every interface; "
                             "jobs get debugpy on the node's cluster address instead (JobSpec debug)")
    argv += list(extra_args)
    return argv


REDIS_PASSWORD_ARG = "--redis-password="


def shown_argv(argv):
    """argv as the state file, the result and the changes show it: the store's password as its digest."""
    return [f"{REDIS_PASSWORD_ARG}sha256:{digest(a[len(REDIS_PASSWORD_ARG):])[:16]}"
            if a.startswith(REDIS_PASSWORD_ARG) else a for a in argv]


# NCCL and Gloo pick an interface on their own, often a wrong one (verl#967, verl#726): name it.
SOCKET_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
_IFNAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")


def socket_interface(run_command, ifname, target):
    """The interface named by the socket_ifname setting: `auto` is the one that reaches target (node_probe).

    Raises ValueError, naming the setting, for a malformed name or when no interface reaches target.
    """
    if ifname != "auto" and not _IFNAME.fullmatch(ifname):
        raise ValueError(f"ray_node_socket_ifname: must be auto, empty or an interface name, got {ifname!r}")
    if ifname != "auto":
        return ifname
    found = node_probe.interface_to(run_command, target)
    if not found:
        raise ValueError(f"no interface reaches {target} from this node (no route, or the name does not resolve to "
                         "an IPv4 address); set ray_node_socket_ifname to the interface's name")
    return found


def run_env(python, env):
    """The environment `ray start` and `ray stop` run with: env over ours, the Ray venv first on PATH."""
    # Jobs inherit the node's PATH: the Ray venv must come first or entrypoints run
    # `python` from the system and fail with "No module named 'ray'".
    merged = dict(os.environ)
    merged.update({k: str(v) for k, v in env.items()})
    merged["PATH"] = node_probe.ray_first_path(python, merged.get("PATH"))
    return merged


def keep_token(token, path, check_mode=False):
    """Write the token file (mode 0600, atomically) when it differs; returns whether it changed."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read().strip() == token:
                return False
    except FileNotFoundError:
        pass
    if not check_mode:
        # The file's 0600 keeps the token; its folder (/etc/ray-verl) stays 0755, since the head's services keep
        # their own configuration beside it and run as their own users (Prometheus).
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
        os.replace(tmp, path)
    return True


def jobs_in_the_way(role, node_ip, dashboard_url, token_path):
    """What a restart of this node would end: the head ends every job; a worker, those on it.

    Raises when the cluster cannot be read: the caller then refuses to restart.
    """
    from ansible.module_utils.base import ray_cluster as rc

    rc.prepare_client_env(token_path)
    jobs = [rc.job_summary(j) for j in rc.job_client(dashboard_url, rc.read_token(token_path)).list_jobs()]
    active = [j for j in jobs if j["status"] in ("PENDING", "RUNNING")]
    if role == "head":
        return sorted(j["submission_id"] or j["job_id"] or "?" for j in active)
    here = {n["node_id"] for n in rc.list_nodes(dashboard_url) if n["node_ip"] == node_ip and n["state"] == "ALIVE"}
    drivers = sorted(j["submission_id"] or "?" for j in active if j.get("driver_node_id") in here)
    actors = here & set(rc.list_alive_actor_nodes(dashboard_url))
    return drivers or (["actors of a running job"] if actors else [])


def digest(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(argv, env, ray_version, token_digest=None):
    """What identifies a node's configuration; a change means a restart."""
    config = {"argv": argv, "env": env, "ray": ray_version}
    if token_digest:
        config["token"] = token_digest
    return digest(json.dumps(config, sort_keys=True))


def read_state(path):
    return files.read_json(path)


def write_state(path, state):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    files.write_json(path, state)


def _proc_entries(proc_root):
    for name in os.listdir(proc_root):
        if name.isdigit():
            yield int(name), os.path.join(proc_root, name)


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def find_raylets(proc_root="/proc"):
    """PIDs of raylet processes visible on this host."""
    return sorted(pid for pid, d in _proc_entries(proc_root)
                  if _read(os.path.join(d, "comm")).strip() == b"raylet")


def find_gcs_servers(proc_root="/proc"):
    """PIDs of GCS servers visible on this host (a head's)."""
    return sorted(pid for pid, d in _proc_entries(proc_root)
                  if _read(os.path.join(d, "comm")).strip() == b"gcs_server")


def process_environ(pid, proc_root="/proc"):
    """A process's environment as a dict ({} when it cannot be read)."""
    pairs = _read(os.path.join(proc_root, str(pid), "environ")).split(b"\0")
    return dict(p.decode("utf-8", "replace").split("=", 1) for p in pairs if b"=" in p)


def find_job_drivers(proc_root="/proc", own_pid=None):
    """PIDs of Ray job drivers (and their children) still running here.

    `ray stop` does not end them when their node died (notes/ray.md), so we
    find them by the variable the job supervisor gives every driver.
    """
    own_pid = os.getpid() if own_pid is None else own_pid
    found = []
    for pid, d in _proc_entries(proc_root):
        if pid == own_pid:
            continue
        environ = _read(os.path.join(d, "environ"))
        if environ.startswith(DRIVER_ENV_MARKER) or (b"\0" + DRIVER_ENV_MARKER) in environ:
            found.append(pid)
    return sorted(found)


def kill_pids(pids, sig=signal.SIGKILL):
    """Signal each PID's process group (a driver's children share it), then the PID."""
    killed = []
    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, sig)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


# SIGTERM lets the raylet tell the head it leaves, so the cluster lists it DEAD at once
# (after a SIGKILL it stays ALIVE until its health checks fail); SIGKILL after this grace.
STOP_GRACE_S = 10
# Ray's own temporary folder (session directories of a Ray left by an earlier setup are removed).
RAY_TMP = "/tmp/ray"


def stop(run_command, ray_bin, env, remove_sessions):
    """`ray stop`, then end the job drivers it leaves behind; returns their PIDs.

    Raises RuntimeError when `ray stop` fails.
    """
    rc, out, err = run_command([ray_bin, "stop", f"--grace-period={STOP_GRACE_S}"], environ_update=env)
    if rc != 0:
        raise RuntimeError(f"ray stop failed: {(err or out).strip()}")
    for _ in range(50):
        if not find_raylets():
            break
        time.sleep(0.2)
    killed = kill_pids(find_job_drivers())
    if remove_sessions:
        for path in glob.glob(os.path.join(RAY_TMP, "session_*")):
            if os.path.islink(path):
                os.unlink(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
    return killed


def clear_store(env, password):
    """Delete this cluster's tables from the GCS store (a head stopped on purpose ends its cluster: a head started
    later must not come back to the old one's nodes and jobs). env: the head's, with RAY_REDIS_ADDRESS and
    RAY_external_storage_namespace. Returns the namespace cleared, or None without a store. Raises on failure."""
    address, namespace = env.get("RAY_REDIS_ADDRESS"), env.get("RAY_external_storage_namespace")
    if not (address and namespace):
        return None
    from ray._private.gcs_utils import cleanup_redis_storage  # Ray's own cleanup (KubeRay's too)

    host, _, port = str(address).rpartition(":")
    if not cleanup_redis_storage(host.strip("[]"), int(port), password or "", False, str(namespace)):
        raise RuntimeError(f"the GCS store at {address} did not clear namespace {namespace}")
    return str(namespace)


# What `ray start` prints when the new raylet did not register with the GCS within Ray's fixed 30 s
# (ray/_private/node.py): many nodes starting at once on few cores, or an overloaded head.
_STARTUP_TIMEOUT = "timed out during startup"
# The line of a traceback that says what went wrong: "SomeError: what" (Python's last line of an exception).
_ERROR_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception)|Exception): (.{1,300})")


def start_failure(text):
    """(the one line that says why `ray start` failed, whether it was the startup timeout): never the traceback."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if any(_STARTUP_TIMEOUT in line for line in lines):
        return ("the new raylet did not register with the head within Ray's 30 s (too many nodes starting at once "
                "for the head, or an overloaded GCS)"), True
    for line in reversed(lines):
        match = _ERROR_LINE.match(line)
        if match:
            return match.group(1), False
    return (lines[-1][:300] if lines else "no output"), False


def wait_for_port(host, port, timeout_s, sleep=time.sleep, clock=time.monotonic):
    """Whether host:port accepts a TCP connection within timeout_s (the head's GCS, before a retried start)."""
    import socket

    deadline = clock() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=5):
                return True
        except OSError:
            if clock() >= deadline:
                return False
            sleep(2)


def plan(running, state, want_fingerprint, cleanup_legacy, restart=False, gcs_alive=True):
    """Decide what to do for state=started.

    Returns (action, reason); action is one of "none", "start", "restart", "refuse_legacy".
    Whether jobs run in the way of a restart is the caller's question, asked only then. gcs_alive: False for a
    head whose raylet outlived its GCS server (it exits when its store goes away): it is started again like a
    head that died, so it comes back to the store's tables.
    """
    if not running:
        return "start", "Ray is not running" if not state else "Ray died; rejoining"
    if state is None:
        if not cleanup_legacy:
            return "refuse_legacy", "Ray runs here but was not started by this project"
        return "restart", "replacing a Ray left by an earlier setup"
    if not gcs_alive:
        return "start", "the head's GCS server died; starting the head again"
    if state.get("fingerprint") == want_fingerprint and not restart:
        return "none", "healthy"
    reason = "restart requested" if restart and state.get("fingerprint") == want_fingerprint else \
        "configuration changed"
    return "restart", reason


def diff_state(old, new):
    """Human-readable list of what changed between two recorded configurations."""
    if not old:
        return []
    changes = []
    if old.get("ray_version") != new.get("ray_version"):
        changes.append("ray {} -> {}".format(old.get("ray_version"), new.get("ray_version")))
    old_args, new_args = set(old.get("argv", [])), set(new.get("argv", []))
    changes += [f"-{a}" for a in sorted(old_args - new_args)]
    changes += [f"+{a}" for a in sorted(new_args - old_args)]
    old_env, new_env = old.get("env", {}), new.get("env", {})
    changes += [f"env {k}" for k in sorted(set(old_env) | set(new_env)) if old_env.get(k) != new_env.get(k)]
    if old.get("token_digest") != new.get("token_digest"):
        changes.append("token")
    return changes


# The run: what one call does on its node, from its parameters to its result.
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


def stop_or_fail(module, ray_bin, env, remove_sessions):
    try:
        return stop(module.run_command, ray_bin, env, remove_sessions)
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


def clear_store_or_fail(module, failure, **result):
    """Delete the cluster's tables from the GCS store (clear_store), or fail in one line saying so."""
    try:
        return clear_store(module.params["env"], module.params["redis_password"])
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
    mount = shared_root.run(module, p["shared_root"]) if p["shared_root"] else None
    # The head's store before the head: whether it holds this cluster's tables decides what a start means.
    store = check_store(module, p["store"]) if p["store"] else None
    ray_bin = os.path.join(os.path.dirname(python), "ray")
    if p["state"] == "started" and p["socket_ifname"]:
        try:
            ifname = socket_interface(module.run_command, p["socket_ifname"], p["head_ip"] or p["node_ip"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        p["env"] = {**{var: ifname for var in SOCKET_VARS}, **p["env"]}
    env = run_env(python, p["env"])
    state = read_state(p["state_file"])
    raylets = find_raylets()

    if p["state"] == "stopped":
        drivers = find_job_drivers()
        if not (raylets or drivers or state):
            module.exit_json(changed=False, action="none", reason="Ray is not running", changes=[],
                             ray_version="", killed_driver_pids=[])
        killed, cleared = [], None
        if not dry:
            killed = stop_or_fail(module, ray_bin, env, remove_sessions=False)
            if os.path.exists(p["state_file"]):
                os.unlink(p["state_file"])
            cleared = clear_store_or_fail(module, "Ray stopped, but its tables stay in the GCS store")
        module.exit_json(changed=True, action="stop",
                         reason=f"stopping {len(raylets)} raylet(s), {len(drivers)} driver(s)", changes=[],
                         ray_version="", killed_driver_pids=killed or drivers, store_cleared=cleared)

    try:
        p["num_gpus"] = node_probe.gpu_count(module.run_command, p["num_gpus"])
    except ValueError as exc:
        module.fail_json(msg=f"{p['node_ip']}: {exc}")
    version = ray_version(module, python, p["ray_version"])
    token_changed = bool(p["token"]) and keep_token(p["token"], p["token_path"], dry)
    try:
        argv = start_command(
            ray_bin, p["role"], p["node_ip"], p["gcs_port"], head_ip=p["head_ip"],
            dashboard_host=p["dashboard_host"], dashboard_port=p["dashboard_port"],
            client_server_port=p["client_server_port"], num_cpus=p["num_cpus"], num_gpus=p["num_gpus"],
            resources=p["resources"], extra_args=p["extra_args"], redis_password=p["redis_password"],
            carries_work=p["carries_work"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    run_argv, argv = argv, shown_argv(argv)
    recorded_env = {k: str(v) for k, v in sorted(p["env"].items())}
    # The token's digest, not the token: a new token must restart the node, and the state file is no secret.
    token_digest = digest(p["token"]) if p["token"] else None
    want = {"argv": argv, "env": recorded_env, "ray_version": version, "token_digest": token_digest,
            "fingerprint": fingerprint(argv, recorded_env, version, token_digest)}
    gcs_alive = p["role"] != "head" or not raylets or bool(find_gcs_servers())
    action, reason = plan(bool(raylets), state, want["fingerprint"], p["cleanup_legacy"], p["restart"], gcs_alive)
    changes = diff_state(state, want)
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
            busy = jobs_in_the_way(p["role"], p["node_ip"], p["dashboard_url"], token_path) \
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
        result["killed_driver_pids"] = stop_or_fail(module, ray_bin, env, remove_sessions=state is None)
        # A restarted head starts a new cluster: the old one's tables must not come back from the store.
        failure = "the GCS store could not be cleared for the new head"
        result["store_cleared"] = clear_store_or_fail(module, failure, **result) if p["role"] == "head" else None
    elif action == "start" and raylets:  # what is left of a head whose GCS server died
        result["killed_driver_pids"] = stop_or_fail(module, ray_bin, env, remove_sessions=False)
    elif action == "start":
        # Drivers left running when Ray died here belong to jobs the cluster has lost: end them before rejoining.
        result["killed_driver_pids"] = kill_pids(find_job_drivers())
    # The readiness gate accepts only a node the cluster saw start after this moment.
    result["started_at_ms"] = int(time.time() * 1000)
    rc, out, err = module.run_command(run_argv, environ_update=env)
    why, timed_out = start_failure(out + err) if rc != 0 else (None, False)
    if timed_out and p["role"] == "worker":
        # Ray waits a fixed 30 s for a new raylet to register: once the head answers, this node starts again, once.
        result["retried"] = True
        if wait_for_port(p["head_ip"], p["gcs_port"], RETRY_WAIT_S):
            stop_or_fail(module, ray_bin, env, remove_sessions=False)
            rc, out, err = module.run_command(run_argv, environ_update=env)
            why, timed_out = start_failure(out + err) if rc != 0 else (None, False)
        else:
            why = f"{why}; the head's GCS {p['head_ip']}:{p['gcs_port']} did not answer for {RETRY_WAIT_S}s after it"
    if rc != 0:
        # One line naming the node and the cause; the output's tail is in the result (stderr_tail), not the message.
        result["stderr_tail"] = hide_password(module, "\n".join((out + err).strip().splitlines()[-15:]))
        module.fail_json(msg=hide_password(module, f"ray start failed on {p['node_ip']} (rc={rc}"
                                                   f"{', started twice' if result.get('retried') else ''}): {why}"),
                         **result)
    write_state(p["state_file"], want)
    module.exit_json(changed=True, **result)
