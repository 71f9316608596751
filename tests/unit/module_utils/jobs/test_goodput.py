"""jobs/evidence/goodput.py: a chain of attempts' wall time, productive and lost by cause, whose parts add up to
the wall time exactly (issue 33, item 4); kept in the first job's status.json at finalize, shown by the final line."""

import json
import os
import random
import types

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.evidence import evidence, goodput
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record.status import StatusFile
from ray_job_harness import SECRET, action, make_action, module_result

T0 = 1_767_225_600_000  # ms
PARTS = ("productive_s", *goodput.LOST)


def at(seconds):
    return T0 + int(seconds * 1000)


def job(sid, state="SUCCEEDED", final=True, **fields):
    return StatusFile.from_dict({"submission_id": sid, "state": state, "final": final, **fields})


def adds_up(found):
    assert all(type(found[p]) is int and found[p] >= 0 for p in (*PARTS, "wall_s")), found
    assert sum(found[p] for p in PARTS) == found["wall_s"], found
    return found


def lost(found):
    return {p: found[p] for p in PARTS if found[p]}


# A hung first job (stopped 60 s after its last step) resumed from step 28 by r1, which succeeds.
HUNG = job("c", "FAILED", reason="HUNG", submitted_at=at(0), start_time=at(2), end_time=at(370),
           phases={"pending_s": 2.0}, progress={"step": 30, "step_at": at(302), "step_s": [9.0, 10.0, 11.0]},
           stall={"detected_at": at(362)}, attempts=["c-r1"])
RESUMED = job("c-r1", submitted_at=at(380), start_time=at(385), end_time=at(660), phases={"pending_s": 5.0},
              attempt_of="c", attempt=1, resumed_from={"path": "/s/jobs/c/checkpoints/global_step_28", "step": 28},
              progress={"step": 50, "step_at": at(655), "step_s": [10.0]})


def test_one_attempt_that_succeeded_is_productive_but_its_wait_for_resources():
    alone = job("a", submitted_at=at(0), start_time=at(5), end_time=at(100), phases={"pending_s": 5.0},
                progress={"step": 9})
    found = adds_up(goodput.account([("a", alone)], at(999)))
    assert lost(found) == {"productive_s": 95, "pending_s": 5} and found["wall_s"] == 100
    assert found["attempts"] == 1 and found["note"] is None


def test_a_hang_and_a_resume_lose_detection_restart_and_recomputed_steps():
    found = adds_up(goodput.account([("c", HUNG), ("c-r1", RESUMED)], at(999)))
    # detection: last step 302 s to the hang found 362 s; restart: end 370 -> submitted 380, then start 385 -> the
    # first step (step 29 at 655 - 21 x 10 s = 445); recomputed: steps 29, 30 again at the hung job's median 10 s.
    assert lost(found) == {"productive_s": 503, "pending_s": 7, "detection_s": 60, "restart_s": 70,
                           "recomputed_s": 20}
    assert found["wall_s"] == 660 and found["attempts"] == 2
    assert goodput.text(found) == "goodput 76% (lost: pending 7 s, detection 60 s, restart 70 s, recomputed 20 s)"


def test_a_node_death_and_two_resumes_count_each_gap_and_the_head_outage():
    root = job("n", "FAILED", submitted_at=at(0), start_time=at(1), end_time=at(200), attempts=["n-r1", "n-r2"],
               progress={"step": 19, "step_at": at(190), "step_s": [10.0]}, phases={"pending_s": 1.0})
    first = job("n-r1", "FAILED", submitted_at=at(230), start_time=at(240), end_time=at(400), attempt_of="n",
                resumed_from={"path": "/ck/global_step_15", "step": 15}, progress={"step": 30, "step_at": at(380)},
                outages=[{"from": at(300), "to": at(330), "seconds": 30.0, "seen_by": "wait"}])
    second = job("n-r2", submitted_at=at(410), start_time=at(420), end_time=at(700), attempt_of="n",
                 resumed_from={"path": None, "step": None, "skipped": ["global_step_30: lacks optim"]},
                 progress={"step": 40, "step_at": at(690), "step_s": [5.0, 5.0]})
    found = adds_up(goodput.account([("n", root), ("n-r1", first), ("n-r2", second)], at(999)))
    # detection 10 + 20; restart 30 (r1 has no step times: to its start only) + 10 + (420 -> 690 - 39 x 5 = 495);
    # recomputed: r1 redid 16..19 at n's 10 s (40), r2 (started over) 1..30 at its own 5 s (150: r1 has no step times).
    assert lost(found) == {"productive_s": 334, "pending_s": 1, "outages_s": 30, "detection_s": 30,
                           "restart_s": 115, "recomputed_s": 190}
    assert found["attempts"] == 3


def test_an_attempt_still_running_counts_to_now():
    running = job("c-r1", "RUNNING", final=False, submitted_at=at(380), start_time=at(385), attempt_of="c",
                  resumed_from={"path": "/ck", "step": 28}, progress={"step": 29, "step_at": at(420)})
    found = adds_up(goodput.account([("c", HUNG), ("c-r1", running)], at(500)))
    # recomputed: r1 has redone step 29 only (of the 30 the hung job reached), at 10 s.
    assert found["wall_s"] == 500 and lost(found) == {"productive_s": 418, "pending_s": 2, "detection_s": 60,
                                                      "restart_s": 10, "recomputed_s": 10}
    assert found["at"] == at(500)


def test_missing_fields_cost_nothing_and_an_unreadable_member_is_noted():
    bare = [("x", job("x", "FAILED")), ("x-r1", None), ("x-r2", job("x-r2", "RUNNING", final=False))]
    found = adds_up(goodput.account(bare, at(10)))
    assert found["wall_s"] == 0 and found["attempts"] == 2
    assert found["note"] == "not counted (no readable record): x-r1; no submission or start time known"
    assert goodput.text(found) == ""
    # values of the wrong kind or out of bounds (not through from_dict: as a record shaped by anyone could hold them)
    odd = StatusFile(submission_id="o", state="FAILED", final=True, submitted_at=at(0), end_time=True,
                    start_time=-5, phases={"pending_s": float("nan")},
                    progress={"step": 10 ** 40, "step_at": "soon", "step_s": ["x", float("inf"), 1e400, None]},
                    stall={"detected_at": 2 ** 70}, outages=[{"seconds": True}, {"seconds": -3}, {"seconds": 1e30}])
    later = StatusFile(submission_id="o-r1", state="SUCCEEDED", final=True, submitted_at=[1], start_time=at(50),
                      end_time=at(80), resumed_from={"step": "7", "path": 3}, progress={"step": -1})
    found = adds_up(goodput.account([("o", odd), ("o-r1", later)], at(100)))
    assert found["wall_s"] == 80 and found["outages_s"] == 80 and found["productive_s"] == 0  # capped at the wall


def test_the_parts_add_up_to_the_wall_for_any_chain():
    rng = random.Random(33)

    def value():
        return rng.choice([None, rng.randint(0, 4000) * 137, rng.random() * 900, "x", -1, True, 10 ** 30])

    for _ in range(400):
        chain = []
        for i in range(rng.randint(1, 4)):
            fields = {k: rng.choice([at(rng.randint(0, 900)), value()])
                      for k in ("submitted_at", "start_time", "end_time", "updated_at")}
            status = StatusFile(submission_id=f"r-{i}", state=rng.choice(["FAILED", "SUCCEEDED", "RUNNING"]),
                               final=rng.random() < 0.8, phases={"pending_s": value()},
                               progress={"step": value(), "step_at": at(rng.randint(0, 900)), "step_s": [value()]},
                               stall={"detected_at": value()}, resumed_from={"step": value(), "path": None},
                               outages=[{"seconds": value()}], **fields)
            chain.append((status.submission_id, status if rng.random() < 0.9 else None))
        adds_up(goodput.account(chain, at(rng.randint(0, 3000))))


def write(shared_root, status):
    directory = conventions.job_dir(shared_root, status.submission_id)
    jr.create_exclusive(directory)
    jr.Record(directory, status.submission_id).save_status(status)
    return directory


def read(shared_root, sid):
    with open(os.path.join(conventions.job_dir(shared_root, sid), "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_finalize_keeps_the_chain_goodput_in_the_first_jobs_record_and_the_final_line_shows_it(tmp_path):
    root = str(tmp_path)
    write(root, HUNG.copy())
    write(root, RESUMED.copy())
    kept = goodput.record(root, RESUMED, now=at(999))
    status = read(root, "c")
    assert status["goodput"] == kept and status["goodput"]["productive_s"] == 503 and status["state"] == "FAILED"
    assert StatusFile.from_dict(status).goodput.restart_s == 70 and read(root, "c-r1")["goodput"] is None
    shown = evidence.final_line(types.SimpleNamespace(sid="c-r1", config=types.SimpleNamespace(shared_root=root)),
                                RESUMED)
    assert shown == "c-r1: SUCCEEDED; goodput 76% (lost: pending 7 s, detection 60 s, restart 70 s, recomputed 20 s)"
    assert goodput.record(root, job("solo", submitted_at=at(0))) is None  # no chain: nothing read or written


def test_a_member_that_cannot_be_read_is_skipped_and_noted(tmp_path):
    root = str(tmp_path)
    write(root, job("c", "FAILED", submitted_at=at(0), end_time=at(10), attempts=["c-r1", "c-r2", "../x"]))
    directory = conventions.job_dir(root, "c-r1")
    jr.create_exclusive(directory)
    with open(os.path.join(directory, "status.json"), "w") as handle:
        handle.write("{not json")
    last = job("c-r2", submitted_at=at(20), start_time=at(21), end_time=at(40), attempt_of="c")
    kept = goodput.record(root, last, now=at(50))
    assert adds_up(kept)["note"] == "not counted (no readable record): c-r1" and kept["wall_s"] == 40
    assert read(root, "c")["goodput"]["attempts"] == 2
    # a first job that cannot be read: nothing is written, nothing raised
    assert goodput.record(root, job("z-r1", attempt_of="z")) is None


def test_a_retried_chain_followed_by_the_module_gets_its_goodput(ray, ray_config, capsys, monkeypatch, tmp_path):
    """The follower (action plugin and module, on the fake Ray and clock): tr-1 fails of a dead node after 100 s,
    tr-1-r1 resumes it and succeeds; tr-1's status.json holds the chain's goodput and the final line shows it."""
    (tmp_path / "sft.yaml").write_text("workload: sft\nmodel_path: /models/tiny\ntrain_files: /data/train.parquet\n"
                                       "resources: {nnodes: 1, n_gpus_per_node: 2}\nretries: {max: 1}\n")
    monkeypatch.setattr(action, "load_extra_vars",
                        lambda loader: {"spec": "sft", "submission_id": "tr-1", "env.WANDB_API_KEY": SECRET})
    shown = []
    monkeypatch.setattr(action.display, "display", shown.append)

    def now():
        return int(ray.clock.now * 1000)

    def executor(module_name, module_args, task_vars):
        sid = module_args.get("submission_id")
        if module_args["action"] == "wait":
            ray.clock.sleep(5)
            start = now()
            ray.clock.sleep(100 if sid == "tr-1" else 50)
            state = "FAILED" if sid == "tr-1" else "SUCCEEDED"
            ray.set(sid, state, start_time=start, end_time=now(), driver_exit_code=int(state == "FAILED"),
                    message="ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
            ray.clock.sleep(10)
        return module_result(capsys, **{k: v for k, v in module_args.items() if k != "token_path"})

    inventory = {"ray_config": ray_config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python"}
    result = make_action({"preflight": False, "poll_s": 5, "specs_dir": str(tmp_path), "extra_vars": True,
                          "wait": True}, inventory, executor).run(task_vars={"inventory_hostname": "head"})
    assert result["state"] == "SUCCEEDED" and result["submission_id"] == "tr-1-r1", result.get("msg")
    found = read(ray_config["shared_root"], "tr-1")["goodput"]
    # 5 s pending + 100 s + 10 s to the next submission + 5 s pending + 50 s; no step was logged, so no detection
    assert adds_up(found)["attempts"] == 2 and found["wall_s"] == 170
    assert lost(found) == {"pending_s": 10, "restart_s": 10, "productive_s": 150}
    assert read(ray_config["shared_root"], "tr-1-r1")["goodput"] is None
    assert any(line.endswith("tr-1-r1: SUCCEEDED; goodput 88% (lost: pending 10 s, restart 10 s)") for line in shown)


def test_a_link_counts_only_when_both_records_list_it(tmp_path):
    """Issue 38 §8: a record naming another as its first job (attempt_of) while that one does not list it, or listed
    by a first job while it names another, joins no chain: nothing is written into the other record."""
    root = str(tmp_path)
    write(root, job("victim", "FAILED", submitted_at=at(0), end_time=at(10)))
    intruder = job("intruder", submitted_at=at(0), end_time=at(5), attempt_of="victim")
    write(root, intruder)
    assert goodput.record(root, intruder, now=at(20)) is None
    assert read(root, "victim")["goodput"] is None
    assert goodput.shown(root, intruder) == ""
    # listed by c, but naming another first job: not c's member (its times do not count in c's account)
    write(root, job("c", "FAILED", submitted_at=at(0), end_time=at(10), attempts=["c-r1", "other-r1"]))
    write(root, job("other-r1", submitted_at=at(0), end_time=at(900), attempt_of="other"))
    last = job("c-r1", submitted_at=at(20), start_time=at(21), end_time=at(40), attempt_of="c")
    write(root, last)
    kept = goodput.record(root, last, now=at(50))
    assert kept["attempts"] == 2 and kept["wall_s"] == 40


def test_attempts_chain_follows_a_link_only_when_both_records_list_it(tmp_path):
    from ansible.module_utils.jobs.submission import attempts

    root = str(tmp_path)
    config = types.SimpleNamespace(shared_root=root)
    write(root, job("victim", "FAILED", attempts=["victim-r1"]))
    write(root, job("victim-r1", "FAILED", attempt_of="victim"))
    write(root, job("intruder", attempt_of="victim"))  # names victim, which does not list it
    assert attempts.chain(config, "intruder") == ("intruder", ["intruder"])
    assert attempts.chain(config, "victim-r1") == ("victim", ["victim", "victim-r1"])
    write(root, job("c", "FAILED", attempts=["c-r1", "victim-r1"]))  # lists victim's attempt as its own
    write(root, job("c-r1", "FAILED", attempt_of="c"))
    assert attempts.chain(config, "c") == ("c", ["c", "c-r1"])
