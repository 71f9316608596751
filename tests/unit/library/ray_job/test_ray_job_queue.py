"""Issue 41, phase 1: every submission has a submitter and a place in a durable queue. The ray_job module over a fake
Ray whose workers' free resources are what the running jobs leave (Held): a job that fits is submitted at once; one
that does not is written QUEUED with its place and reason, and the queue's admission (a submit, a follower's wait,
the watcher's pass, each under jobs/.queue.lock) submits it when it fits; stop, status and queue_s of a QUEUED job."""

import json
import os
import threading
import time
import types

import pytest
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.submission import admission, submit
from ansible.module_utils.jobspec import model as js
from ansible.module_utils.queue import model as qm
from ray_job_harness import HEAD, SECRET, WORKER, make_spec, make_verl_spec, record, run

W2 = {**WORKER, "node_id": "n-w2", "node_ip": "10.0.0.12", "node_name": "w2"}


class Held:
    """What the running jobs hold on the fake cluster: each job's driver (worker_node 1 on its node) and its
    placement groups' bundles; Ray's available resources are the totals less all of it."""

    def __init__(self, ray, *workers):
        self.ray, self.jobs = ray, {}
        ray.nodes = [HEAD, *(workers or (WORKER,))]
        self.sync()

    def run(self, sid, node="n-w1", gang=None):
        gang = gang or {}
        self.jobs[sid] = {node: {"worker_node": 1}, **{n: dict(r) for n, r in gang.items() if n != node}}
        for n, res in gang.items():
            if n == node:
                self.jobs[sid][n] = {**res, "worker_node": 1}
        self.ray.set(sid, "RUNNING", driver_node_id=node, job_id=f"job-{sid}",
                     start_time=int(self.ray.clock.now * 1000))
        self.ray.bundles[f"job-{sid}"] = gang
        self.sync()

    def end(self, sid, state="SUCCEEDED"):
        self.ray.set(sid, state, end_time=int(self.ray.clock.now * 1000), driver_exit_code=0)
        self.jobs.pop(sid, None)
        self.ray.bundles.pop(f"job-{sid}", None)
        self.sync()

    def sync(self):
        for node in self.ray.nodes:
            free = dict(node["resources_total"])
            for holds in self.jobs.values():
                for key, amount in holds.get(node["node_id"], {}).items():
                    free[key] = free.get(key, 0) - amount
            self.ray.free[node["node_id"]] = free


def status_of(ray_config, sid):
    with open(os.path.join(record(ray_config, sid), "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def smoke(ray_config, sid, **fields):
    return make_spec(ray_config, submission_id=sid, **fields)


def put(capsys, ray_config, spec, submitter="alice", **args):
    code, out = run(capsys, spec=spec, ray_config=ray_config, submitter=submitter, preflight=False, **args)
    assert code == 0, out
    return out


def call(capsys, ray_config, action, sid=None, **args):
    code, out = run(capsys, action=action, ray_config=ray_config, **({"submission_id": sid} if sid else {}), **args)
    assert code == 0, out
    return out


def listed(ray_config):
    """The open records' index (its folder: no reader has marked it complete in these tests)."""
    return sorted(os.listdir(os.path.join(ray_config["shared_root"], "jobs", open_index.INDEX)))


# ------------------------------------------------------------------ a submission that fits, and one that waits


def test_a_job_that_fits_is_submitted_at_once_with_its_submitter(ray, ray_config, capsys):
    Held(ray)
    out = put(capsys, ray_config, smoke(ray_config, "a-1"))
    assert out["state"] == "PENDING" and [c["submission_id"] for c in ray.submitted] == ["a-1"]
    queue = status_of(ray_config, "a-1")["queue"]
    assert queue["submitter"] == "alice" and queue["priority"] == "normal" and queue["preemptible"] is False
    assert queue["reason"] == qm.FITS and queue["words"] == "fits now on 10.0.0.11" and queue["position"] is None
    assert queue["since"] == queue["admitted_at"] == int(ray.clock.now * 1000)


def test_a_job_that_does_not_fit_is_queued_with_a_complete_record(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1"))
    held.run("a-1")
    out = put(capsys, ray_config, smoke(ray_config, "b-1", timeouts={"pending_s": 30}), submitter="bob")
    assert out["state"] == "QUEUED" and not out["done"] and [c["submission_id"] for c in ray.submitted] == ["a-1"]
    status = status_of(ray_config, "b-1")
    assert status["state"] == "QUEUED" and status["final"] is False and status["submitted_at"] is None
    assert status["queue"] == {
        "submitter": "bob", "priority": "normal", "preemptible": False, "since": int(ray.clock.now * 1000),
        "ranks": 0, "position": 1, "reason": qm.NO_FIT,
        "words": "needs a driver of 1 worker_node; none fits", "admitted_at": None}
    assert out["progress"] == "b-1: QUEUED (position 1, normal, bob): needs a driver of 1 worker_node; none fits"
    rec = record(ray_config, "b-1")
    for name in ("config/job_spec.json", "config/runtime_env.json", "config/submit_cmd.txt",
                 "config/env_var_names.json"):
        assert os.path.isfile(os.path.join(rec, name)), name
    with open(os.path.join(rec, "config/job_spec.json"), encoding="utf-8") as handle:
        kept = handle.read()
    assert SECRET not in kept and json.loads(kept)["timeouts"]["pending_s"] == 30
    assert not os.path.exists(os.path.join(rec, "logs/ray_job_submit.out"))  # never submitted to Ray
    assert "b-1" in listed(ray_config)


def test_a_queued_job_is_admitted_when_a_follower_sees_the_running_one_end(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1"))
    held.run("a-1")
    spec = smoke(ray_config, "b-1")
    put(capsys, ray_config, spec, submitter="bob")
    # b-1's own follower asks the queue on each wait: still no room, still QUEUED with its reason
    waited = call(capsys, ray_config, "wait", "b-1", spec=spec, poll_s=12)
    assert waited["state"] == "QUEUED" and waited["progress"].startswith("b-1: QUEUED (position 1")
    assert len(ray.submitted) == 1
    # a-1 ends under alice's follower: the queue is asked once. b-1's record keeps its secret redacted, and alice's
    # own -e env value is never given to bob's job: b-1 is held, saying what it lacks, and takes nobody's place.
    held.end("a-1")
    ended = call(capsys, ray_config, "wait", "a-1", secret_env={"cli": {"WANDB_API_KEY": "alices-own-key"}})
    assert ended["state"] == "SUCCEEDED" and ended["queue_lines"][0].startswith("b-1: held: jobspec field "
                                                                                "'env.WANDB_API_KEY'")
    assert len(ray.submitted) == 1 and status_of(ray_config, "b-1")["queue"]["reason"] == qm.HELD
    # the site's secrets (jobspec_defaults) are every job's; bob's own follower gives his: submitted with it
    waited = call(capsys, ray_config, "wait", "b-1", poll_s=1, secret_env={"cli": {"WANDB_API_KEY": SECRET}})
    [_, call_b] = ray.submitted
    assert call_b["submission_id"] == "b-1" and call_b["runtime_env"]["env_vars"]["WANDB_API_KEY"] == SECRET
    status = status_of(ray_config, "b-1")
    assert status["state"] == "PENDING" and status["submitted_at"]
    assert status["queue"]["reason"] == qm.FITS and status["queue"]["admitted_at"] == status["submitted_at"]
    assert status["queue"]["position"] is None and status["queue"]["submitter"] == "bob"
    assert "alices-own-key" not in json.dumps(ray.submitted)
    # pending_s counts from the admission: its follower now follows Ray's job as a direct submit's
    assert call(capsys, ray_config, "wait", "b-1", poll_s=1)["state"] == "PENDING"


def test_a_job_held_for_its_secret_takes_nobodys_place(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1"), submitter="bob")  # its secret: only bob's runs have it
    put(capsys, ray_config, smoke(ray_config, "c-1", env={}), submitter="carol")
    held.end("a-1")
    watched = call(capsys, ray_config, "watch")
    assert watched["admitted"] == ["c-1"] and [c["submission_id"] for c in ray.submitted] == ["a-1", "c-1"]
    queue = status_of(ray_config, "b-1")["queue"]
    assert queue["reason"] == qm.HELD and queue["words"].startswith(
        "held out of the queue until its submitter's run gives what it lacks: jobspec field 'env.WANDB_API_KEY'")


def test_a_malformed_queued_record_stops_nobody_else(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1", env={}), submitter="bob")
    path = os.path.join(record(ray_config, "b-1"), "config", "job_spec.json")
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    spec["resources"]["nnodes"] = "2"  # a record anyone on the share may have shaped
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    out = put(capsys, ray_config, smoke(ray_config, "c-1", env={}), submitter="carol")
    assert out["state"] == "QUEUED" and status_of(ray_config, "c-1")["queue"]["reason"] == qm.NO_FIT  # not around it
    held.end("a-1")
    watched = call(capsys, ray_config, "watch")
    assert watched["admitted"] == ["c-1"] and status_of(ray_config, "b-1")["state"] == "QUEUED"


def test_a_queued_record_ray_already_has_is_completed_not_submitted_again(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1", env={}), submitter="bob")
    # the run that submitted b-1 died between Ray's acceptance and its status.json (or someone gave Ray that id around
    # the queue): the record follows the job Ray runs under its id, and the queue never submits it a second time
    ray.submit_job(submission_id="b-1", entrypoint="x", runtime_env={}, metadata={})
    ray.set("b-1", "RUNNING", start_time=int(ray.clock.now * 1000))
    call(capsys, ray_config, "watch")
    status = status_of(ray_config, "b-1")
    assert status["state"] == "RUNNING" and status["resumed"] == "the record of an interrupted submit was completed"
    assert [c["submission_id"] for c in ray.submitted] == ["a-1", "b-1"]  # the one submission, never a second


def test_a_queued_job_whose_secret_nobody_gave_stays_queued_saying_so(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1"))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1"), submitter="bob")
    held.end("a-1")
    ended = call(capsys, ray_config, "wait", "a-1")
    assert ended["queue_lines"] and "env.WANDB_API_KEY" in ended["queue_lines"][0]
    status = status_of(ray_config, "b-1")
    assert status["state"] == "QUEUED" and status["queue"]["words"].startswith(
        "held out of the queue until its submitter's run gives what it lacks: jobspec field 'env.WANDB_API_KEY'")
    assert len(ray.submitted) == 1
    # its own follower has it (the spec its run resolved): submitted on its next wait
    waited = call(capsys, ray_config, "wait", "b-1", spec=smoke(ray_config, "b-1"), poll_s=1)
    assert waited["state"] == "PENDING" and ray.submitted[-1]["submission_id"] == "b-1"


def test_the_watchers_pass_admits_what_fits_once_per_pass(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1", env={}), submitter="bob")
    put(capsys, ray_config, smoke(ray_config, "c-1", env={}), submitter="carol")
    assert status_of(ray_config, "c-1")["queue"]["position"] == 2
    held.end("a-1")
    watched = call(capsys, ray_config, "watch")
    assert watched["finalized"] == ["a-1"] and watched["admitted"] == ["b-1"]
    assert [c["submission_id"] for c in ray.submitted] == ["a-1", "b-1"]
    held.run("b-1")
    again = call(capsys, ray_config, "watch")
    assert again["admitted"] == [] and status_of(ray_config, "c-1")["queue"]["position"] == 1


def test_an_admitted_job_holds_its_place_before_ray_shows_it_held(ray, ray_config, capsys):
    # a-1 is admitted and submitted, but Ray has not started its driver nor made its groups: the next submission a
    # second later must not be given the same worker (Ray's free resources do not show a-1 yet).
    held = Held(ray, WORKER, W2)
    gang = {"resources": {"nnodes": 2, "n_gpus_per_node": 2}}
    assert put(capsys, ray_config, smoke(ray_config, "a-1", env={}, **gang))["state"] == "PENDING"
    out = put(capsys, ray_config, smoke(ray_config, "b-1", env={}, resources={"n_gpus_per_node": 1}),
              submitter="bob")
    assert out["state"] == "QUEUED" and [c["submission_id"] for c in ray.submitted] == ["a-1"]
    assert status_of(ray_config, "b-1")["queue"]["words"] == (
        "needs 1 node of 1 GPU and a driver of 1 worker_node; none fits")
    # Its driver starts on w1, its gang never shows (a command job makes no placement group): its GPUs stay counted.
    held.run("a-1", node="n-w1")
    waited = call(capsys, ray_config, "wait", "b-1", poll_s=1)
    assert waited["state"] == "QUEUED" and len(ray.submitted) == 1
    held.end("a-1")
    assert call(capsys, ray_config, "wait", "b-1", poll_s=1)["state"] == "PENDING"


def test_rays_own_resources_memory_and_node_names_are_not_weighed(ray, ray_config, capsys):
    # What a real Ray lists beside CPU, GPU and worker_node: bytes past the core's amounts, and implicit names.
    implicit = {"memory": 3.2e10, "object_store_memory": 8.5e9, "node:10.0.0.11": 1.0,
                "accelerator_type:H100": 1.0}
    Held(ray, {**WORKER, "resources_total": {**WORKER["resources_total"], **implicit}})
    out = put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    assert out["state"] == "PENDING" and status_of(ray_config, "a-1")["queue"]["reason"] == qm.FITS


def test_a_job_no_idle_worker_could_hold_goes_to_ray_whose_pending_s_bounds_it(ray, ray_config, capsys):
    Held(ray)
    spec = smoke(ray_config, "x-1", env={}, resources={"entrypoint_resources": {"worker_node": 1, "no_such_gpu": 1}})
    out = put(capsys, ray_config, spec)
    assert out["state"] == "PENDING" and [c["submission_id"] for c in ray.submitted] == ["x-1"]
    queue = status_of(ray_config, "x-1")["queue"]
    assert queue["reason"] == qm.NEVER_FITS and queue["words"] == (
        "needs a driver of 1 no_such_gpu, 1 worker_node; none fits, even with nothing running: handed to Ray, whose "
        "pending_s bounds its wait")


def test_a_job_submitted_around_the_queue_counts_what_its_driver_holds(ray, ray_config, capsys):
    Held(ray)  # one worker: its only driver slot is taken by a job the queue never saw
    ray.submit_job(submission_id="x-1", entrypoint="sleep 600", runtime_env={}, metadata={},
                   entrypoint_resources={"worker_node": 1})
    ray.set("x-1", "RUNNING", driver_node_id="n-w1", job_id="job-x-1")
    ray.free["n-w1"] = {**WORKER["resources_total"], "worker_node": 0.0}
    out = put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    assert out["state"] == "QUEUED" and status_of(ray_config, "a-1")["queue"]["reason"] == qm.NO_FIT


# ------------------------------------------------------------------ quotas, classes, backfill: each reason recorded


def test_a_submitter_at_their_quota_waits_while_another_submitters_job_starts(ray, ray_config, capsys):
    Held(ray, WORKER, W2)
    quotas = {"users": {"alice": {"jobs": 1}}}
    put(capsys, ray_config, smoke(ray_config, "a-1", env={}), queue_quotas=quotas)
    out = put(capsys, ray_config, smoke(ray_config, "a-2", env={}), queue_quotas=quotas)
    assert out["state"] == "QUEUED"
    queue = status_of(ray_config, "a-2")["queue"]
    assert queue["reason"] == qm.QUOTA_JOBS and queue["words"] == "alice is at their quota of 1 jobs"
    assert put(capsys, ray_config, smoke(ray_config, "b-1", env={}), submitter="bob",
               queue_quotas=quotas)["state"] == "PENDING"


def test_a_quota_of_gpus_counts_the_placements_ranks(ray, ray_config, capsys):
    Held(ray, WORKER, W2)
    spec = make_verl_spec(ray_config, submission_id="g-1", resources={"nnodes": 2, "n_gpus_per_node": 2})
    put(capsys, ray_config, spec, queue_quotas={"default": {"gpus": 3}})
    queue = status_of(ray_config, "g-1")["queue"]
    assert queue["ranks"] == 4 and queue["reason"] == qm.QUOTA_GPUS
    assert queue["words"] == "alice is at their quota of 3 GPUs (0 in use, this job asks 4)"


def test_bad_quotas_are_refused_in_one_line_naming_the_field(ray, ray_config, capsys):
    Held(ray)
    code, out = run(capsys, spec=smoke(ray_config, "a-1"), ray_config=ray_config, submitter="alice",
                    queue_quotas={"users": {"alice": {"gpus": -1}}})
    assert code == 1 and out["msg"].startswith("ray_queue_quotas field 'users.alice.gpus':") and not ray.submitted


def test_a_high_job_records_its_preemption_on_the_low_victim_which_runs_on(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "low-1", env={}, queue={"priority": "low"}))
    held.run("low-1")
    assert status_of(ray_config, "low-1")["queue"]["preemptible"] is True
    out = put(capsys, ray_config, smoke(ray_config, "hi-1", env={}, queue={"priority": "high"}),
              submitter="bob")
    assert out["state"] == "QUEUED" and ray.stopped == []
    queue = status_of(ray_config, "hi-1")["queue"]
    assert queue["reason"] == qm.PREEMPTS
    assert queue["words"] == "preempts low-1 (low, alice): their release makes a driver of 1 worker_node fit"
    assert status_of(ray_config, "low-1")["preempt"] == {"by": "hi-1", "at": int(ray.clock.now * 1000)}
    assert status_of(ray_config, "low-1")["state"] == "RUNNING" or ray.jobs["low-1"].status.value == "RUNNING"


def gang(ray_config, sid, nodes, gpus, **fields):
    return make_verl_spec(ray_config, submission_id=sid, resources={"nnodes": nodes, "n_gpus_per_node": gpus},
                          **fields)


def test_backfill_behind_and_delays_are_recorded_with_their_words(ray, ray_config, capsys):
    held = Held(ray, WORKER, W2)
    # a long job holds w1's GPUs; big needs both workers whole
    put(capsys, ray_config, gang(ray_config, "long-1", 1, 2, timeouts={"max_run_s": None}))
    held.run("long-1", "n-w1", {"n-w1": {"GPU": 2}})
    put(capsys, ray_config, gang(ray_config, "big-1", 2, 2))
    assert status_of(ray_config, "big-1")["queue"]["reason"] == qm.NO_FIT
    # long-1 has no max_run_s: big's start cannot be known, and nothing may pass it
    put(capsys, ray_config, gang(ray_config, "small-1", 1, 1, timeouts={"max_run_s": 60}), submitter="bob")
    queue = status_of(ray_config, "small-1")["queue"]
    assert queue["reason"] == qm.BEHIND and queue["words"] == "behind 1 job of class normal"


def test_backfill_admits_a_short_job_and_refuses_one_that_would_delay(ray, ray_config, capsys):
    held = Held(ray, WORKER, W2)
    put(capsys, ray_config, gang(ray_config, "long-1", 1, 2, timeouts={"max_run_s": 3600}))
    held.run("long-1", "n-w1", {"n-w1": {"GPU": 2}})
    put(capsys, ray_config, gang(ray_config, "big-1", 2, 2))
    put(capsys, ray_config, gang(ray_config, "slow-1", 1, 1, timeouts={"max_run_s": None}), submitter="bob")
    queue = status_of(ray_config, "slow-1")["queue"]
    assert queue["reason"] == qm.DELAYS and queue["words"] == "backfill would delay big-1"
    out = put(capsys, ray_config, gang(ray_config, "short-1", 1, 1, timeouts={"max_run_s": 600}), submitter="carol")
    assert out["state"] == "PENDING"
    queue = status_of(ray_config, "short-1")["queue"]
    assert queue["reason"] == qm.BACKFILL and queue["words"] == (
        "starts ahead of big-1, which it does not delay (its max_run_s ends before big-1 could start)")


# ------------------------------------------------------------------ stop, status, queue_s


def test_stop_takes_a_queued_job_out_of_the_queue_with_a_final_record(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1"))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1"), submitter="bob")
    shown = call(capsys, ray_config, "status", "b-1")
    assert shown["state"] == "QUEUED" and shown["queue"]["position"] == 1 and shown["queue"]["reason"] == qm.NO_FIT
    assert shown["progress"] == "b-1: QUEUED (position 1, normal, bob): needs a driver of 1 worker_node; none fits"
    stopped = call(capsys, ray_config, "stop", "b-1")
    assert stopped["changed"] and stopped["done"] and stopped["state"] == "STOPPED"
    status = status_of(ray_config, "b-1")
    assert status["final"] and status["reason"] == "STOPPED_BY_USER" and ray.stopped == []
    assert "b-1" not in listed(ray_config) and "a-1" in listed(ray_config)
    held.end("a-1")
    call(capsys, ray_config, "watch")
    assert [c["submission_id"] for c in ray.submitted] == ["a-1"]  # a stopped job is never admitted


def test_a_job_queued_past_its_queue_s_ends_failed_queue_timeout(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1"))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1", env={}, timeouts={"queue_s": 60}), submitter="bob")
    ray.clock.now += 30
    assert call(capsys, ray_config, "watch")["lines"] == []
    ray.clock.now += 31
    watched = call(capsys, ray_config, "watch")
    assert watched["lines"][0].startswith("b-1: FAILED (QUEUE_TIMEOUT): waited in the queue longer than its "
                                          "timeouts.queue_s (60s)")
    status = status_of(ray_config, "b-1")
    assert status["state"] == "FAILED" and status["final"] and status["reason"] == "QUEUE_TIMEOUT"
    assert "b-1" not in listed(ray_config) and len(ray.submitted) == 1
    waited = call(capsys, ray_config, "wait", "b-1")
    assert waited["done"] and waited["progress"].startswith("b-1: FAILED (QUEUE_TIMEOUT)")


def test_a_queued_job_survives_a_reconcile_after_a_head_restart(ray, ray_config, capsys, monkeypatch):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1"))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1"), submitter="bob")
    ray.nodes = [{**HEAD, "start_time_ms": int(ray.clock.now * 1000) + 5000}, WORKER]
    ray.clock.now += 10
    out = call(capsys, ray_config, "reconcile")
    assert "b-1" in out["open"] and status_of(ray_config, "b-1")["state"] == "QUEUED"


# ------------------------------------------------------------------ two admissions at once


def client_of(ray):
    return jc.JobClient("http://10.0.0.10:8265", None, client=ray)


def module_of(ray_config):
    return types.SimpleNamespace(check_mode=False, params={
        "token_path": None, "secret_env": None, "queue_quotas": None, "queue_preempting": None, "submitter": None,
        "spec": None})


def test_two_admissions_racing_submit_each_job_once(ray, ray_config, capsys, monkeypatch):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    held.run("a-1")
    for sid in ("b-1", "c-1"):
        put(capsys, ray_config, smoke(ray_config, sid, env={}), submitter="bob")
    monkeypatch.setattr(admission, "time", time)  # real time: the threads wait on the lock for real
    submit_job = ray.submit_job

    def slow_submit(**kwargs):
        # Ray takes a while to place the driver: until then its available resources do not show what the job holds,
        # so an admission reading meanwhile, without the queue's lock, would admit c-1 onto the same slot
        out = submit_job(**kwargs)
        time.sleep(0.1)
        held.jobs[kwargs["submission_id"]] = {"n-w1": {"worker_node": 1}}  # Ray holds its driver at once
        held.sync()
        return out

    ray.submit_job = slow_submit
    held.end("a-1")
    config = js.RayConfig.from_dict(ray_config)
    outs, errors = [], []

    def one():
        try:
            outs.append(submit.admit(module_of(ray_config), config, client_of(ray)))
        except Exception as exc:  # noqa: BLE001 - shown by the assertion
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(outs) == 4
    assert [c["submission_id"] for c in ray.submitted] == ["a-1", "b-1"]
    assert sorted(sid for out in outs for sid in out["admitted"]) == ["b-1"]
    assert status_of(ray_config, "c-1")["state"] == "QUEUED"


def test_an_admission_waits_for_the_queues_lock_and_says_so(ray, ray_config, capsys, monkeypatch):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1", env={}))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1", env={}), submitter="bob")
    held.end("a-1")
    monkeypatch.setattr(admission, "time", time)
    monkeypatch.setattr(admission, "LOCK_WAIT_S", 0.3)
    config = js.RayConfig.from_dict(ray_config)
    with admission.queue_lock(config.shared_root):
        out = submit.admit(module_of(ray_config), config, client_of(ray))
    assert out["admitted"] == [] and "held the queue's lock" in out["unasked"] and len(ray.submitted) == 1
    assert submit.admit(module_of(ray_config), config, client_of(ray))["admitted"] == ["b-1"]


def test_the_queues_lock_is_never_taken_through_a_symlink(ray, ray_config, tmp_path):
    jobs = os.path.join(ray_config["shared_root"], "jobs")
    os.makedirs(jobs, exist_ok=True)
    os.symlink(str(tmp_path / "elsewhere"), os.path.join(jobs, admission.QUEUE_LOCK))
    with pytest.raises(Exception, match="symlink"), admission.queue_lock(ray_config["shared_root"]):
        pass
    assert not (tmp_path / "elsewhere").exists()


def test_status_lists_the_queue_in_order_with_submitter_class_wait_and_reason(ray, ray_config, capsys):
    held = Held(ray)
    put(capsys, ray_config, smoke(ray_config, "a-1"))
    held.run("a-1")
    put(capsys, ray_config, smoke(ray_config, "b-1", env={}), submitter="bob")
    ray.clock.now += 125
    put(capsys, ray_config, smoke(ray_config, "c-1", env={}, queue={"priority": "high"}), submitter="carol")
    ray.clock.now += 3600
    rows, lines = admission.listing(ray_config["shared_root"], int(ray.clock.now * 1000))
    assert [r["submission_id"] for r in rows] == ["c-1", "b-1"] and rows[1]["waited_s"] == 3725
    assert lines == ["1. c-1: high, carol, waiting 1h00m: needs a driver of 1 worker_node; none fits",
                     "2. b-1: normal, bob, waiting 1h02m: needs a driver of 1 worker_node; none fits"]
