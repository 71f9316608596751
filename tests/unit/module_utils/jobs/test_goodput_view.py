"""jobs/evidence/goodput.py's read helpers: a chain as status.yml and the regression report show it (view), and
the chains written last (recent); every record is read through StatusFile, and one the model refuses is unreadable."""

import json
import os

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.evidence import goodput

GOODPUT = {"wall_s": 660, "productive_s": 503, "detection_s": 60, "restart_s": 70, "recomputed_s": 20,
           "outages_s": 0, "pending_s": 7, "attempts": 2, "at": 1_767_225_600_000, "note": None}
BLAME = {"node_ip": "10.0.0.12", "host": "w2", "why": "node died",
         "evidence": {"file": "debug/nodes.json", "line": "node n2 (10.0.0.12) is DEAD; it ran 1 of its actors"}}


def put(root, sid, when=None, **fields):
    """A record whose status.json holds exactly fields (no model check: a test may shape it wrongly)."""
    directory = conventions.job_dir(root, sid)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "status.json"), "w", encoding="utf-8") as handle:
        json.dump({"submission_id": sid, **fields}, handle)
    if when is not None:
        os.utime(directory, (when, when))
    return directory


def chain(root, when=1000, last_state="SUCCEEDED", **first):
    put(root, "c", when, state="FAILED", final=True, attempts=["c-r1"], blame=[BLAME], goodput=GOODPUT, **first)
    put(root, "c-r1", when + 1, state=last_state, final=last_state != "RUNNING", attempt_of="c", attempt=1)


def test_a_chain_shows_its_newest_attempts_state_its_goodput_line_and_the_blame_of_each_attempt(tmp_path):
    root = str(tmp_path)
    chain(root)
    found = goodput.view(root, "c")
    assert found["state"] == "SUCCEEDED" and found["final"] is True and found["attempts"] == 2
    assert found["goodput"] == "goodput 76% (lost: pending 7 s, detection 60 s, restart 70 s, recomputed 20 s)"
    assert found["goodput"] == goodput.text(GOODPUT)  # the final line's words
    assert found["account"]["wall_s"] == 660 and found["account"]["productive_s"] == 503
    assert sum(v for k, v in found["account"].items() if k != "wall_s") == 660
    assert found["blame"] == [{"node_ip": "10.0.0.12", "why": "node died", "attempt": "c"}]
    assert found["unreadable"] == []


def test_a_chain_still_running_shows_no_goodput_yet(tmp_path):
    root = str(tmp_path)
    chain(root, last_state="RUNNING")
    found = goodput.view(root, "c")
    assert found["state"] == "RUNNING" and found["final"] is False
    assert found["goodput"] == "" and found["account"] is None


def test_a_job_of_one_attempt_has_no_goodput_line(tmp_path):
    root = str(tmp_path)
    put(root, "a", state="SUCCEEDED", final=True,
        goodput={**GOODPUT, "attempts": 1, "detection_s": 0, "restart_s": 0, "recomputed_s": 0})
    found = goodput.view(root, "a")
    assert found["state"] == "SUCCEEDED" and found["attempts"] == 1 and found["goodput"] == ""


def test_a_goodput_or_a_blame_of_the_wrong_shape_makes_the_record_unreadable_never_an_exception(tmp_path):
    root = str(tmp_path)
    put(root, "g", state="SUCCEEDED", final=True, goodput={**GOODPUT, "wall_s": "a lot"})
    put(root, "b", state="FAILED", final=True, blame=[{**BLAME, "why": "it looked at me"}])
    put(root, "n", state="FAILED", final=True, blame=[{**BLAME, "node_ip": "$(reboot)"}])
    for sid, field in (("g", "'goodput'"), ("b", "'blame'"), ("n", "'blame'")):
        found = goodput.view(root, sid)
        assert found["state"] is None and found["attempts"] == 0 and found["goodput"] == ""
        assert len(found["unreadable"]) == 1 and found["unreadable"][0].startswith(f"{sid}: ")
        assert field in found["unreadable"][0] and "\n" not in found["unreadable"][0]
        assert "$(reboot)" not in found["unreadable"][0] and "it looked at me" not in found["unreadable"][0]


def test_an_attempt_that_cannot_be_read_is_named_and_its_chain_still_shown(tmp_path):
    root = str(tmp_path)
    chain(root)
    with open(os.path.join(conventions.job_dir(root, "c-r1"), "status.json"), "w", encoding="utf-8") as handle:
        handle.write("{not json")
    found = goodput.view(root, "c")
    assert found["attempts"] == 1 and found["state"] is None and found["goodput"] == ""
    assert found["blame"][0]["node_ip"] == "10.0.0.12"
    assert found["unreadable"] == [f"c-r1: {conventions.job_dir(root, 'c-r1')}/status.json: is not JSON"]


def test_recent_reads_the_chains_written_last_newest_first_each_once(tmp_path):
    root = str(tmp_path)
    put(root, "old", 100, state="SUCCEEDED", final=True)
    chain(root, when=1000)
    put(root, "mid", 500, state="FAILED", final=True)
    put(root, "new", 2000, state="RUNNING")
    os.makedirs(os.path.join(root, "jobs", ".open"))  # the open index: no record
    os.symlink(conventions.job_dir(root, "old"), os.path.join(root, "jobs", "link"))  # never read through
    found, note = goodput.recent(root, 3)
    assert note is None
    assert [c["submission_id"] for c in found] == ["new", "c", "mid"]  # c-r1's write brings its chain up
    assert found[1]["attempts"] == 2 and found[1]["goodput"].startswith("goodput 76%")
    found, _ = goodput.recent(root, 100)
    assert [c["submission_id"] for c in found] == ["new", "c", "mid", "old"]
    assert goodput.recent(root, 0) == ([], None)


def test_recent_on_a_share_without_jobs_or_with_a_linked_jobs_folder(tmp_path):
    assert goodput.recent(str(tmp_path / "none"), 10) == ([], None)
    os.makedirs(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", tmp_path / "jobs")
    found, note = goodput.recent(str(tmp_path), 10)
    assert found == [] and note.endswith("jobs: is a symlink, not read")
