"""ray_node's `shared_root` option: a worker's shared root settled in the same call, before Ray (one call per worker
in up.yml). Processes and the two mount commands are faked; the shared root's files are real."""

import os

import pytest
from ray_node_helpers import run


@pytest.fixture
def mounts(host):
    """findmnt and mount on the fake host: a bind mount makes the path a link to the source."""
    ray_commands = host.run_command
    host.mounted = ""

    def run_command(args, environ_update=None, **kwargs):
        if args[0] == "findmnt":
            host.commands.append(list(args))
            return (0, host.mounted + "\n", "") if host.mounted else (1, "", "")
        if args[0] == "mount":
            host.commands.append(list(args))
            os.rmdir(args[-1])
            os.symlink(args[-2], args[-1])
            host.mounted = f"{args[-2]} ext4"
            return 0, "", ""
        return ray_commands(args, environ_update, **kwargs)

    host.run_command = run_command
    return host


@pytest.fixture
def worker(head, tmp_path):
    share = tmp_path / "share"
    share.mkdir()
    return {**head, "role": "worker", "node_ip": "10.0.0.11", "head_ip": "10.0.0.10",
            "shared_root": {"path": str(tmp_path / "private"), "mode": "bind", "source": str(share),
                            "persist": False, "layout": {"jobs": "0755"}, "node_name": "w1"}}


def started(host):
    return [c for c in host.commands if c[1:2] == ["start"]]


def test_the_shared_root_is_mounted_and_laid_out_before_ray_starts(mounts, worker, capsys):
    code, out = run(capsys, worker)
    assert code == 0 and out["changed"] is True and out["action"] == "start"
    kinds = [c[0] if c[0] in ("findmnt", "mount") else c[1] for c in mounts.commands]
    assert kinds.index("mount") < kinds.index("start")
    assert out["shared_root"]["mark"] and os.path.isdir(os.path.join(worker["shared_root"]["path"], "jobs"))
    assert "mount" in out["shared_root"]["actions"][0]


def test_a_healthy_worker_changes_nothing(mounts, worker, capsys):
    run(capsys, worker)
    code, out = run(capsys, worker)
    assert code == 0 and out["changed"] is False and out["action"] == "none"
    assert out["shared_root"]["actions"] == []


def test_an_unmounted_shared_root_under_a_healthy_ray_is_a_change(mounts, worker, capsys):
    run(capsys, worker)
    mounts.mounted = ""
    os.unlink(worker["shared_root"]["path"])
    os.mkdir(worker["shared_root"]["path"])
    code, out = run(capsys, {**worker, "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is True and out["action"] == "none"
    assert out["shared_root"]["actions"][0].startswith("mount ")


def test_other_storage_than_the_heads_fails_naming_the_node_and_ray_never_starts(mounts, worker, capsys):
    code, out = run(capsys, {**worker, "shared_root": {**worker["shared_root"], "mark": "the-heads-mark"}})
    assert code == 1 and out["msg"].startswith("w1: ") and "not the same storage" in out["msg"]
    assert "the-heads-mark" not in out["msg"] and started(mounts) == []


def test_the_same_storage_as_the_heads_starts(mounts, worker, capsys):
    first = run(capsys, worker)[1]["shared_root"]["mark"]
    code, out = run(capsys, {**worker, "shared_root": {**worker["shared_root"], "mark": first}})
    assert code == 0 and out["shared_root"]["mark"] == first


def test_no_shared_root_fails_before_ray_starts(mounts, worker, capsys):
    code, out = run(capsys, {**worker, "shared_root": {**worker["shared_root"], "mode": "none"}})
    assert code == 1 and out["msg"].startswith("w1: ") and "is not the shared root" in out["msg"]
    assert started(mounts) == []


def test_check_mode_with_nothing_mounted_and_mode_none_still_fails(mounts, worker, capsys):
    code, out = run(capsys, {**worker, "_ansible_check_mode": True,
                             "shared_root": {**worker["shared_root"], "mode": "none"}})
    assert code == 1 and "is not the shared root" in out["msg"]


def test_not_with_state_stopped(mounts, worker, capsys):
    code, out = run(capsys, {**worker, "state": "stopped"})
    assert code == 1 and "shared_root" in out["msg"] and started(mounts) == []


def test_a_plan_settles_the_shared_root_for_real_and_only_says_what_ray_would_do(mounts, worker, capsys):
    code, out = run(capsys, {**worker, "plan": True})
    assert code == 0 and out["changed"] is True and out["action"] == "start"
    assert started(mounts) == [] and mounts.mounted  # mounted, Ray left alone
    assert out["shared_root"]["actions"][0].startswith("mount ")
    assert not os.path.exists(worker["state_file"])


def test_a_plan_that_fails_on_rays_side_still_leaves_the_shared_root_mounted(mounts, worker, capsys):
    mounts.version = (0, "2.59.0\n", "")
    code, out = run(capsys, {**worker, "plan": True, "ray_version": "2.60.0"})
    assert code == 1 and "2.59.0" in out["msg"] and mounts.mounted and started(mounts) == []


def test_a_plan_in_check_mode_mounts_nothing(mounts, worker, capsys):
    code, out = run(capsys, {**worker, "plan": True, "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is True and not mounts.mounted and started(mounts) == []
