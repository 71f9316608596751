"""Cordons: the typed file on the shared root (cordons/cordons.py) and what Ray is told of it (cordons/cordons.py)."""

import json
import multiprocessing
import os

import pytest
from ansible.module_utils.base import files
from ansible.module_utils.cordons import cordons


def entry(ip="198.18.0.12", **kw):
    return cordons.make(ip, by=kw.pop("by", "person"), now_ms=kw.pop("now_ms", 1_790_000_000_000), **kw)


def test_add_writes_one_typed_file_and_keeps_the_first(tmp_path):
    created, kept = cordons.add(str(tmp_path), entry(who="alice", why="flaky\nNIC \x1b[2J"))
    assert created and kept["why"] == "flaky NIC"
    assert json.loads((tmp_path / "cordons" / "198.18.0.12.json").read_text())["who"] == "alice"
    created, kept = cordons.add(str(tmp_path), entry(who="bob", by="retry", job="sft-1"))
    assert not created and kept["who"] == "alice"  # the second run is told; the first cordon stays
    assert oct(os.stat(tmp_path / "cordons").st_mode & 0o777) == "0o755"


def test_remove_and_read_all(tmp_path):
    root = str(tmp_path)
    cordons.add(root, entry("198.18.0.11"))
    cordons.add(root, entry("198.18.0.12", host="w2", by="retry", job="sft-r0"))
    found, problems = cordons.read_all(root)
    assert sorted(found) == ["198.18.0.11", "198.18.0.12"] and problems == []
    assert cordons.line(found["198.18.0.12"]).startswith("198.18.0.12 (w2): cordoned by retry for sft-r0 at ")
    assert cordons.remove(root, "198.18.0.11") and not cordons.remove(root, "198.18.0.11")
    assert sorted(cordons.read_all(root)[0]) == ["198.18.0.12"]


@pytest.mark.parametrize("text, words", [
    ("{", "the worker counts as cordoned"),
    (json.dumps({"node_ip": "198.18.0.12", "since_ms": 1, "by": "robot"}), "by"),
    (json.dumps({"node_ip": "198.18.0.13", "since_ms": 1, "by": "person"}), "names another worker"),
    (json.dumps({"node_ip": "198.18.0.12", "since_ms": 10 ** 400, "by": "person"}), "counts as cordoned"),
])
def test_a_bad_file_counts_as_cordoned(tmp_path, text, words):
    (tmp_path / "cordons").mkdir()
    (tmp_path / "cordons" / "198.18.0.12.json").write_text(text)
    found, problems = cordons.read_all(str(tmp_path))
    assert found == {"198.18.0.12": None} and words in problems[0]
    assert "198.18.0.12" in cordons.plan(set(found), [worker("198.18.0.12", "a" * 56)], [])["create"][0]


def test_odd_names_and_links_are_refused(tmp_path):
    (tmp_path / "cordons").mkdir()
    (tmp_path / "cordons" / "notes.txt").write_text("x")
    os.symlink("/etc/passwd", tmp_path / "cordons" / "198.18.0.9.json")
    found, problems = cordons.read_all(str(tmp_path))
    assert found == {"198.18.0.9": None} and len(problems) == 2
    with pytest.raises(cordons.CordonError, match="node_ip: '../x' is not an IP address"):
        cordons.path(str(tmp_path), "../x")


def test_a_symlinked_folder_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "cordons")
    with pytest.raises(files.UnsafeFile):
        cordons.add(str(tmp_path), entry())
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _cordon(root, ip, who):
    return cordons.add(root, cordons.make(ip, by="person", who=who))[0]


def test_concurrent_cordons_lose_none(tmp_path):
    """Eight processes cordon two workers at once: one wins each worker, both files are whole, none is lost."""
    root = str(tmp_path)
    jobs = [(root, ip, f"user{i}") for i in range(8) for ip in ("198.18.0.11", "198.18.0.12")]
    with multiprocessing.get_context("fork").Pool(8) as pool:
        won = pool.starmap(_cordon, jobs)
    assert sum(won) == 2
    found, problems = cordons.read_all(root)
    assert sorted(found) == ["198.18.0.11", "198.18.0.12"] and problems == []
    assert [n for n in os.listdir(tmp_path / "cordons") if n.startswith(".tmp-")] == []


def worker(ip, node_id, gpus=2, state="ALIVE", start=1):
    return {"node_ip": ip, "node_id": node_id, "state": state, "is_head_node": False, "start_time_ms": start,
            "resources_total": {"CPU": 4.0, "GPU": float(gpus), "worker_node": 1.0}}


def test_plan_holds_the_cordoned_and_replaces_stale_holds():
    old, new = "a" * 56, "b" * 56
    nodes = [worker("198.18.0.12", old, state="DEAD"), worker("198.18.0.12", new, start=5),
             worker("198.18.0.11", "c" * 56)]
    groups = [{"name": cordons.name("198.18.0.12", old), "state": "CREATED", "placement_group_id": "p1"},
              {"name": "someone-else", "state": "CREATED", "placement_group_id": "p2"},
              {"name": cordons.name("198.18.0.11", "c" * 56), "state": "PENDING", "placement_group_id": "p3"}]
    changes = cordons.plan({"198.18.0.12", "198.18.0.13"}, nodes, groups)
    assert [ip for ip, _ in changes["create"]] == ["198.18.0.12"] and changes["create"][0][1]["node_id"] == new
    assert [g["placement_group_id"] for g in changes["remove"]] == ["p1", "p3"]  # stale node; uncordoned
    assert changes["absent"] == ["198.18.0.13"]
    assert cordons.wanted_bundle(nodes[1]) == {"worker_node": 1.0, "GPU": 2.0, "CPU": 4.0}
    assert cordons.wanted_bundle(worker("x", "d", gpus=0)) == {"worker_node": 1.0, "CPU": 4.0}  # a CPU-only worker


def test_plan_keeps_a_current_hold():
    nodes = [worker("198.18.0.12", "b" * 56)]
    groups = [{"name": cordons.name("198.18.0.12", "b" * 56), "state": "CREATED", "placement_group_id": "p"}]
    assert cordons.plan({"198.18.0.12"}, nodes, groups) == {"create": [], "remove": [], "absent": [],
                                                                 "held": {"198.18.0.12": "CREATED"}}


def test_wait_held_polls_until_placed():
    states = iter(["PENDING", "PENDING", "CREATED"])
    clock = iter(range(100)).__next__
    seen = cordons.wait_held(lambda: [{"name": cordons.name("1.2.3.4", "n"), "state": next(states)}],
                                 ["1.2.3.4"], 30, clock=clock, sleep=lambda s: None)
    assert seen == {"1.2.3.4": "CREATED"}
    left = cordons.wait_held(list, ["1.2.3.4"], 0, clock=iter(range(100)).__next__, sleep=lambda s: None)
    assert left == {"1.2.3.4": "missing"}


def test_a_line_is_printable_whatever_the_file_holds(tmp_path):
    (tmp_path / "cordons").mkdir()
    text = {"node_ip": "198.18.0.12", "since_ms": 1_790_000_000_000, "by": "person",
            "why": "bad\x1b]52;c;AAAA\x07\nGPU"}
    (tmp_path / "cordons" / "198.18.0.12.json").write_text(json.dumps(text))
    found, _ = cordons.read_all(str(tmp_path))
    shown = cordons.line(found["198.18.0.12"], "w2")
    assert shown.startswith("198.18.0.12 (w2): cordoned by person at 2026-") and shown.endswith(": bad GPU"), shown


def test_every_alive_node_of_a_cordoned_address_is_held():
    """Ray lists a replaced node ALIVE beside the new one for a while: work may land on either, so both are held."""
    nodes = [worker("198.18.0.12", "a" * 56, start=1), worker("198.18.0.12", "b" * 56, start=5)]
    changes = cordons.plan({"198.18.0.12"}, nodes, [])
    assert sorted(n["node_id"][0] for _, n in changes["create"]) == ["a", "b"]
    stale = [{"name": cordons.name("198.18.0.12", "c" * 56), "state": "CREATED"}]  # an older node's hold
    states = cordons.wait_held(lambda: stale, ["198.18.0.12"], 0, clock=iter(range(9)).__next__,
                                   sleep=lambda s: None, nodes=nodes)
    assert states == {"198.18.0.12": "missing"}  # it never stands in for the current nodes' holds


def test_sync_plans_again_from_what_another_run_changed():
    """A person gives the worker back while this run makes its hold: the second look removes the orphan hold."""
    nodes, groups, files_ = [worker("198.18.0.12", "b" * 56)], [], [{"198.18.0.12"}, set(), set()]

    def apply_changes(address, changes):
        for ip, node in changes["create"]:
            groups.append({"name": cordons.name(ip, node["node_id"]), "state": "CREATED",
                           "placement_group_id": "p"})
        for group in changes["remove"]:
            groups.remove(group)

    last = cordons.sync(lambda: files_.pop(0) if len(files_) > 1 else files_[0], nodes, lambda: list(groups),
                            "h:6379", apply_changes=apply_changes)
    assert groups == [] and last["changed"] and last["create"] == [] and last["remove"] == []
    checked = cordons.sync(lambda: {"198.18.0.12"}, nodes, list, "h:6379", check=True,
                               apply_changes=lambda *a: pytest.fail("check mode applied a change"))
    assert checked["changed"] and [ip for ip, _ in checked["create"]] == ["198.18.0.12"]
