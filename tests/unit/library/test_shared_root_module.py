"""library/shared_root.py run as Ansible runs it; findmnt and mount are faked, the files are real."""

import json
import os

import pytest
import shared_root
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args


class Host:
    """What findmnt shows and which mount commands ran."""

    def __init__(self):
        self.mounted = ""
        self.commands = []

    def run_command(self, args, **kwargs):
        self.commands.append(list(args))
        if args[0] == "findmnt":
            return (0, self.mounted + "\n", "") if self.mounted else (1, "", "")
        if args[0] == "mount":
            os.rmdir(args[-1])  # a bind mount: the path becomes the source itself
            os.symlink(args[-2], args[-1])
            self.mounted = f"{args[-2]} ext4"
            return 0, "", ""
        raise AssertionError(args)


@pytest.fixture
def host(monkeypatch):
    fake = Host()
    monkeypatch.setattr(AnsibleModule, "run_command", lambda module, args, **kw: fake.run_command(args, **kw))
    return fake


@pytest.fixture
def bind(tmp_path):
    return {"path": str(tmp_path / "private"), "mode": "bind", "source": str(tmp_path / "share"),
            "persist": True, "fstab": str(tmp_path / "fstab"),
            "layout": {"common": "0755", "common/code": "0755", "jobs": "0755", "user": "1777"}, "node_name": "w1"}


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        shared_root.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_mounts_records_lays_out_and_marks_then_changes_nothing(host, bind, capsys):
    code, out = run(capsys, bind)
    assert code == 0 and out["changed"] is True
    assert host.commands[1] == ["mount", "--bind", bind["source"], bind["path"]]
    for sub, mode in bind["layout"].items():
        assert os.stat(os.path.join(bind["path"], sub)).st_mode & 0o7777 == int(mode, 8)
    with open(bind["fstab"], encoding="utf-8") as handle:
        assert handle.read() == f"{bind['source']} {bind['path']} none bind 0 0\n"
    assert len(out["mark"]) == 40
    host.commands.clear()
    code, again = run(capsys, bind)
    assert code == 0 and again["changed"] is False and again["actions"] == [] and again["mark"] == out["mark"]
    assert [c[0] for c in host.commands] == ["findmnt"]


def test_a_node_without_the_mount_fails_naming_itself(host, bind, capsys):
    code, out = run(capsys, {**bind, "mode": "none"})
    assert code == 1
    assert out["msg"].startswith(f"w1: {bind['path']} is not the shared root (nothing is mounted there)")


def test_other_storage_mounted_there_is_refused(host, bind, tmp_path, capsys):
    os.makedirs(bind["path"])
    os.makedirs(bind["source"])
    host.mounted = "/dev/sdb1 ext4"
    code, out = run(capsys, bind)
    assert code == 1 and "expected a bind mount of" in out["msg"] and "/dev/sdb1" in out["msg"]
    code, out = run(capsys, {**bind, "mode": "nfs", "source": "nfs1:/export"})
    assert code == 1 and "expected nfs nfs1:/export" in out["msg"]


def test_check_mode_changes_nothing(host, bind, capsys):
    code, out = run(capsys, {**bind, "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is True and out["mark"] == ""
    assert [c[0] for c in host.commands] == ["findmnt"]
    assert not os.path.exists(bind["path"]) and not os.path.exists(bind["fstab"])


def test_an_existing_fstab_line_for_the_path_is_replaced_once(host, bind, capsys):
    with open(bind["fstab"], "w", encoding="utf-8") as handle:
        handle.write(f"/dev/sda1 / ext4 defaults 0 1\nold:/x {bind['path']} nfs defaults 0 0\n")
    run(capsys, bind)
    with open(bind["fstab"], encoding="utf-8") as handle:
        assert handle.read() == f"/dev/sda1 / ext4 defaults 0 1\n{bind['source']} {bind['path']} none bind 0 0\n"


@pytest.mark.parametrize("bad,field", [({"layout": {"../etc": "0755"}}, "shared_root_layout"),
                                       ({"layout": {"jobs": "777; rm"}}, "shared_root_layout")])
def test_bad_settings_are_refused_naming_the_setting(host, bind, capsys, bad, field):
    code, out = run(capsys, {**bind, **bad})
    assert code == 1 and out["msg"].startswith(field) and host.commands == []


def test_a_code_directory_someone_else_owns_is_refused(host, bind, capsys, monkeypatch):
    run(capsys, bind)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    code, out = run(capsys, bind)
    assert code == 1 and "common belongs to uid" in out["msg"] and "only its owner may write it" in out["msg"]
    # World-writable directories (user/) may belong to anyone.
    code, out = run(capsys, {**bind, "layout": {"user": "1777"}})
    assert code == 0
