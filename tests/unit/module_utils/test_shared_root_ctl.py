"""module_utils/node/shared_root.py: the settings check, the mount command and fstab line, what makes a mount the
shared root."""

import os

import pytest
from ansible.module_utils.node import shared_root

NFS = {"path": "/private", "mode": "nfs", "source": "nfs1:/export/private", "nfs_options": "defaults,_netdev",
       "layout": {}, "node_name": "w1"}


def test_settings_keep_modes_as_text_and_refuse_paths_outside_the_root():
    layout = {"jobs": 755, "user": "1777"}
    assert shared_root.check_settings({**NFS, "layout": layout}) == {"jobs": "755", "user": "1777"}
    with pytest.raises(ValueError, match="^shared_root_path must be absolute"):
        shared_root.check_settings({**NFS, "path": "private"})
    for bad in ("/etc", "../etc", "a/../../b", "/"):
        with pytest.raises(ValueError, match="must be a relative path inside the shared root"):
            shared_root.check_settings({**NFS, "layout": {bad: "0755"}})
    with pytest.raises(ValueError, match="the mode must be octal like 0755"):
        shared_root.check_settings({**NFS, "layout": {"jobs": "0855"}})


def test_nfs_and_bind_mounts():
    assert shared_root.mount_command(NFS) == ["mount", "-t", "nfs", "-o", "defaults,_netdev", "nfs1:/export/private",
                                      "/private"]
    assert shared_root.fstab_line(NFS) == "nfs1:/export/private /private nfs defaults,_netdev 0 0"
    bind = {**NFS, "mode": "bind", "source": "/srv/share"}
    assert shared_root.mount_command(bind) == ["mount", "--bind", "/srv/share", "/private"]
    assert shared_root.fstab_line(bind) == "/srv/share /private none bind 0 0"


def test_what_is_not_the_shared_root(tmp_path):
    assert shared_root.not_shared(NFS, "") == "nothing is mounted there"
    assert shared_root.not_shared(NFS, "nfs1:/export/private nfs4") is None
    assert shared_root.not_shared(NFS, "/dev/sdb1 ext4") == "mounted: /dev/sdb1 ext4; expected nfs nfs1:/export/private"
    os.makedirs(tmp_path / "share")
    os.symlink(tmp_path / "share", tmp_path / "private")
    bind = {**NFS, "mode": "bind", "source": str(tmp_path / "share"), "path": str(tmp_path / "private")}
    assert shared_root.not_shared(bind, "/dev/sda1[/share] ext4") is None
    assert "expected a bind mount of" in shared_root.not_shared({**bind, "path": str(tmp_path)}, "/dev/sda1 ext4")


def test_the_mark_is_written_once_and_not_in_check_mode(tmp_path):
    p, actions = {**NFS, "path": str(tmp_path)}, []
    assert shared_root.read_mark(p, actions, check_mode=True) == "" and not os.listdir(tmp_path)
    mark = shared_root.read_mark(p, actions)
    assert len(mark) == 40 and shared_root.read_mark(p, actions) == mark and len(actions) == 2
