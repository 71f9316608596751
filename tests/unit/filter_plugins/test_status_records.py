"""filter_plugins/cluster_filters.py ray_status_summary's records section (status.yml): each chain's state, goodput
and blame from ray_cluster_info's records; a part of any other shape is shown as unreadable, never an exception."""

import pytest
from cluster_filters import ray_status_summary

CLUSTER = {"nodes": [], "ray_version": "2.60.0", "jobs": []}
LINE = "goodput 76% (lost: pending 7 s, detection 60 s, restart 70 s, recomputed 20 s)"
CHAIN = {"submission_id": "c", "state": "SUCCEEDED", "final": True, "attempts": 2, "goodput": LINE,
         "account": {"wall_s": 660}, "unreadable": [],
         "blame": [{"node_ip": "10.0.0.12", "why": "node died", "attempt": "c"}]}


def records(cluster):
    lines = ray_status_summary(cluster, "http://h:8265", "/private", {})
    heading = next(i for i, line in enumerate(lines) if line.startswith("job records"))
    return lines[heading:]


def test_without_records_asked_there_is_no_records_section():
    lines = ray_status_summary(CLUSTER, "http://h:8265", "/private", {})
    assert not any(line.startswith("job records") for line in lines)


def test_a_chain_shows_its_state_attempts_goodput_and_blame():
    one = {"submission_id": "a", "state": "RUNNING", "final": False, "attempts": 1, "goodput": "", "blame": [],
           "unreadable": []}
    assert records({**CLUSTER, "records": [CHAIN, one], "records_note": None}) == [
        "job records, the newest 2 chains (by their last write):",
        f"  c: SUCCEEDED, 2 attempts; {LINE}",
        "    blamed: 10.0.0.12: node died (in c)",
        "  a: RUNNING"]


def test_records_are_shown_when_the_cluster_is_unreachable():
    lines = ray_status_summary({"failed": True, "msg": "refused", "records": [CHAIN]}, "http://h:8265", "/p", {})
    assert lines[1] == "cluster: UNREACHABLE (refused)" and f"  c: SUCCEEDED, 2 attempts; {LINE}" in lines


def test_an_unreadable_record_is_said_with_why():
    bad = {"submission_id": "g", "state": None, "attempts": 0, "goodput": "", "blame": [],
           "unreadable": ["g: /private/jobs/g/status.json: field 'goodput': field 'wall_s' must be an integer"]}
    assert records({**CLUSTER, "records": [bad], "records_note": "x: cannot be listed\n(EIO)"}) == [
        "job records, the newest 1 chains (by their last write):",
        "  not listed: x: cannot be listed (EIO)",
        "  g: unreadable",
        "    unreadable: g: /private/jobs/g/status.json: field 'goodput': field 'wall_s' must be an integer"]


@pytest.mark.parametrize("chain", [
    None, "c", 7, [], {"state": "SUCCEEDED"}, {"submission_id": "../etc"},
    {"submission_id": "c", "state": 5, "attempts": "2", "goodput": {"wall_s": 1}, "blame": "10.0.0.1",
     "unreadable": "all"},
    {"submission_id": "c", "state": "FAILED\n\x1b[31mRED", "attempts": 3, "goodput": "goodput 1%\nforged line",
     "blame": [None, {"node_ip": ["x"], "why": None}, {}], "unreadable": [None, 3]},
])
def test_a_chain_of_any_shape_never_breaks_the_summary(chain):
    lines = records({**CLUSTER, "records": [chain], "records_note": None})
    assert all(isinstance(line, str) and "\n" not in line and "\x1b" not in line for line in lines)
    assert len(lines) >= 2 and lines[1].startswith("  ")
    if not isinstance(chain, dict) or chain.get("submission_id") != "c":
        assert lines[1:] == ["  ?: unreadable (not a chain's summary)"]


def test_records_that_are_no_list_show_no_chain():
    assert records({**CLUSTER, "records": "all of them"}) == ["job records, the newest 0 chains (by their last write):"]
