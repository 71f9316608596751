"""Start, inspect and stop the Ray processes of one node (the host we run on).

Pure helpers used by library/ray_node.py. The node records what it was started
with (a fingerprint of the command, environment and Ray version) so a re-run can
tell "healthy, leave it" from "drifted, restart it" without asking Ray.
"""

import hashlib
import json
import os
import signal

try:
    from ansible.module_utils.job_record import read_json, write_json
except ImportError:  # imported as a plain module (tests, CLIs)
    from job_record import read_json, write_json

# A Ray job's driver carries this variable; the job supervisor sets it.
DRIVER_ENV_MARKER = b"RAY_JOB_CONFIG_JSON_ENV_VAR="


def start_command(ray_bin, role, node_ip, gcs_port, head_ip=None, dashboard_host=None,
                  dashboard_port=8265, client_server_port=10001, num_cpus=None, num_gpus=None,
                  resources=None, extra_args=()):
    """The `ray start` argv for a head or a worker."""
    argv = [ray_bin, "start", f"--node-ip-address={node_ip}"]
    if role == "head":
        # No work lands on the head: it owns neither CPUs nor GPUs.
        argv += ["--head", f"--port={gcs_port}", "--num-cpus=0", "--num-gpus=0",
                 f"--dashboard-host={dashboard_host or node_ip}",
                 f"--dashboard-port={dashboard_port}",
                 f"--ray-client-server-port={client_server_port}"]
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


def interface_to(run_command, ip):
    """The interface this host reaches ip through; for its own address, the one holding it.

    run_command(argv) -> (rc, stdout, stderr), e.g. AnsibleModule.run_command.
    """
    rc, out, _ = run_command(["ip", "route", "get", ip])
    if rc == 0 and out.startswith("local"):
        rc, out, _ = run_command(["ip", "-o", "addr", "show", "to", ip])
        fields = out.split()
        return fields[1] if rc == 0 and len(fields) > 1 else None
    words = out.split()
    return words[words.index("dev") + 1] if rc == 0 and "dev" in words[:-1] else None


# NCCL and Gloo pick an interface on their own, often a wrong one (verl#967, verl#726): name it.
SOCKET_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def digest(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(argv, env, ray_version, token_digest=None):
    """What identifies a node's configuration; a change means a restart."""
    config = {"argv": argv, "env": env, "ray": ray_version}
    if token_digest:
        config["token"] = token_digest
    return digest(json.dumps(config, sort_keys=True))


def read_state(path):
    return read_json(path)


def write_state(path, state):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_json(path, state)


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


def plan(running, state, want_fingerprint, cleanup_legacy, restart=False):
    """Decide what to do for state=started.

    Returns (action, reason); action is one of "none", "start", "restart", "refuse_legacy".
    Whether jobs run in the way of a restart is the caller's question, asked only then.
    """
    if not running:
        return "start", "Ray is not running" if not state else "Ray died; rejoining"
    if state is None:
        if not cleanup_legacy:
            return "refuse_legacy", "Ray runs here but was not started by this project"
        return "restart", "replacing a Ray left by an earlier setup"
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
