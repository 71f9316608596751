"""One of the project's daemons (Redis for the GCS store, TensorBoard, Prometheus) brought to its state in one call of
library/ray_daemon.py: its directories and files in place, then running as a systemd unit where systemd runs, else
detached by Debian's start-stop-daemon with a pid file (the lab has no systemd), restarted when its command, unit or
files changed, and listening before the call returns.

One call instead of a dozen tasks: an idempotent up.yml made one module call per check, each about 0.3 s on the lab.
Nothing here follows a symbolic link as root: a directory or file of the daemon's that is a link is refused.
"""

import json
import os
import re
import socket
import time

from ansible.module_utils.daemons.files import DaemonError, directory, lstat, makedirs, open_parents, place

SYSTEMD_DIR = "/run/systemd/system"
UNIT_DIR = "/etc/systemd/system"
# What one word of a command line may hold: nothing a shell or systemd's ExecStart= would read (the roles check their
# settings before they get here; this is the module's own guard).
WORD = re.compile(r"[A-Za-z0-9._/:=,+@^-]+")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,63}")
# With its leading 0: an unquoted 0640 in YAML reaches the module as 416, which must not pass as a mode.
MODE = re.compile(r"0[0-7]{3}")
STOP_RETRY = "TERM/30/KILL/5"
LOG_TAIL_LINES = 3


def check_settings(p):
    """The module's parameters, checked: a bad one is a DaemonError naming it."""
    for field in ("name", "user"):
        if not NAME.fullmatch(str(p[field] or "")):
            raise DaemonError(f"{field} must be 1-64 letters, digits and ._- (starting with a letter or digit)")
    if p.get("group") and not NAME.fullmatch(str(p["group"])):
        raise DaemonError("group must be 1-64 letters, digits and ._- (starting with a letter or digit)")
    if p["state"] == "started":
        if not p["argv"] or not os.path.isabs(p["argv"][0]):
            raise DaemonError("argv must name the executable first, by its absolute path")
        for word in p["argv"]:
            if not WORD.fullmatch(word):
                raise DaemonError("every word of argv must be letters, digits and ._/:=,+@^- (no shell, no quoting)")
    for field in ("log", "run_dir"):
        if not os.path.isabs(p[field]) or "\n" in p[field]:
            raise DaemonError(f"{field} must be an absolute path")
    if p["package"] and not PACKAGE.fullmatch(p["package"]):
        raise DaemonError("package must be a Debian package name")
    for entry in p["directories"] + p["files"]:
        if not os.path.isabs(entry["path"]) or ".." in entry["path"].split("/") or "\n" in entry["path"]:
            raise DaemonError(f"{entry['path']!r} must be an absolute path without '..'")
        if not MODE.fullmatch(str(entry["mode"])):
            raise DaemonError(f"the mode of {entry['path']} must be octal with its leading 0, "
                              "such as \"0644\" (quoted)")


def names(p):
    """Where its pid file, recorded command and unit live, and the process name start-stop-daemon matches (the
    kernel's comm: the executable's base name, at most 15 characters; never --exec, a script's is its interpreter)."""
    return {"pidfile": os.path.join(p["run_dir"], p["name"] + ".pid"),
            "state_file": os.path.join(p["run_dir"], p["name"] + ".cmd"),
            "unit_file": os.path.join(UNIT_DIR, p["name"] + ".service"),
            "process": os.path.basename(p["argv"][0])[:15] if p["argv"] else ""}


def unit(p):
    """The systemd unit of the daemon (every word of its command checked: nothing needs quoting)."""
    description = re.sub(r"[^A-Za-z0-9 ._,()/:-]", "", p["description"] or p["name"])
    lines = ["# Written by ray-verl (library/ray_daemon.py); changes here are overwritten.", "[Unit]",
             f"Description={description} (ray-verl)", "After=network-online.target", "Wants=network-online.target",
             "", "[Service]", f"Type={'notify' if p['notify'] else 'simple'}", f"User={p['user']}"]
    if p.get("group"):
        lines.append(f"Group={p['group']}")
    lines += [f"ExecStart={' '.join(p['argv'])}", "Restart=always", "RestartSec=5", "LimitNOFILE=65535", "",
              "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def listening(host, port):
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def wait_listening(p, systemd, run, log_tail):
    """Return once it listens on p['listen']; DaemonError naming its log (and that log's last lines) after wait_s."""
    host, port = p["listen"]["host"], p["listen"]["port"]
    deadline = time.monotonic() + p["wait_s"]
    while not listening(host, port):
        if time.monotonic() > deadline:
            raise DaemonError(f"{p['name']} did not listen on {host}:{port} within {p['wait_s']} s; its log "
                              f"({log_where(p, systemd)}) "
                              f"ends: {' / '.join(log_tail(p, systemd, run))[:400]}")
        time.sleep(0.2)


def log_where(p, systemd):
    return f"journalctl -u {p['name']}" if systemd else p["log"]


def log_tail(p, systemd, run):
    if systemd:
        _, out, _ = run(["journalctl", "-u", p["name"] + ".service", "-n", str(LOG_TAIL_LINES), "--no-pager",
                         "-o", "cat"])
        return out.splitlines()[-LOG_TAIL_LINES:]
    try:
        if lstat(p["log"]) is None:
            return []
        with open(p["log"], "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 4096))
            return handle.read().decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:]
    except (OSError, DaemonError):
        return []


class Plain:
    """No systemd: start-stop-daemon finds a running one by its pid file and process name; the command it was
    started with is recorded beside the pid file, so a new command restarts it as a new unit file would."""

    def __init__(self, p, run, check):
        self.p, self.run, self.check, self.n = p, run, check, names(p)

    def running(self):
        if lstat(self.n["pidfile"]) is None:
            return False
        rc, _, _ = self.run(["start-stop-daemon", "--status", "--pidfile", self.n["pidfile"],
                             "--name", self.n["process"]])
        return rc == 0

    alive = running

    def state(self):
        recorded = json.dumps({"argv": self.p["argv"], "user": self.p["user"], "group": self.p.get("group")},
                              indent=1) + "\n"
        return {"path": self.n["state_file"], "content": recorded, "mode": "0600", "owner": "root", "group": "root"}

    def rewrites(self):
        return place(self.state(), True, self.run)

    def stop(self):
        rc, out, err = self.run(["start-stop-daemon", "--stop", "--pidfile", self.n["pidfile"], "--name",
                                 self.n["process"], "--retry", STOP_RETRY, "--oknodo", "--remove-pidfile"])
        if rc != 0:
            raise DaemonError(f"{self.p['name']}: start-stop-daemon could not stop it: {(err or out).strip()[:300]}")

    def converge(self, restart):
        """Returns 'started', 'restarted' or None."""
        directory({"path": self.p["run_dir"], "owner": "root", "group": "root", "mode": "0700"}, self.check)
        new_command = place(self.state(), self.check, self.run)
        running = self.running()
        if running and not (new_command or restart):
            return None
        if self.check:
            return "restarted" if running else "started"
        if running:
            self.stop()
        # start-stop-daemon opens its output as root, following a link: refused here; a missing folder would make
        # the daemon die unseen.
        lstat(self.p["log"])
        if lstat(os.path.dirname(self.p["log"])) is None:
            makedirs(os.path.dirname(self.p["log"]))
        user = self.p["user"] + (":" + self.p["group"] if self.p.get("group") else "")
        rc, out, err = self.run(["start-stop-daemon", "--start", "--background", "--make-pidfile",
                                 "--pidfile", self.n["pidfile"], "--name", self.n["process"], "--chuid", user,
                                 "--chdir", "/", "--output", self.p["log"], "--startas", self.p["argv"][0], "--"]
                                + self.p["argv"][1:])
        if rc != 0:
            raise DaemonError(f"{self.p['name']}: start-stop-daemon could not start it: {(err or out).strip()[:300]}")
        return "restarted" if running else "started"

    def halt(self):
        if not self.running():
            return False
        if not self.check:
            self.stop()
        return True


class Systemd:
    """A unit in /etc/systemd/system, enabled and running; what would take its place (Debian's prometheus.service,
    on the same port and every interface) stopped and masked."""

    def __init__(self, p, run, check):
        self.p, self.run, self.check, self.n = p, run, check, names(p)

    def ctl(self, *args):
        rc, out, _ = self.run(["systemctl", *args])
        return rc, out.strip()

    def must(self, *args):
        rc, _ = self.ctl(*args)
        if rc != 0:
            raise DaemonError(f"{self.p['name']}: systemctl {' '.join(args)} failed (exit {rc}); see journalctl -u "
                              f"{self.p['name']}")

    def unit_entry(self):
        return {"path": self.n["unit_file"], "content": unit(self.p), "mode": "0644", "owner": "root", "group": "root"}

    def rewrites(self):
        return place(self.unit_entry(), True, self.run)

    def converge(self, restart):
        changed = False
        for other in self.p["conflicts"]:
            if self.ctl("is-enabled", other)[1] != "masked":
                changed = True
                if not self.check:
                    self.ctl("stop", other)
                    self.must("mask", other)
        new_unit = place(self.unit_entry(), self.check, self.run)
        if new_unit and not self.check:
            self.must("daemon-reload")
        if self.ctl("is-enabled", self.p["name"] + ".service")[1] != "enabled":
            changed = True
            if not self.check:
                self.must("enable", self.p["name"] + ".service")
        active = self.ctl("is-active", self.p["name"] + ".service")[1] == "active"
        if active and not (new_unit or restart):
            return "changed" if changed else None
        if not self.check:
            self.must("restart" if active else "start", self.p["name"] + ".service")
        return "restarted" if active else "started"

    def alive(self):
        return self.ctl("is-active", self.p["name"] + ".service")[1] in ("active", "reloading")

    def halt(self):
        # A unit crash-looping (activating, between restarts) or still starting is stopped too.
        if lstat(self.n["unit_file"]) is None or self.ctl("is-active", self.p["name"] + ".service")[1] in (
                "inactive", "failed", "unknown", ""):
            return False
        if not self.check:
            self.must("stop", self.p["name"] + ".service")
        return True


def install(p, run, check):
    """Debian's package of the daemon, asked for only when its executable is missing (asking apt costs more than the
    rest of the call); no recommends (Prometheus's would add a node exporter listening on every interface)."""
    if not p["package"]:
        raise DaemonError(f"{p['requires']} does not exist on this host")
    if check:
        return
    # A fresh host's unattended-upgrades may hold dpkg's lock for a while: wait for it as Ansible's apt module does.
    rc, out, err = run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=120",
                        p["package"]],
                       environ_update={"DEBIAN_FRONTEND": "noninteractive"})
    said = (err or out).strip().splitlines()
    if rc != 0 or not os.path.exists(p["requires"]):
        raise DaemonError(f"apt-get could not install {p['package']} (for {p['requires']}): "
                          f"{said[-1][:300] if said else 'exit ' + str(rc)}")


def converge(p, run, check, systemd=None):
    """Bring the daemon to p['state']: the module's result (changed, action, written, systemd, installed)."""
    check_settings(p)
    systemd = os.path.isdir(SYSTEMD_DIR) if systemd is None else systemd
    manager = (Systemd if systemd else Plain)(p, run, check)
    result = {"changed": False, "action": None, "written": [], "systemd": systemd, "installed": None, "opened": []}
    if p["state"] == "stopped":
        result["changed"] = manager.halt()
        result["action"] = "stopped" if result["changed"] else None
        return result
    if p["requires"] and not os.path.exists(p["requires"]):
        install(p, run, check)
        result["installed"] = p["package"]
        if check:
            # Its user and files come with the package: nothing more to compare until it is there.
            return {**result, "changed": True, "action": "started"}
    changed = False
    for entry in p["directories"]:
        changed = directory(entry, check) or changed
    # However its parents were made before (a 0700 /etc/ray-verl), the daemon's user must reach its files.
    result["opened"] = open_parents([entry["path"] for entry in p["directories"] + p["files"]], p["user"], check)
    # A restart is owed from the moment a file, the unit or the command is rewritten until the daemon has (re)started:
    # a run that stops in between (a failed systemctl, a killed ansible) leaves the mark, and the next run restarts.
    marker = os.path.join(p["run_dir"], p["name"] + ".pending")
    owed = lstat(marker) is not None
    differs = [entry for entry in p["files"] if place(entry, True, run)]
    if (differs or manager.rewrites() or p["restart"]) and not check and not owed:
        directory({"path": p["run_dir"], "owner": "root", "group": "root", "mode": "0700"}, check)
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        owed = True
    if p["listen"] and not manager.alive() and listening(p["listen"]["host"], p["listen"]["port"]):
        raise DaemonError(f"{p['name']} is not running and another process listens on {p['listen']['host']}:"
                          f"{p['listen']['port']}: stop it, or give {p['name']} another port")
    for entry in differs:
        place(entry, check, run)
        result["written"].append(entry["path"])
    action = manager.converge(p["restart"] or owed or bool(differs))
    result["action"] = action if action in ("started", "restarted") else None
    result["changed"] = changed or bool(result["written"] or result["installed"] or result["opened"]) \
        or action is not None
    if p["listen"] and not check:
        wait_listening(p, systemd, run, log_tail)
    if owed and not check:
        os.unlink(marker)
    return result
