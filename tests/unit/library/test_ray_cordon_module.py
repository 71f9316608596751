"""library/ray_cordon.py run as Ansible runs it, on a fake Ray (tests/unit/conftest.py's `ray`): the file, the hold,
check mode, giving back, and a hold left without its file."""

import json
import os

import pytest
import ray_cordon
from ansible.module_utils.testing import patch_module_args

WORKERS = {"w1": "10.0.0.11"}


def run(capsys, ray_config, check=False, **args):
    args = {"ray_config": ray_config, "workers": WORKERS, **args}
    if check:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ray_cordon.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def cordon_path(ray_config):
    return os.path.join(ray_config["shared_root"], "cordons", "10.0.0.11.json")


def test_present_writes_the_file_and_holds_the_worker_once(ray, ray_config, capsys):
    code, out = run(capsys, ray_config, host="w1", why="flaky NIC", who="alice")
    assert code == 0 and out["changed"] and not out["existed"] and out["held"] == {"10.0.0.11": "CREATED"}
    assert out["lines"][0].startswith("10.0.0.11 (w1): cordoned by person alice at ")
    assert "[Ray: held]" in out["lines"][0]
    assert [g["name"] for g in ray.groups] == ["ray-verl-cordon-10.0.0.11-n-w1"]
    code, again = run(capsys, ray_config, host="10.0.0.11", why="other")
    assert code == 0 and not again["changed"] and again["existed"] and again["cordon"]["why"] == "flaky NIC"
    assert len(ray.groups) == 1


def test_check_mode_changes_nothing(ray, ray_config, capsys):
    code, out = run(capsys, ray_config, check=True, host="w1")
    assert code == 0 and out["changed"] and not os.path.exists(cordon_path(ray_config)) and ray.groups == []


def test_absent_gives_the_worker_back(ray, ray_config, capsys):
    run(capsys, ray_config, host="w1")
    code, out = run(capsys, ray_config, host="w1", state="absent")
    assert code == 0 and out["changed"] and out["lines"] == [] and ray.groups == []
    assert not os.path.exists(cordon_path(ray_config))
    code, out = run(capsys, ray_config, host="w1", state="absent")
    assert code == 0 and not out["changed"]


def test_a_hold_without_its_file_is_shown_then_removed(ray, ray_config, capsys):
    run(capsys, ray_config, host="w1")
    os.unlink(cordon_path(ray_config))  # another run gave it back while this hold was made
    code, out = run(capsys, ray_config, check=True, state="synced")
    orphan = "ray-verl-cordon-10.0.0.11-n-w1: a hold without a cordon file (the next up.yml or cordon.yml removes it)"
    assert code == 0 and out["lines"] == [orphan] and len(ray.groups) == 1
    code, out = run(capsys, ray_config, state="synced")
    assert code == 0 and out["changed"] and ray.groups == [] and out["lines"] == []


def test_an_unknown_host_fails_in_one_line(ray, ray_config, capsys):
    code, out = run(capsys, ray_config, host="head")
    assert code == 1 and out["msg"] == "host: 'head' is not a worker of this inventory (one of: w1)"


@pytest.mark.parametrize("junk", [999, 1000])
def test_a_cordons_folder_listed_only_in_part_gives_no_cordon_back(ray, ray_config, capsys, junk):
    """Issue 38 §3: past 1,000 files the listing is cut, and a sync that removed every hold it did not read gave a
    person's cordon back (`1.` sorts before `10`): now the sync fails naming the folder, and the hold stays."""
    run(capsys, ray_config, host="w1")
    folder = os.path.join(ray_config["shared_root"], "cordons")
    for i in range(junk):
        open(os.path.join(folder, f"1.note-{i}"), "w").close()
    code, out = run(capsys, ray_config, state="synced")
    if junk + 1 <= 1000:  # the whole folder read: the cordon stands, the junk is named
        assert code == 0 and len(ray.groups) == 1 and any("not a cordon file" in line for line in out["lines"])
        return
    assert code != 0 and out["msg"] == (f"{folder}: more than 1000 files: the cordons cannot all be read (remove what "
                                        "is not a cordon); no hold is changed")
    assert [g["name"] for g in ray.groups] == ["ray-verl-cordon-10.0.0.11-n-w1"]
    code, out = run(capsys, ray_config, host="w1", state="absent")  # nor a person's give-back, until it is tidied
    assert code != 0 and os.path.exists(cordon_path(ray_config)) and len(ray.groups) == 1
