"""module_utils/jobs/blame.py: each source of blame on what the record holds (a hang's processes.json, Ray's node
table, the collected logs in Ray 2.60's, gloo's and NCCL's own words), and the evidence that blames no node."""

import json
import os
import time

import pytest
from ansible.module_utils.jobs import blame, evidence, stacks
from ansible.module_utils.jobs.status import BLAME_WHY, JobStatus
from ray_job_harness import RecordJob

W1, W2, W3 = "198.18.0.11", "198.18.0.12", "198.18.0.13"
NODES = [{"node_id": "aa11", "node_ip": W1, "node_name": "w1", "state": "ALIVE"},
         {"node_id": "bb22", "node_ip": W2, "node_name": W2, "state": "ALIVE"},
         {"node_id": "cc33", "node_ip": W3, "node_name": "w3", "state": "ALIVE"}]
DUMP = "debug/stacks/20261126T163745.275Z"
# The lab's hung SFT (two ranks, one SIGSTOPped), as stacks.dump keeps its processes.
RANKS = [
    {"role": "driver", "name": "driver", "pid": 5758, "node_ip": W1, "node_id": "aa11", "state": "RUNNING",
     "stack": "taken", "waits": "ray", "in": "get_objects", "what": "waits in ray.get", "why": None,
     "profiling_off": False, "file": f"{DUMP}/{W1}-5758-driver.txt"},
    {"role": "actor", "name": "TrainingWorker", "pid": 5932, "node_ip": W1, "node_id": "aa11", "state": "ALIVE",
     "stack": "taken", "waits": "collective", "in": "all_gather_single", "what": "waits in all_gather_single",
     "why": None, "profiling_off": False, "file": f"{DUMP}/{W1}-5932-TrainingWorker.txt"},
    {"role": "actor", "name": "TrainingWorker", "pid": 2368, "node_ip": W2, "node_id": "bb22", "state": "ALIVE",
     "stack": "none", "waits": None, "in": None, "what": None,
     "why": "py-spy failed (HTTP 500): Error: Failed to get stack traces", "profiling_off": False,
     "file": f"{DUMP}/{W2}-2368-TrainingWorker.txt"},
]
# Ray 2.60's raylet (the OOM killer), its core worker and GCS (a dead node), torch 2.13's gloo, NCCL.
OOM = ("ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node running low on memory. Memory on "
       f"the node (IP: {W3}, ID: cc33) was 30.12GB used / 31.00GB limit (0.971613); OOM kill reason: threshold")
TASK_NODE = (f"Task failed because the node it was running on is dead or unavailable. Node IP: {W3}, node ID: cc33. "
             "This can happen if the node was preempted, had a hardware failure, or its raylet crashed unexpectedly.")
ACTOR_NODE = "The actor died because its node has died. Node Id: cc33"
GLOO = (f"RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
        f"peer rank 1 ([{W2}]:41187). This is typically caused by a remote worker crashing. Check the logs of the "
        "remote worker before reporting an error. GLHF!")
GLOO_OLD = f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [{W2}]:28735"
NCCL = "misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer w3<51234>"
NCCL_IB = (f"transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from peer {W3}<60811> with status=12 "
           "opcode=0 len=0 vendor err 129 (Recv)")


def found(*args, **kwargs):
    return [(ip, why) for ip, why, _, _ in blame.from_logs(*args, **kwargs)]


# ---------------------------------------------------------------- the stacks


def test_the_rank_that_cannot_be_read_while_the_other_waits_in_a_collective_names_its_node():
    [(ip, why, where, line)] = blame.from_stacks([blame._rank(r) for r in RANKS], DUMP)
    assert (ip, why, where) == (W2, BLAME_WHY["unreadable"], RANKS[2]["file"])
    assert line == ("TrainingWorker pid 2368 on 198.18.0.12: no stack (py-spy failed (HTTP 500): Error: Failed to get "
                    "stack traces); 1 other TrainingWorker waits in all_gather_single")


def test_the_rank_that_is_elsewhere_while_the_other_waits_in_a_collective_names_its_node():
    elsewhere = {**RANKS[2], "stack": "taken", "waits": "data", "in": "_next_data", "what": "loads data (DataLoader)",
                 "why": None}
    [(ip, why, _, line)] = blame.from_stacks([blame._rank(r) for r in (*RANKS[:2], elsewhere)], DUMP)
    assert (ip, why) == (W2, BLAME_WHY["elsewhere"]) and ": loads data (DataLoader); 1 other" in line


@pytest.mark.parametrize("change", [
    {"why": "403: profiling is off on the head", "profiling_off": True},  # the head refused: no node's fault
    {"stack": "taken", "waits": "collective", "in": "all_gather_single", "why": None},  # all wait: no one holds it
    {"name": "RolloutWorker"},  # another class: not a rank of the collective waited in
])
def test_stacks_that_point_at_no_rank_blame_none(change):
    assert blame.from_stacks([blame._rank(r) for r in (*RANKS[:2], dict(RANKS[2], **change))], DUMP) == []


def test_an_index_row_is_data_its_address_and_file_checked():
    odd = dict(RANKS[2], node_ip="not an address")
    assert blame.from_stacks([blame._rank(r) for r in (*RANKS[:2], odd)], DUMP) == []
    outside = dict(RANKS[2], file="../../etc/passwd")
    [(_, _, where, _)] = blame.from_stacks([blame._rank(r) for r in (*RANKS[:2], outside)], DUMP)
    assert where == DUMP


def test_the_unread_rank_the_driver_waits_on_while_its_peer_is_back_in_rays_loop_names_its_node():
    """As on the lab: the rank is stopped between two steps, its peer finished the step and went back to Ray's loop,
    the driver waits in ray.get for the stopped one."""
    idle = dict(RANKS[1], waits=None, **{"in": "Worker.main_loop"}, what="in Worker.main_loop")
    [(ip, why, where, line)] = blame.from_stacks([blame._rank(r) for r in (RANKS[0], idle, RANKS[2])], DUMP)
    assert (ip, why, where) == (W2, BLAME_WHY["unanswered"], RANKS[2]["file"])
    assert "the driver waits in ray.get and 1 other TrainingWorker(s) were read" in line
    driver_busy = dict(RANKS[0], waits=None, what="in fit")
    assert blame.from_stacks([blame._rank(r) for r in (driver_busy, idle, RANKS[2])], DUMP) == []
    unread_too = dict(idle, stack="none", what=None, why="py-spy failed")
    assert blame.from_stacks([blame._rank(r) for r in (RANKS[0], unread_too, RANKS[2])], DUMP) == []  # none read


def test_most_ranks_elsewhere_blame_none():
    third = dict(RANKS[2], pid=2369, node_ip=W3)
    assert blame.from_stacks([blame._rank(r) for r in (*RANKS, third)], DUMP) == []  # two of three not waiting


def test_the_dump_index_is_read_from_the_record_as_data(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    folder = tmp_path / "j-1" / DUMP
    folder.mkdir(parents=True)
    stall = JobStatus("j-1", stall={"stacks": DUMP}).stall
    assert blame.read_ranks(job, stall) == []  # a dump of an older version: no index
    (folder / stacks.INDEX).write_text(json.dumps([*RANKS, "a row", {"pid": 10 ** 400, "role": ["x"]}]))
    ranks = blame.read_ranks(job, stall)
    assert [r["pid"] for r in ranks] == [5758, 5932, 2368, None] and ranks[3]["role"] is None
    for bad in ("debug/stacks/../../etc", "/etc/passwd", "debug/stacks", None, 7):
        assert blame.read_ranks(job, JobStatus("j-1", stall={"stacks": bad}).stall) == [], bad
    (folder / stacks.INDEX).unlink()
    os.symlink(tmp_path / "elsewhere.json", folder / stacks.INDEX)
    (tmp_path / "elsewhere.json").write_text(json.dumps(RANKS))
    assert blame.read_ranks(job, stall) == []  # never through a symlink
    (folder / stacks.INDEX).unlink()
    (folder / stacks.INDEX).write_text("{not json")
    assert blame.read_ranks(job, stall) == []


# ---------------------------------------------------------------- the node table


def test_a_dead_node_that_ran_the_jobs_actors_or_driver_is_blamed():
    nodes = [dict(NODES[0], state="DEAD"), dict(NODES[1], state="DEAD"), dict(NODES[2], state="DEAD")]
    actors = [{"job_id": "07000000", "node_id": "bb22"}, {"job_id": "07000000", "node_id": "bb22"},
              {"job_id": "01000000", "node_id": "cc33"}]  # cc33 ran another job's actor only
    blamed = blame.from_node_table(nodes, actors, "07000000", "aa11", 1000, 2000)
    assert [(ip, why) for ip, why, _, _ in blamed] == [(W1, "node died"), (W2, "node died")]
    assert blamed[0][2:] == ("debug/nodes.json", "node aa11 (198.18.0.11) is DEAD; it ran the driver")
    assert blamed[1][3] == "node bb22 (198.18.0.12) is DEAD; it ran 2 of its actors"


def test_lists_of_any_shape_are_data():
    actors = [{"job_id": "07000000", "node_id": ["bb22"]}, "a row", 5, {"job_id": "07000000", "node_id": "bb22"}]
    nodes = [{"node_id": ["x"], "node_ip": W1, "state": "DEAD"}, "node", dict(NODES[1], state="DEAD", node_name=[1])]
    assert [ip for ip, _, _, _ in blame.from_node_table(nodes, actors, "07000000", None, 1, 2)] == [W2]
    assert blame.from_node_table("not a list", {"a": 1}, "07000000", None, 1, 2) == []
    assert found([("d", ACTOR_NODE.replace("cc33", "x"))], nodes) == []
    [entry] = blame.entries([(W2, "node died", "f", "l")], nodes, lambda obj: obj)
    assert entry.host is None


def test_a_node_alive_or_dead_before_the_job_or_long_after_it_is_not_blamed():
    actors = [{"job_id": "07000000", "node_id": "bb22"}]
    assert blame.from_node_table(NODES, actors, "07000000", "aa11", 1000, 2000) == []
    before = [dict(NODES[1], state="DEAD", end_time_ms=999)]
    after = [dict(NODES[1], state="DEAD", end_time_ms=2000 + blame.DEATH_GRACE_MS + 1)]
    during = [dict(NODES[1], state="DEAD", end_time_ms=2500)]
    assert blame.from_node_table(before, actors, "07000000", None, 1000, 2000) == []
    assert blame.from_node_table(after, actors, "07000000", None, 1000, 2000) == []
    assert len(blame.from_node_table(during, actors, "07000000", None, 1000, 2000)) == 1


# ---------------------------------------------------------------- the logs


@pytest.mark.parametrize(("line", "ip", "why"), [
    (OOM, W3, "out of memory kill"),
    (TASK_NODE, W3, "node died"),
    (ACTOR_NODE, W3, "node died"),
    (GLOO, W2, "peer named by gloo"),
    (GLOO_OLD, W2, "peer named by gloo"),
    (NCCL, W3, "peer named by NCCL"),  # a name: Ray's node_name says its address
    (NCCL_IB, W3, "peer named by NCCL"),
])
def test_each_log_line_that_names_a_node(line, ip, why):
    text = f"INFO all good\n{line}\nTraceback (most recent call last):\n"
    [(got_ip, got_why, where, excerpt)] = blame.from_logs([("debug/logs/bb22-worker-1.err", text)], NODES)
    assert (got_ip, got_why, where) == (ip, why, "debug/logs/bb22-worker-1.err")
    assert "\n" not in excerpt and len(excerpt) <= blame.EVIDENCE_WIDTH


def test_a_peer_is_evidence_only_when_asked_and_the_most_named_peer_wins():
    assert found([("a.err", GLOO)], NODES, peers=False) == []
    # Rank 2 died: ranks 0 and 1 name it; rank 1's death after it made rank 0 name rank 1 too.
    sources = [("r0.err", f"{GLOO.replace(W2, W3)}\n{GLOO}\n"), ("r1.err", GLOO.replace(W2, W3))]
    assert found(sources, NODES) == [(W3, "peer named by gloo")]


@pytest.mark.parametrize("line", [
    "Connection closed by peer [127.0.0.1]:1234",  # loopback: no node
    "socketProgress: Connection closed by remote peer unknown-host<51234>",  # a name no node has
    "The actor died because its node has died. Node Id: ffff",  # a node the table does not know
    "Memory on the node (IP: not-an-ip, ID: x) was 1GB used",
    "ValueError: the user's own error at 198.18.0.12",
])
def test_a_line_that_names_no_known_node_blames_none(line):
    assert found([("logs/driver.log", line)], NODES) == []


def test_only_an_address_status_json_holds_is_a_nodes():
    assert blame._address("2001:db8::1") == "2001:db8::1" and blame._address(W1) == W1
    for bad in ("fe80::1%eth0", "::1", "127.0.0.1", "0.0.0.0", "w1", "", None, 7):
        assert blame._address(bad) is None, bad
    scoped = [dict(NODES[1], state="DEAD", node_ip="fe80::1%eth0")]
    assert blame.from_node_table(scoped, [{"job_id": "07000000", "node_id": "bb22"}], "07000000", None, 1, 2) == []


def test_reading_the_logs_is_linear_in_their_size():
    hostile = ["Memory on the node (IP: " * 40_000, "Connection closed by peer rank 1 ([" * 30_000,
               "Got completion from peer " + "a" * 1_000_000, ("Node IP: " + "1" * 50) * 20_000]
    for text in hostile:
        started = time.monotonic()
        found([("logs/driver.log", text)], NODES)
        assert time.monotonic() - started < 2


# ---------------------------------------------------------------- the whole: find, entries, the final line


def failed(diagnosis="unknown", reason=None, **fields):
    return JobStatus("j-1", state="FAILED", final=True, reason=reason, diagnosis={"kind": diagnosis}, **fields)


SUMMARY = {"job_id": "07000000", "driver_node_id": "aa11", "start_time": 1000, "end_time": 2000}


@pytest.mark.parametrize(("diagnosis", "text"), [
    ("hydra_config", "Could not override 'trainer.save_frq'.\nKey 'save_frq' is not in struct\n"),
    ("import_error", "ModuleNotFoundError: No module named 'verl.trainer.x'\n"),
    ("unknown", f"ValueError: bad batch on {W2}\n{GLOO}\n"),  # a user's error: the job's end broke the connections
    ("cuda_oom", f"torch.OutOfMemoryError: CUDA out of memory.\n{GLOO}\n"),
])
def test_evidence_that_points_at_no_node_blames_none(tmp_path, diagnosis, text):
    job = RecordJob(str(tmp_path / "j-1"))
    assert blame.find(job, failed(diagnosis), SUMMARY, NODES, "[]", [("logs/driver.log", text)]) == []


def test_a_job_that_did_not_fail_or_never_ran_blames_none(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    sources = [("logs/driver.log", OOM)]
    for status in (JobStatus("j-1", state="SUCCEEDED"), JobStatus("j-1", state="STOPPED", reason="STOPPED_BY_USER"),
                   failed("resources_pending", reason="PENDING_TIMEOUT")):
        assert blame.find(job, status, SUMMARY, NODES, [], sources) == []


def test_a_hang_ray_job_stopped_is_blamed_from_its_stacks_not_from_what_the_stop_broke(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    folder = tmp_path / "j-1" / DUMP
    folder.mkdir(parents=True)
    (folder / stacks.INDEX).write_text(json.dumps(RANKS))
    status = failed("hung", reason="HUNG", stall={"stacks": DUMP})
    sources = [("debug/logs/aa11-worker-1.err", GLOO.replace(W2, W1))]  # the stop closed rank 0's connections
    [entry] = blame.find(job, status, SUMMARY, NODES, "unavailable: no actors\n", sources)
    assert entry.to_dict() == {"node_ip": W2, "host": None, "why": BLAME_WHY["unreadable"], "evidence": {
        "file": RANKS[2]["file"], "line": ("TrainingWorker pid 2368 on 198.18.0.12: no stack (py-spy failed (HTTP "
                                           "500): Error: Failed to get stack traces); 1 other TrainingWorker waits in "
                                           "all_gather_single")}}


def test_sources_merge_strongest_first_one_entry_per_node_with_its_name(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    job.redact = lambda obj: json.loads(json.dumps(obj).replace("30.12GB", "<redacted>"))
    nodes = [NODES[0], NODES[1], dict(NODES[2], state="DEAD")]
    actors = json.dumps([{"job_id": "07000000", "node_id": "cc33"}])
    sources = [("logs/driver.log", f"{OOM}\n\x1b[31m{GLOO}\x1b[0m\n"), ("debug/logs/x.err", TASK_NODE)]
    got = [b.to_dict() for b in blame.find(job, failed("node_died"), SUMMARY, nodes, actors, sources)]
    assert [(b["node_ip"], b["host"], b["why"]) for b in got] == [(W3, "w3", "node died"),
                                                                  (W2, None, "peer named by gloo")]
    assert got[0]["evidence"] == {"file": "debug/nodes.json", "line": "node cc33 (198.18.0.13) is DEAD; it ran 1 of "
                                                                      "its actors"}
    assert got[1]["evidence"]["line"].startswith("RuntimeError: [/__w/") and "\x1b" not in got[1]["evidence"]["line"]
    oom_only = [b.to_dict() for b in blame.find(job, failed("oom_kill"), SUMMARY, NODES, "[]", sources[:1])]
    assert oom_only[0]["evidence"]["line"].count("<redacted>") == 1 and "30.12GB" not in json.dumps(oom_only)
    many = [(f"10.0.1.{i}", "node died", "f", "l") for i in range(20)]
    assert len(blame.entries(many, [], lambda obj: obj)) == blame.MAX_BLAMED


def test_the_final_line_names_the_blamed_nodes(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    status = failed("hung", reason="HUNG", blame=[
        {"node_ip": W2, "host": "w2", "why": BLAME_WHY["unreadable"], "evidence": {"file": "f", "line": "l"}},
        {"node_ip": W3, "host": None, "why": "node died", "evidence": {"file": "f", "line": "l"}}])
    assert evidence.final_line(job, status) == ("j-1: FAILED (HUNG); blamed: 198.18.0.12 (w2): unreadable rank while "
                                                "others wait in a collective, 198.18.0.13: node died")
    assert evidence.final_line(job, failed()) == "j-1: FAILED"
