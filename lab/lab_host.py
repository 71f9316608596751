"""Each lab host's life: its sshd as init of its own PID namespace, and how `up` starts, keeps and stops it.

A host runs as ``ip netns exec NS unshare --pid --fork --kill-child ... sh -c SCRIPT``: the script
(``namespace_script``) names the host, mounts its private /tmp, /run and /dev/shm and its overlays of /etc and
/var/lib (``overlays``), and execs sshd.
The recorded ``unshare`` PID and its kernel start time identify the host's process (``pid_is_ours``),
so only that process is ever signalled. ``probe`` gathers what exists of a host, ``classify`` and
``plan_up`` decide what `up` does with each (keep, create, recreate, remove), ``start_host`` and
``stop_host`` do it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from lab_facts import LAB_DIR, REPO_ROOT, STATE_FILE, Host, LabError, host_index, one_line, run, warn
from lab_files import write_if_changed
from lab_net import add_host_netns, link_exists, netns_exists, netns_pids, pid_in_netns

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
KILL_TIMEOUT = 5.0
PRIVATE_MOUNTS = (("/tmp", "mode=1777"), ("/run", "mode=0755"), ("/dev/shm", "mode=1777"))
# /etc and /var/lib of each host are overlays of the machine's, written under .lab/hosts/<name>/: what the playbooks
# write there (/etc/ray-verl, /var/lib/ray-verl-*) is the host's own, like a real node's disk, and make lab-down takes
# it away with .lab. What an earlier run left on the machine itself under the project's names is hidden (a whiteout)
# from a new host, so every lab starts as fresh machines (a green CI once hid a 0700 /etc/ray-verl). /var/lib, not
# /var: a CI runner may keep the repository under /var (/var/tmp, a Jenkins workspace is under /var/lib itself).
OVERLAID = {"/etc": ("ray-verl",), "/var/lib": ("ray-verl-*",)}
# What the playbooks write on a node outside the shared root (token, services' files and data, state, units): none of
# it may be on the machine itself after make lab-down (its tests check).
MACHINE_STATE = ("etc/ray-verl", "run/ray-verl", "var/lib/ray-verl-*", "etc/systemd/system/ray-verl-*")


def machine_leftovers(root: Path = Path("/")) -> list[str]:
    """The project's node paths that exist on the machine itself (outside every lab host's own layers)."""
    return sorted(str(found) for pattern in MACHINE_STATE for found in root.glob(pattern))


@dataclasses.dataclass(frozen=True)
class Probe:
    """Observed facts about one host (gathered at the system boundary)."""

    proc_ours: bool  # recorded PID alive, not a zombie, start time matches
    netns_exists: bool
    proc_in_netns: bool
    veth_exists: bool


# ---------------------------------------------------------------- what `up` does with each host


def classify(probe: Probe) -> str:
    """'running' (leave untouched), 'absent' (create) or 'stale' (clean, create)."""
    if probe.proc_ours and probe.netns_exists and probe.proc_in_netns and probe.veth_exists:
        return "running"
    if not (probe.proc_ours or probe.netns_exists or probe.veth_exists):
        return "absent"
    return "stale"


def plan_up(
    wanted: list[Host], recorded: dict[str, Host], conditions: dict[str, str]
) -> list[tuple[str, Host]]:
    """Actions turning the recorded lab into the wanted one.

    `conditions` maps each wanted host's name to its classify() result
    (missing = absent).  Recorded hosts that are not wanted are removed,
    first, so a later create never collides with their leftovers.  A kept
    or recreated host is returned as its *recorded* entry, whose PID is the
    one to keep or to kill.
    """
    wanted_names = {h.name for h in wanted}
    actions: list[tuple[str, Host]] = []
    for name, host in sorted(recorded.items(), key=lambda kv: host_index(kv[0]) or 0):
        if name not in wanted_names:
            actions.append(("remove", host))
    for host in wanted:
        cond = conditions.get(host.name, "absent")
        if cond == "running":
            actions.append(("keep", recorded.get(host.name, host)))
        elif cond == "stale":
            actions.append(("recreate", recorded.get(host.name, host)))
        else:
            actions.append(("create", host))
    return actions


# ---------------------------------------------------------------- PID identity


def parse_proc_stat(text: str) -> tuple[str, int]:
    """(state, starttime) from /proc/PID/stat; comm may contain ') '."""
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[19])  # fields 3 and 22 of proc(5)


def proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        return parse_proc_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def proc_comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def pid_is_ours(pid: int | None, pid_start: int | None) -> bool:
    """True only for the live (non-zombie) process we recorded."""
    if not pid or pid_start is None:
        return False
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X") and st[1] == pid_start


def probe(host: Host) -> Probe:
    ours = pid_is_ours(host.pid, host.pid_start)
    has_ns = netns_exists(host.netns)
    return Probe(
        proc_ours=ours,
        netns_exists=has_ns,
        proc_in_netns=bool(ours and has_ns and host.pid and pid_in_netns(host.pid, host.netns)),
        veth_exists=link_exists(host.veth),
    )


def wait_until(cond: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True


# ---------------------------------------------------------------- the host's sshd and namespaces


def render_sshd_config(host: Host, host_dir: Path, authorized_keys: Path) -> str:
    return "\n".join([
        f"# {host.name}: generated by lab/lab.py",
        f"ListenAddress {host.ip}",
        "Port 22",
        f"HostKey {host_dir / 'ssh_host_ed25519_key'}",
        f"AuthorizedKeysFile {authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        # The repo may live on a filesystem with loose modes; the key files
        # are lab-only anyway.
        "StrictModes no",
        "PidFile none",
        "UseDNS no",
        "PrintMotd no",
        f"Subsystem sftp {SFTP_SERVER}",
        "LogLevel ERROR",
        "",
    ])


def overlays(host_dir: Path, repo_root: Path = REPO_ROOT) -> list[tuple[str, Path]]:
    """The host's overlays (mount point, its folder under host_dir), made on first use with the project's machine
    paths whited out. A mount point that holds the repository is left as it is (an overlay cannot sit above its own
    upper folder)."""
    made = []
    for point, fresh in OVERLAID.items():
        if str(repo_root).startswith(point + "/"):
            warn(f"the repository is under {point}: the lab's hosts share the machine's {point}")
            continue
        layer = host_dir / "overlay" / point.strip("/")
        if any(c in str(layer) for c in ",:\n"):
            raise LabError(f"{layer}: an overlay's folder may not hold ',' or ':' (move the repository)")
        if not layer.exists():
            (layer / "work").mkdir(parents=True)
            (layer / "upper").mkdir()
            for pattern in fresh:
                for found in Path(point).glob(pattern):
                    hidden = layer / "upper" / found.relative_to(point)
                    hidden.parent.mkdir(parents=True, exist_ok=True)
                    os.mknod(hidden, stat.S_IFCHR, os.makedev(0, 0))  # overlayfs's whiteout
        made.append((point, layer))
    return made


def overlay_mounts(layers: list[tuple[str, Path]]) -> list[str]:
    q = shlex.quote
    return [f"mount -t overlay lab-{point.strip('/').replace('/', '-')} -o "
            f"{q(f'lowerdir={point},upperdir={layer}/upper,workdir={layer}/work')} {q(point)}"
            for point, layer in layers]


def namespace_script(host: Host, config: Path, sshd_log: Path, repo_root: Path = REPO_ROOT,
                     layers: list[tuple[str, Path]] = ()) -> str:
    """Shell run as PID 1 of the host's namespaces before it becomes sshd."""
    q = shlex.quote
    repo = str(repo_root)
    hidden = any(repo.startswith(mp + "/") for mp, _ in PRIVATE_MOUNTS)
    steps = ["set -e", f"hostname {q(host.name)}"]
    steps += overlay_mounts(layers)
    if hidden:
        # The repository (keys, sshd config, venvs) lies under a folder that gets a fresh
        # tmpfs below: hold it open and bind it back at the same path afterwards.
        steps.append(f"exec 3<{q(repo)}")
    # Per-host /tmp, /run, /dev/shm: Ray keeps per-node sockets/state there.
    steps += [f"mount -t tmpfs -o {opts},nosuid,nodev lab-{mp.rsplit('/', 1)[1]} {mp}" for mp, opts in PRIVATE_MOUNTS]
    if hidden:
        steps += [f"mkdir -p {q(repo)}", f"mount --no-canonicalize --bind /proc/self/fd/3 {q(repo)}", "exec 3<&-"]
    steps += [
        "mkdir -p -m 0755 /run/sshd",  # sshd's privilege-separation chroot
        f"exec {SSHD} -D -f {q(str(config))} -E {q(str(sshd_log))}",
    ]
    return "; ".join(steps)


def host_argv(host: Host, script: str) -> list[str]:
    return [
        "ip", "netns", "exec", host.netns,
        "unshare", "--pid", "--fork", "--mount-proc", "--mount", "--uts",
        "--propagation", "private", "--kill-child",
        "sh", "-c", script,
    ]  # fmt: skip


# ---------------------------------------------------------------- start and stop


def stop_host(host: Host) -> None:
    """Kill the host's namespaces and delete its netns and veth (idempotent)."""
    if pid_is_ours(host.pid, host.pid_start):
        assert host.pid is not None
        # SIGKILL, not SIGTERM: unshare blocks SIGTERM while waiting for its
        # child. Its death SIGKILLs the namespace init (--kill-child), which
        # takes down the whole PID namespace.
        os.kill(host.pid, signal.SIGKILL)
        if not wait_until(lambda: not pid_is_ours(host.pid, host.pid_start), KILL_TIMEOUT):
            raise LabError(f"{host.name}: pid {host.pid} survived SIGKILL")
        # Namespace members die asynchronously after the init; wait for them
        # so nothing still uses .lab/ or the netns when we remove them.
        wait_until(lambda: not netns_pids(host.netns), KILL_TIMEOUT, 0.05)
    # A dead or recycled recorded PID is never signalled.
    leftover = netns_pids(host.netns)
    if leftover:
        # Typically an old host whose .lab/lab.json was deleted (git clean).
        # Without a record we cannot prove they are ours, so we only say so.
        unshare = [p for p in leftover if proc_comm(p) == "unshare"]
        hint = f"; if that is an old lab host: kill -9 {' '.join(map(str, unshare))}" if unshare else ""
        warn(f"{host.name}: {host.netns} has processes not recorded in {STATE_FILE.name} "
             f"(state lost?): {' '.join(map(str, leftover))}; not killing them{hint}")
    if netns_exists(host.netns):
        run(["ip", "netns", "delete", host.netns], host.name)
    if link_exists(host.veth):
        # Usually already gone: deleting the netns destroys its eth0 peer.
        run(["ip", "link", "delete", host.veth], host.name, check=False)


def start_host(host: Host, authorized_keys: Path) -> None:
    """Create netns + veth, write sshd config and launch the namespace init."""
    host_dir = LAB_DIR / "hosts" / host.name
    host_dir.mkdir(parents=True, exist_ok=True)
    hostkey = host_dir / "ssh_host_ed25519_key"
    if not hostkey.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", str(hostkey)], host.name)
    config = host_dir / "sshd_config"
    write_if_changed(config, render_sshd_config(host, host_dir, authorized_keys))
    # Validate the config now so errors surface here, not in a log later.
    # sshd -t insists on /run/sshd, so test in a throwaway mount namespace
    # rather than creating it on the real /run.
    check_script = (
        "mount -t tmpfs lab-run /run && mkdir -m 0755 /run/sshd"
        f" && exec {SSHD} -t -f {shlex.quote(str(config))}"
    )
    run(["unshare", "--mount", "--propagation", "private", "sh", "-c", check_script], host.name)
    # The host's overlays, tried the same way: where .lab cannot hold an upper layer (on overlayfs itself, XFS without
    # ftype) the host would die at once and lab up fail later on an ssh timeout.
    layers = overlays(host_dir)
    tried = run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 " && ".join(overlay_mounts(layers)) or "true"], host.name, check=False)
    if tried.returncode != 0:
        kind = run(["stat", "-f", "-c", "%T", str(LAB_DIR)], check=False).stdout.strip() or "unknown"
        raise LabError(f"{host.name}: cannot mount its overlays of {', '.join(p for p, _ in layers)} with their layers "
                       f"in {LAB_DIR} (a {kind} filesystem): {one_line(tried.stderr) or 'no reason given'}; "
                       "put the repository on a filesystem overlayfs accepts as an upper layer "
                       "(ext4, xfs with ftype=1)")

    add_host_netns(host)

    # The child keeps its own copy of the log fd; ours is closed right away.
    with open(host_dir / "console.log", "ab") as console:
        proc = subprocess.Popen(
            host_argv(host, namespace_script(host, config, host_dir / "sshd.log", layers=layers)),
            stdin=subprocess.DEVNULL, stdout=console, stderr=console,
            start_new_session=True,  # Ctrl-C on lab.py must not kill the hosts
        )  # fmt: skip
    # `ip netns exec` execs unshare in place, so proc.pid is unshare's PID:
    # the one to SIGKILL. Its start time survives the exec.
    st = proc_stat(proc.pid)
    if st is None:
        raise LabError(f"{host.name}: host process exited at once; see {host_dir / 'console.log'}")
    host.pid, host.pid_start = proc.pid, st[1]
