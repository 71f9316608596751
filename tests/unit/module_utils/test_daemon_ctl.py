"""module_utils/daemons/ctl.py (library/ray_daemon.py): one call brings a daemon's directories, files and process to
their state; a re-run changes nothing; check mode touches nothing; a link, a refused file or a bad word is one line.
start-stop-daemon, systemctl and apt-get are the boundary: faked here, run for real on the lab (test_monitoring,
test_doctor and every up.yml of the integration suite)."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile

import pytest

from ansible.module_utils.daemons import ctl as daemon_ctl  # isort: skip
from ansible.module_utils.daemons import files as daemon_files  # isort: skip


class Host:
    """The commands the module runs, answered like the host would: a daemon running or not, a validator's verdict."""

    def __init__(self, running=False, valid=True, units=None):
        self.running, self.valid, self.calls = running, valid, []
        self.units = dict(units or {})

    def __call__(self, argv, environ_update=None):
        self.calls.append(argv)
        tool = argv[0]
        if tool == "start-stop-daemon":
            action = argv[1]
            if action == "--status":
                return (0 if self.running else 3), "", ""
            pidfile = argv[argv.index("--pidfile") + 1]
            if action == "--stop":
                self.running = False
                if os.path.exists(pidfile):
                    os.unlink(pidfile)
                return 0, "", ""
            self.running = True
            with open(pidfile, "w", encoding="utf-8") as handle:
                handle.write("4242\n")
            return 0, "", ""
        if tool == "systemctl":
            verb, name = argv[1], argv[-1]
            if verb == "is-enabled":
                return 0, self.units.get(name, {}).get("enabled", "disabled"), ""
            if verb == "is-active":
                return 0, "active" if self.units.get(name, {}).get("active") else "inactive", ""
            unit = self.units.setdefault(name, {})
            if verb in ("start", "restart"):
                unit["active"] = True
            if verb == "enable":
                unit["enabled"] = "enabled"
            if verb == "mask":
                unit["enabled"] = "masked"
            return 0, "", ""
        if tool.endswith("check"):
            with open(argv[-1], encoding="utf-8") as handle:
                content = handle.read()
            return (0, "", "") if self.valid and "bad" not in content else (1, "", "FAILED: line 3: not valid\n")
        raise AssertionError(f"unexpected command {argv}")

    def did(self, *words):
        return [c for c in self.calls if list(c[:len(words)]) == list(words)]


def params(tmp_path, **over):
    p = {"name": "ray-verl-demo", "state": "started", "description": "a demo", "argv": ["/bin/sleep", "1000"],
         "user": "root", "group": "", "notify": False, "requires": "", "package": "", "restart": False, "listen": {},
         "wait_s": 2, "log": str(tmp_path / "run" / "demo.log"), "run_dir": str(tmp_path / "run"), "conflicts": [],
         "directories": [{"path": str(tmp_path / "data"), "owner": "root", "group": "", "mode": "0750"}],
         "files": [{"path": str(tmp_path / "data" / "demo.conf"), "content": "port 1\n", "owner": "root", "group": "",
                    "mode": "0640", "validate": [str(tmp_path / "check"), "%s"]}]}
    p.update(over)
    return p


def test_a_first_call_lays_out_and_starts_and_a_second_changes_nothing(tmp_path):
    host = Host()
    first = daemon_ctl.converge(params(tmp_path), host, check=False, systemd=False)
    assert first["changed"] and first["action"] == "started" and first["written"] == [str(tmp_path / "data/demo.conf")]
    assert oct(os.stat(tmp_path / "data").st_mode & 0o777) == "0o750"
    assert (tmp_path / "data/demo.conf").read_text() == "port 1\n"
    assert oct(os.stat(tmp_path / "data/demo.conf").st_mode & 0o777) == "0o640"
    recorded = json.loads((tmp_path / "run/ray-verl-demo.cmd").read_text())
    assert recorded["argv"] == ["/bin/sleep", "1000"]
    start = host.did("start-stop-daemon", "--start")[0]
    assert start[start.index("--pidfile") + 1] == str(tmp_path / "run/ray-verl-demo.pid")
    assert start[start.index("--name") + 1] == "sleep" and start[-2:] == ["--", "1000"]
    # Nothing left beside the file: the new one was written aside, checked, then renamed.
    assert sorted(os.listdir(tmp_path / "data")) == ["demo.conf"]

    again = daemon_ctl.converge(params(tmp_path), host, check=False, systemd=False)
    assert again == {"changed": False, "action": None, "written": [], "systemd": False, "installed": None, "opened": []}
    assert len(host.did("start-stop-daemon", "--start")) == 1


def test_a_new_file_or_command_restarts_it_and_restart_forces_it(tmp_path):
    host = Host()
    daemon_ctl.converge(params(tmp_path), host, check=False, systemd=False)
    p = params(tmp_path)
    p["files"][0]["content"] = "port 2\n"
    assert daemon_ctl.converge(p, host, check=False, systemd=False)["action"] == "restarted"
    changed = params(tmp_path, argv=["/bin/sleep", "2000"])
    assert daemon_ctl.converge(changed, host, False, False)["action"] == "restarted"
    assert daemon_ctl.converge(params(tmp_path, argv=["/bin/sleep", "2000"], restart=True), host, False,
                               False)["action"] == "restarted"
    assert len(host.did("start-stop-daemon", "--stop")) == 3
    # Found dead (its pid file stale): started again, nothing else changes.
    host.running = False
    assert daemon_ctl.converge(params(tmp_path, argv=["/bin/sleep", "2000"]), host, False, False)["action"] == "started"


def test_check_mode_says_what_would_change_and_touches_nothing(tmp_path):
    host = Host()
    result = daemon_ctl.converge(params(tmp_path), host, check=True, systemd=False)
    assert result["changed"] and result["action"] == "started" and result["written"]
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()
    assert not host.did("start-stop-daemon", "--start") and not host.did("start-stop-daemon", "--stop")


def test_a_file_its_validator_refuses_is_not_put_in_place(tmp_path):
    host = Host()
    daemon_ctl.converge(params(tmp_path), host, check=False, systemd=False)
    p = params(tmp_path)
    p["files"][0]["content"] = "port bad\n"
    with pytest.raises(daemon_ctl.DaemonError) as err:
        daemon_ctl.converge(p, host, check=False, systemd=False)
    message = str(err.value)
    assert message.startswith(f"{tmp_path}/data/demo.conf: {tmp_path}/check refused the new file")
    assert "\n" not in message
    assert "line 3: not valid" in message and "port bad" not in message
    assert (tmp_path / "data/demo.conf").read_text() == "port 1\n" and os.listdir(tmp_path / "data") == ["demo.conf"]
    assert len(host.did("start-stop-daemon", "--start")) == 1


@pytest.mark.parametrize("which", ["directory", "file", "log"])
def test_a_link_in_its_place_is_refused_and_not_followed(tmp_path, which):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep")
    p = params(tmp_path)
    if which == "directory":
        os.symlink(elsewhere, tmp_path / "data")
    elif which == "file":
        (tmp_path / "data").mkdir(mode=0o750)
        os.symlink(elsewhere / "precious", tmp_path / "data" / "demo.conf")
    if which != "log":
        with pytest.raises(daemon_ctl.DaemonError, match="is a symbolic link: refused"):
            daemon_ctl.converge(p, Host(), check=False, systemd=False)
    else:
        (tmp_path / "run").mkdir()
        os.symlink(elsewhere / "precious", tmp_path / "run" / "demo.log")
        assert daemon_ctl.log_tail(p, False, Host()) == []
    assert (elsewhere / "precious").read_text() == "keep" and oct(elsewhere.stat().st_mode & 0o777) != "0o750"


@pytest.mark.parametrize("field,value,says", [
    ("argv", ["/usr/bin/x", "a b"], "every word of argv"),
    ("argv", ["/usr/bin/x", "$(id)"], "every word of argv"),
    ("argv", ["/usr/bin/x", "%h"], "every word of argv"),
    ("argv", ["relative"], "argv must name the executable first"),
    ("argv", [], "argv must name the executable first"),
    ("name", "a/b", "name must be"),
    ("name", "x\nExecStartPre=/bin/sh", "name must be"),
    ("user", "root\nUser=x", "user must be"),
    ("group", "a b", "group must be"),
    ("log", "relative.log", "log must be an absolute path"),
    ("package", "redis; rm -rf /", "package must be a Debian package name"),
])
def test_every_bad_setting_is_one_line_naming_it(tmp_path, field, value, says):
    with pytest.raises(daemon_ctl.DaemonError) as err:
        daemon_ctl.converge(params(tmp_path, **{field: value}), Host(), check=False, systemd=False)
    assert str(err.value).startswith(says) and "\n" not in str(err.value)
    assert not (tmp_path / "data").exists()


def test_bad_paths_and_modes_of_its_files_are_refused(tmp_path):
    p = params(tmp_path)
    p["files"][0]["path"] = str(tmp_path / "data" / ".." / ".." / "etc" / "x")
    with pytest.raises(daemon_ctl.DaemonError, match="must be an absolute path without '..'"):
        daemon_ctl.converge(p, Host(), check=False, systemd=False)
    p = params(tmp_path)
    p["directories"][0]["mode"] = "rwx"
    with pytest.raises(daemon_ctl.DaemonError, match="must be octal"):
        daemon_ctl.converge(p, Host(), check=False, systemd=False)
    with pytest.raises(daemon_ctl.DaemonError, match="^user no-such-user-here does not exist on this host$"):
        daemon_ctl.converge(params(tmp_path, directories=[{"path": str(tmp_path / "d"), "owner": "no-such-user-here",
                                                            "group": "", "mode": "0755"}]), Host(), False, False)


def test_its_package_is_asked_for_only_when_its_executable_is_missing(tmp_path):
    host = Host()
    present = params(tmp_path, requires="/bin/sh", package="dash")
    daemon_ctl.converge(present, host, check=False, systemd=False)
    assert not host.did("apt-get")
    missing = params(tmp_path, requires=str(tmp_path / "nope"), package="nope-pkg")
    host.calls.clear()
    answers = {"apt-get": (100, "", "E: Unable to locate package nope-pkg\n")}

    def run(argv, environ_update=None):
        if argv[0] in answers:
            host.calls.append(argv)
            assert environ_update == {"DEBIAN_FRONTEND": "noninteractive"}
            return answers[argv[0]]
        return host(argv)

    with pytest.raises(daemon_ctl.DaemonError, match="^apt-get could not install nope-pkg .*Unable to locate package"):
        daemon_ctl.converge(missing, run, check=False, systemd=False)
    assert host.did("apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=120",
                    "nope-pkg")
    # In check mode nothing is installed; without a package to install, it is one line naming the path.
    host.calls.clear()
    assert daemon_ctl.converge(missing, run, check=True, systemd=False)["installed"] == "nope-pkg" and not host.calls
    with pytest.raises(daemon_ctl.DaemonError, match=f"^{tmp_path}/nope does not exist on this host$"):
        daemon_ctl.converge(params(tmp_path, requires=str(tmp_path / "nope")), host, check=False, systemd=False)


def test_under_systemd_it_is_an_enabled_unit_and_what_would_take_its_place_is_masked(tmp_path, monkeypatch):
    monkeypatch.setattr(daemon_ctl, "UNIT_DIR", str(tmp_path / "units"))
    (tmp_path / "units").mkdir()
    host = Host(units={"prometheus.service": {"enabled": "enabled", "active": True}})
    p = params(tmp_path, conflicts=["prometheus.service"], notify=True, group="root")
    result = daemon_ctl.converge(p, host, check=False, systemd=True)
    assert result["action"] == "started" and result["systemd"]
    assert host.units["prometheus.service"]["enabled"] == "masked"
    assert host.did("systemctl", "stop", "prometheus.service")
    unit = (tmp_path / "units" / "ray-verl-demo.service").read_text().splitlines()
    assert {"Type=notify", "User=root", "Group=root", "ExecStart=/bin/sleep 1000"} <= set(unit)
    assert host.did("systemctl", "daemon-reload") and host.did("systemctl", "enable", "ray-verl-demo.service")
    host.calls.clear()
    assert not daemon_ctl.converge(p, host, check=False, systemd=True)["changed"]
    assert not [c for c in host.calls if c[1] not in ("is-enabled", "is-active")]
    p["files"][0]["content"] = "port 3\n"
    assert daemon_ctl.converge(p, host, check=False, systemd=True)["action"] == "restarted"
    assert host.did("systemctl", "restart", "ray-verl-demo.service")
    stopped = daemon_ctl.converge(params(tmp_path, state="stopped"), host, check=False, systemd=True)
    assert stopped["action"] == "stopped" and host.did("systemctl", "stop", "ray-verl-demo.service")


class Listens(Host):
    """A host whose daemon, once started, listens on a port of 127.0.0.1."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]

    def __call__(self, argv, environ_update=None):
        answer = super().__call__(argv, environ_update)
        if argv[:2] == ["start-stop-daemon", "--start"]:
            self.server.listen()
        return answer


def test_it_returns_once_it_listens_or_names_its_log(tmp_path):
    host = Listens()
    try:
        assert daemon_ctl.converge(params(tmp_path, listen={"host": "127.0.0.1", "port": host.port}), host, False,
                                   False)["action"] == "started"
    finally:
        host.server.close()
    (tmp_path / "run" / "demo.log").write_text("starting\nerror: address in use\n")
    with pytest.raises(daemon_ctl.DaemonError) as err:
        daemon_ctl.converge(params(tmp_path, listen={"host": "127.0.0.1", "port": host.port}, wait_s=0.5, restart=True),
                            Host(running=True), False, False)
    assert str(err.value) == (f"ray-verl-demo did not listen on 127.0.0.1:{host.port} within 0.5 s; its log "
                              f"({tmp_path}/run/demo.log) ends: starting / error: address in use")


def test_stopped_stops_only_a_running_one(tmp_path):
    host = Host(running=True)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ray-verl-demo.pid").write_text("1\n")
    assert daemon_ctl.converge(params(tmp_path, state="stopped"), host, False, False)["action"] == "stopped"
    assert host.did("start-stop-daemon", "--stop")
    assert not daemon_ctl.converge(params(tmp_path, state="stopped"), host, False, False)["changed"]


def test_a_port_another_process_holds_is_named_not_taken_for_its_own(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    host = Host()
    try:
        for check in (True, False):
            with pytest.raises(daemon_ctl.DaemonError, match=f"^ray-verl-demo is not running and another process "
                                                             f"listens on 127.0.0.1:{port}: stop it"):
                daemon_ctl.converge(params(tmp_path, listen={"host": "127.0.0.1", "port": port}), host, check, False)
    finally:
        server.close()
    assert not host.did("start-stop-daemon", "--start")


def test_a_restart_owed_by_a_run_that_stopped_halfway_is_made_by_the_next(tmp_path):
    host = Host()
    daemon_ctl.converge(params(tmp_path), host, check=False, systemd=False)
    p = params(tmp_path)
    p["files"][0]["content"] = "port 2\n"

    class StopFails(Host):
        def __call__(self, argv, environ_update=None):
            if argv[:2] == ["start-stop-daemon", "--stop"]:
                return 2, "", "start-stop-daemon: cannot stop\n"
            return super().__call__(argv, environ_update)

    failing = StopFails(running=True)
    with pytest.raises(daemon_ctl.DaemonError, match="could not stop it"):
        daemon_ctl.converge(p, failing, check=False, systemd=False)
    assert (tmp_path / "data/demo.conf").read_text() == "port 2\n"  # the new file is in place, its restart owed
    assert (tmp_path / "run/ray-verl-demo.pending").exists()
    # Nothing differs any more, yet the next run restarts it (check mode says so too), and then owes nothing.
    assert daemon_ctl.converge(p, host, check=True, systemd=False)["action"] == "restarted"
    assert daemon_ctl.converge(p, host, check=False, systemd=False)["action"] == "restarted"
    assert not (tmp_path / "run/ray-verl-demo.pending").exists()
    assert not daemon_ctl.converge(p, host, check=False, systemd=False)["changed"]


def test_parents_are_made_0755_whatever_the_umask_and_a_linked_log_is_refused(tmp_path):
    old = os.umask(0o027)
    try:
        deep = tmp_path / "etc" / "ray-verl" / "prometheus"
        daemon_ctl.converge(params(tmp_path, directories=[{"path": str(deep), "owner": "root", "group": "",
                                                            "mode": "0755"}], files=[]), Host(), False, False)
    finally:
        os.umask(old)
    assert [oct(os.stat(d).st_mode & 0o777) for d in (tmp_path / "etc", deep.parent, deep)] == ["0o755"] * 3
    (tmp_path / "run").mkdir(exist_ok=True)
    os.symlink(tmp_path / "elsewhere.log", tmp_path / "run" / "demo.log")
    with pytest.raises(daemon_ctl.DaemonError, match="demo.log is a symbolic link: refused"):
        daemon_ctl.converge(params(tmp_path, files=[]), Host(), False, False)


def test_an_unquoted_yaml_mode_is_refused():
    p = params(__import__("pathlib").Path("/tmp/never-made"))
    p["files"][0]["mode"] = "416"  # what mode: 0640 without quotes becomes
    with pytest.raises(daemon_ctl.DaemonError, match="must be octal with its leading 0"):
        daemon_ctl.converge(p, Host(), check=True, systemd=False)


@pytest.fixture
def open_base():
    """A folder every user can enter (pytest's own tmp_path lies under a 0700 folder of root's)."""
    base = tempfile.mkdtemp(prefix="daemon-open-", dir="/tmp")
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base)


def daemon_files_under(base, user):
    config = os.path.join(base, "etc-ray-verl", "prometheus")
    return params(pathlib.Path(base), user=user, directories=[{"path": config, "owner": "root", "group": "",
                                                               "mode": "0755"}],
                  files=[{"path": os.path.join(config, "prometheus.yml"), "content": "port 1\n", "owner": "root",
                          "group": "", "mode": "0644", "validate": []}])


def test_a_0700_parent_made_before_is_opened_for_the_daemons_user_and_check_mode_only_says_so(open_base):
    token_dir = os.path.join(open_base, "etc-ray-verl")
    os.mkdir(token_dir, 0o700)  # as the head's first token write once made /etc/ray-verl
    p = daemon_files_under(open_base, "nobody")
    assert daemon_ctl.converge(p, Host(), check=True, systemd=False)["opened"] == [token_dir]
    assert os.stat(token_dir).st_mode & 0o777 == 0o700
    result = daemon_ctl.converge(p, Host(), check=False, systemd=False)
    assert result["changed"] and result["opened"] == [token_dir]
    assert os.stat(token_dir).st_mode & 0o777 == 0o701  # search only: the folder's listing stays root's
    read = subprocess.run(["cat", p["files"][0]["path"]], user="nobody", group="nogroup", extra_groups=[],
                          capture_output=True, text=True, check=False)
    assert read.returncode == 0 and read.stdout == "port 1\n"
    assert daemon_ctl.converge(p, Host(), check=False, systemd=False)["opened"] == []


def test_a_parent_another_user_owns_or_a_system_folder_is_named_never_opened(open_base, monkeypatch):
    theirs = os.path.join(open_base, "etc-ray-verl")
    os.mkdir(theirs, 0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(daemon_ctl.DaemonError, match=rf"user redis cannot enter {theirs} \(mode 0700, owner uid "
                                                     r"65534, group gid 65534\).*chmod o\+x"):
        daemon_ctl.converge(daemon_files_under(open_base, "redis"), Host(), check=False, systemd=False)
    assert os.stat(theirs).st_mode & 0o777 == 0o700
    os.chown(theirs, 0, 0)
    monkeypatch.setattr(daemon_files, "SYSTEM_DIRS", frozenset({theirs}))
    with pytest.raises(daemon_ctl.DaemonError, match="user nobody cannot enter"):
        daemon_ctl.converge(daemon_files_under(open_base, "nobody"), Host(), check=False, systemd=False)
    assert os.stat(theirs).st_mode & 0o777 == 0o700


def test_a_root_folder_of_the_users_own_group_is_named_with_g_x_never_opened_in_vain(open_base):
    # Its group bits, not the others', decide for a member of its group: o+x would change nothing, every run.
    conf = os.path.join(open_base, "etc-ray-verl")
    os.mkdir(conf, 0o700)
    os.chown(conf, 0, 65534)  # root:nogroup, nobody's own group
    with pytest.raises(daemon_ctl.DaemonError, match=rf"user nobody cannot enter {conf} .*chmod g\+x {conf}"):
        daemon_ctl.converge(daemon_files_under(open_base, "nobody"), Host(), check=True, systemd=False)
    assert os.stat(conf).st_mode & 0o777 == 0o700


def test_a_linked_parent_is_never_opened(open_base):
    real = os.path.join(open_base, "real")
    os.mkdir(real, 0o700)
    os.mkdir(os.path.join(real, "prometheus"))
    os.chmod(os.path.join(real, "prometheus"), 0o755)
    os.symlink(real, os.path.join(open_base, "etc-ray-verl"))  # the daemon's folder itself is reached through it
    with pytest.raises(daemon_ctl.DaemonError, match="is a symbolic link: refused"):
        daemon_ctl.converge(daemon_files_under(open_base, "nobody"), Host(), check=False, systemd=False)
    assert os.stat(real).st_mode & 0o777 == 0o700
