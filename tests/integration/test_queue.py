"""The queue on the lab (issue 41), acting as several submitters (the lab lets root act for others): a job that does
not fit waits QUEUED with its reason and starts when resources free; a submitter at their quota waits while another's
job starts; a queued job is stopped with a final record; admissions racing admit each job once and never over-commit.

Command jobs declare what they would hold (resources.nnodes x n_gpus_per_node): the queue counts a job's declared
placement until Ray shows its placement groups, so these cheap jobs fill the lab's 2 x 4 declared GPUs as a verl job
would."""

import json
import threading

import pytest
from conftest import new_id, playbook, wait_for
from jobs_helpers import ray_jobs, record, status

pytestmark = pytest.mark.usefixtures("cluster_up")

WHOLE_LAB = ("-e", "resources.nnodes=2", "-e", "resources.n_gpus_per_node=4")  # every declared GPU of both workers
ONE_GPU = ("-e", "resources.n_gpus_per_node=1")


def command_job(sid, entrypoint, submitter, *args):
    return playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                    "-e", f'entrypoint="{entrypoint}"', "-e", f"submitter={submitter}", *args)


def final(sid):
    return status(sid).get("final")


def finalised(sid):
    """sid's record once a follower has finalised it (a job nobody follows keeps its last state until a pass)."""
    run = playbook("job.yml", "-e", f"id={sid}", "-e", "do=wait")
    assert run.rc == 0, run
    return status(sid)


def test_a_job_that_does_not_fit_waits_queued_with_its_reason_and_starts_when_the_first_ends():
    big, small = new_id("q-big"), new_id("q-small")
    run = command_job(big, "sleep 20", "alice", *WHOLE_LAB, "-e", "queue.priority=low")
    assert run.rc == 0 and "QUEUED" not in run.out, run
    queue = status(big)["queue"]
    assert (queue["submitter"], queue["priority"], queue["preemptible"]) == ("alice", "low", True), queue

    run = command_job(small, "true", "bob", *ONE_GPU)
    assert run.rc == 0, run
    st = status(small)
    assert st["state"] == "QUEUED" and not st["final"] and st["queue"]["reason"] == "no_fit", st
    assert st["queue"]["words"].startswith("needs 1 node of 1 GPU"), st["queue"]
    assert f"{small}: QUEUED (position 1, normal, bob): needs 1 node of 1 GPU" in run.out, run
    assert small not in ray_jobs()  # Ray never saw it
    with open(record(small, "config", "job_spec.json"), encoding="utf-8") as handle:
        assert json.load(handle)["queue"]["priority"] == "normal"  # the record is whole before it runs

    shown = playbook("job.yml", "-e", f"id={small}")
    assert shown.rc == 0 and "QUEUED (position 1, normal, bob)" in shown.out, shown
    followed = playbook("job.yml", "-e", f"id={small}", "-e", "do=wait")
    assert followed.rc == 0 and f"{small}: SUCCEEDED" in followed.out, followed
    first, then = finalised(big), status(small)
    assert first["state"] == "SUCCEEDED" and then["state"] == "SUCCEEDED", (first, then)
    assert then["start_time"] >= first["end_time"], (first, then)  # it started only once the first had ended


QUOTA = ("-e", json.dumps({"ray_queue_quotas": {"users": {"carol": {"jobs": 1}}}}))


def test_a_submitter_at_their_quota_waits_while_another_submitters_job_starts():
    first, second, other = new_id("q-carol"), new_id("q-carol"), new_id("q-dave")
    assert command_job(first, "sleep 15", "carol", *QUOTA).rc == 0
    run = command_job(second, "true", "carol", *QUOTA)
    assert run.rc == 0, run
    st = status(second)
    assert st["state"] == "QUEUED" and st["queue"]["reason"] == "quota_jobs", st
    assert st["queue"]["words"] == "carol is at their quota of 1 jobs", st["queue"]
    run = command_job(other, "true", "dave", *QUOTA, "-e", "wait=true")
    assert run.rc == 0 and "QUEUED" not in run.out and status(other)["state"] == "SUCCEEDED", run
    followed = playbook("job.yml", "-e", f"id={second}", "-e", "do=wait", *QUOTA)
    assert followed.rc == 0 and f"{second}: SUCCEEDED" in followed.out, followed
    assert status(second)["start_time"] >= finalised(first)["end_time"]


def test_a_queued_job_is_stopped_with_a_final_record_and_never_reaches_ray():
    big, queued = new_id("q-big"), new_id("q-stop")
    assert command_job(big, "sleep 300", "alice", *WHOLE_LAB).rc == 0
    try:
        assert command_job(queued, "true", "bob", *ONE_GPU).rc == 0
        assert status(queued)["state"] == "QUEUED"
        stopped = playbook("job.yml", "-e", f"id={queued}", "-e", "do=stop")
        assert stopped.rc == 0, stopped
        st = status(queued)
        assert st["state"] == "STOPPED" and st["final"] and st["reason"] == "STOPPED_BY_USER", st
    finally:
        assert playbook("job.yml", "-e", f"id={big}", "-e", "do=stop").rc == 0
    assert queued not in ray_jobs()
    # Admissions after the stop (the big job's end frees the lab) leave it stopped.
    assert playbook("watch.yml").rc == 0 and status(queued)["state"] == "STOPPED"


def test_admissions_racing_admit_each_job_once_and_never_over_commit():
    # Four jobs of a whole worker each (4 GPUs), queued behind a job holding both workers: at most two can run.
    big = new_id("q-big")
    assert command_job(big, "sleep 20", "alice", *WHOLE_LAB).rc == 0
    waiting = [new_id("q-race") for _ in range(3)]
    for sid in waiting:
        assert command_job(sid, "sleep 8", "bob", "-e", "resources.n_gpus_per_node=4").rc == 0
        assert status(sid)["state"] == "QUEUED"
    wait_for(lambda: ray_jobs()[big].status.value == "SUCCEEDED", 120, f"{big} to end")
    # The big job has ended: two watcher passes and a submission ask the queue at once.
    late = new_id("q-race")
    runs = {}

    def go(name, *args):
        runs[name] = playbook(*args)

    threads = [threading.Thread(target=go, args=("watch-1", "watch.yml")),
               threading.Thread(target=go, args=("watch-2", "watch.yml")),
               threading.Thread(target=go, args=("submit", "submit.yml", "-e", "spec=smoke", "-e",
                                                 f"submission_id={late}", "-e", "workload=command", "-e",
                                                 'entrypoint="sleep 8"', "-e", "submitter=bob", "-e",
                                                 "resources.n_gpus_per_node=4"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(run.rc == 0 for run in runs.values()), runs
    every = [*waiting, late]
    for sid in every:  # whoever asks last admits the rest as the first end
        wait_for(lambda sid=sid: final(sid) or (playbook("watch.yml") and False), 240, f"{sid} to end")
    spans = []
    for sid in every:
        st = status(sid)
        assert st["state"] == "SUCCEEDED" and st["attempts"] == [], st
        spans.append((st["start_time"], st["end_time"]))
    # Never more than two at once (a whole worker each), whoever admitted them.
    for start, _ in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 2, spans
    assert all(list(ray_jobs()).count(sid) == 1 for sid in every)
