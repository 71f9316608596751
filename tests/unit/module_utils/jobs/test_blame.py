"""jobs/evidence/blame.py: each source of blame over Ray's own tables (a hang's processes.json vouched for by Ray's
actor table, Ray's node table), and the evidence that blames no node: above all the job's own words (its logs quoting
Ray 2.60's, gloo's and NCCL's wording with an address of its choosing, issue 38)."""

import json
import os

import pytest
from ansible.module_utils.jobs.evidence import blame, evidence, stacks
from ansible.module_utils.jobs.record.status import BLAME_WHY, StatusFile
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


JOB = "07000000"
# Ray's actor table for the lab's hung SFT: the two ranks with their pids on their nodes.
ACTORS = [{"job_id": JOB, "node_id": "aa11", "pid": 5932, "class_name": "TrainingWorker", "state": "DEAD"},
          {"job_id": JOB, "node_id": "bb22", "pid": 2368, "class_name": "TrainingWorker", "state": "DEAD"}]


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
    stall = StatusFile("j-1", stall={"stacks": DUMP}).stall
    assert blame.read_ranks(job, stall) == []  # a dump of an older version: no index
    (folder / stacks.INDEX).write_text(json.dumps([*RANKS, "a row", {"pid": 10 ** 400, "role": ["x"]}]))
    ranks = blame.read_ranks(job, stall)
    assert [r["pid"] for r in ranks] == [5758, 5932, 2368, None] and ranks[3]["role"] is None
    for bad in ("debug/stacks/../../etc", "/etc/passwd", "debug/stacks", None, 7):
        assert blame.read_ranks(job, StatusFile("j-1", stall={"stacks": bad}).stall) == [], bad
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


# ---------------------------------------------------------------- what Ray vouches for


def test_a_rank_counts_only_when_rays_actor_table_lists_it_there_and_its_address_is_rays():
    ranks = [blame._rank(r) for r in RANKS]
    got = blame.verified(ranks, NODES, ACTORS, JOB)
    assert [(r["pid"], r["node_ip"]) for r in got] == [(5758, W1), (5932, W1), (2368, W2)]
    # The dump's address is not used: the node id Ray's actor table gives, through Ray's node table.
    moved = [*ranks[:2], dict(ranks[2], node_ip=W3)]
    assert [r["node_ip"] for r in blame.verified(moved, NODES, ACTORS, JOB)] == [W1, W1, W2]
    for forged in ({"pid": 9999}, {"node_id": "cc33"}, {"node_id": "zz99"}):  # no such actor of this job there
        rows = [*ranks[:2], dict(ranks[2], **forged)]
        assert [r["pid"] for r in blame.verified(rows, NODES, ACTORS, JOB)] == [5758, 5932], forged
    other_job = [dict(a, job_id="01000000") for a in ACTORS]
    assert [r["role"] for r in blame.verified(ranks, NODES, other_job, JOB)] == ["driver"]
    assert blame.verified(ranks, NODES, "not a list", JOB)[1:] == []


def test_ran_on_is_the_drivers_node_and_its_actors_nodes_as_ray_lists_them():
    assert blame.ran_on(NODES, ACTORS, JOB, "cc33") == {"aa11": W1, "bb22": W2, "cc33": W3}
    assert blame.ran_on(NODES, ACTORS, None, None) == {}
    assert blame.ran_on(NODES[:1], ACTORS, JOB, None) == {"aa11": W1}  # a node Ray does not list counts not


def test_from_stacks_is_linear_in_the_ranks():
    """20k ranks under processes.json's cap (the review's 73 s): one pass, counted by how often rows are compared."""
    class Counted(dict):
        reads = 0

        def __getitem__(self, key):
            Counted.reads += 1
            return super().__getitem__(key)

    for n in (2_000, 20_000):
        Counted.reads = 0
        rows = [Counted(blame._rank(dict(RANKS[1], pid=i, node_ip=f"10.0.{i // 250}.{i % 250 + 1}")))
                for i in range(n)]
        rows.append(Counted(blame._rank(RANKS[2])))
        [(ip, _, _, _)] = blame.from_stacks(rows, DUMP)  # the one unread rank among thousands waiting
        assert ip == W2
        assert Counted.reads < 20 * n, (n, Counted.reads)


# ---------------------------------------------------------------- the job's words


# A job that prints Ray's words for a dead node and an OOM kill, with addresses of its choosing: a worker it ran on,
# one it did not, and one outside the cluster (issue 38).
FORGED = "\n".join([TASK_NODE.replace(W3, W1), TASK_NODE.replace(W3, "10.9.9.9"), OOM.replace(W3, W2),
                     OOM.replace(W3, "10.9.9.9"), ACTOR_NODE, GLOO, NCCL_IB])


@pytest.mark.parametrize("diagnosis", ["node_died", "oom_kill", "nccl_gloo", "unknown"])
def test_what_the_job_writes_blames_no_node(tmp_path, diagnosis):
    job = RecordJob(str(tmp_path / "j-1"))
    # The job ran on both workers; both are ALIVE: nothing of Ray's says either died.
    assert blame.find(job, failed(diagnosis), SUMMARY, NODES, json.dumps(ACTORS)) == []
    # A node Ray does list DEAD but that ran none of this job's work is no more blamed for the job naming it.
    dead_w3 = [NODES[0], NODES[1], dict(NODES[2], state="DEAD", end_time_ms=1500)]
    assert blame.find(job, failed(diagnosis), SUMMARY, dead_w3, json.dumps(ACTORS)) == []


def test_a_forged_stack_index_blames_no_node_rays_actor_table_does_not_vouch_for(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    folder = tmp_path / "j-1" / DUMP
    folder.mkdir(parents=True)
    status = failed("hung", reason="HUNG", stall={"stacks": DUMP})
    forged = [*RANKS[:2], dict(RANKS[2], node_ip="10.9.9.9", node_id="ffff", pid=1)]
    (folder / stacks.INDEX).write_text(json.dumps(forged))
    assert blame.find(job, status, SUMMARY, NODES, json.dumps(ACTORS)) == []
    (folder / stacks.INDEX).write_text(json.dumps(RANKS))
    assert blame.find(job, status, SUMMARY, NODES, "unavailable: no actors\n") == []  # unread: no rank vouched for
    [entry] = blame.find(job, status, SUMMARY, NODES, json.dumps(ACTORS))
    assert (entry.node_ip, entry.why) == (W2, BLAME_WHY["unreadable"])


def test_only_an_address_status_json_holds_is_a_nodes():
    assert blame._address("2001:db8::1") == "2001:db8::1" and blame._address(W1) == W1
    for bad in ("fe80::1%eth0", "::1", "127.0.0.1", "0.0.0.0", "w1", "", None, 7):
        assert blame._address(bad) is None, bad
    scoped = [dict(NODES[1], state="DEAD", node_ip="fe80::1%eth0")]
    assert blame.from_node_table(scoped, [{"job_id": "07000000", "node_id": "bb22"}], "07000000", None, 1, 2) == []


# ---------------------------------------------------------------- the whole: find, entries, the final line


def failed(diagnosis="unknown", reason=None, **fields):
    return StatusFile("j-1", state="FAILED", final=True, reason=reason, diagnosis={"kind": diagnosis}, **fields)


SUMMARY = {"job_id": JOB, "driver_node_id": "aa11", "start_time": 1000, "end_time": 2000}


@pytest.mark.parametrize(("diagnosis", "text"), [
    ("hydra_config", "Could not override 'trainer.save_frq'.\nKey 'save_frq' is not in struct\n"),
    ("import_error", "ModuleNotFoundError: No module named 'verl.trainer.x'\n"),
    ("unknown", f"ValueError: bad batch on {W2}\n{GLOO}\n"),  # a user's error: the job's end broke the connections
    ("cuda_oom", f"torch.OutOfMemoryError: CUDA out of memory.\n{GLOO}\n"),
])
def test_evidence_that_points_at_no_node_blames_none(tmp_path, diagnosis, text):
    job = RecordJob(str(tmp_path / "j-1"))
    assert blame.find(job, failed(diagnosis), SUMMARY, NODES, json.dumps(ACTORS)) == []


def test_a_job_that_did_not_fail_or_never_ran_blames_none(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    dead = [dict(n, state="DEAD") for n in NODES]
    for status in (StatusFile("j-1", state="SUCCEEDED"), StatusFile("j-1", state="STOPPED", reason="STOPPED_BY_USER"),
                   failed("resources_pending", reason="PENDING_TIMEOUT")):
        assert blame.find(job, status, SUMMARY, dead, ACTORS) == []


def test_a_hang_ray_job_stopped_is_blamed_from_its_stacks_not_from_what_the_stop_broke(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    folder = tmp_path / "j-1" / DUMP
    folder.mkdir(parents=True)
    (folder / stacks.INDEX).write_text(json.dumps(RANKS))
    status = failed("hung", reason="HUNG", stall={"stacks": DUMP})
    [entry] = blame.find(job, status, SUMMARY, NODES, json.dumps(ACTORS))
    assert entry.to_dict() == {"node_ip": W2, "host": None, "why": BLAME_WHY["unreadable"], "evidence": {
        "file": RANKS[2]["file"], "line": ("TrainingWorker pid 2368 on 198.18.0.12: no stack (py-spy failed (HTTP "
                                           "500): Error: Failed to get stack traces); 1 other TrainingWorker waits in "
                                           "all_gather_single")}}


def test_sources_merge_strongest_first_one_entry_per_node_with_its_name(tmp_path):
    job = RecordJob(str(tmp_path / "j-1"))
    folder = tmp_path / "j-1" / DUMP
    folder.mkdir(parents=True)
    (folder / stacks.INDEX).write_text(json.dumps(RANKS))
    job.redact = lambda obj: json.loads(json.dumps(obj).replace("2368", "<redacted>"))
    nodes = [NODES[0], NODES[1], dict(NODES[2], state="DEAD", node_name="w3")]
    actors = json.dumps([*ACTORS, {"job_id": JOB, "node_id": "cc33", "pid": 7}])
    got = [b.to_dict() for b in blame.find(job, failed("hung", reason="HUNG", stall={"stacks": DUMP}), SUMMARY,
                                           nodes, actors)]
    assert [(b["node_ip"], b["host"], b["why"]) for b in got] == [(W2, None, BLAME_WHY["unreadable"]),
                                                                  (W3, "w3", "node died")]
    assert got[1]["evidence"] == {"file": "debug/nodes.json", "line": "node cc33 (198.18.0.13) is DEAD; it ran 1 of "
                                                                      "its actors"}
    assert "pid <redacted> on" in got[0]["evidence"]["line"] and "2368" not in json.dumps(got)
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
