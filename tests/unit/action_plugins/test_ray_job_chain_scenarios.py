"""Issue 40, item 2: the follower and the watcher cannot disagree. Each scenario of a job's life runs twice over the
fake Ray, on a shared root of its own: once followed (job.yml -e do=wait through the action plugin) and once watched
(watch.yml passes through the action plugin, one every poll_s of the fake clock), with the same events at the same
look. Both must leave the same records (every attempt's status.json, timestamps aside) and decide the same outcome
for each attempt (chain.py's constants); a watcher pass that retries a job makes one call to the head."""

import json
import os
import re

import pytest
from ansible.module_utils.base import conventions
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.evidence import blame, stacks
from ansible.module_utils.jobs.life import around, chain
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobspec import model as jobspec
from ray_job_harness import HEAD, NOW, WORKER, action, fake_ray, make_action, module_result

POLL_S = 20
SID = "tr-1"
SFT = {"workload": "sft", "model_path": "/models/tiny", "train_files": "/data/train.parquet",
       "resources": {"nnodes": 1, "n_gpus_per_node": 2}}
DIED = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
SMALL = {**WORKER, "node_id": "n-w2", "node_ip": "10.0.0.12", "node_name": "w2",
         "resources_total": {"CPU": 8.0, "worker_node": 1.0}}  # a worker without the job's GPUs
BLAMED = {"node_ip": "10.0.0.11", "host": "w1", "why": "node died",
          "evidence": {"file": "debug/ray_nodes_post.json", "line": "10.0.0.11 DEAD"}}
# What differs between two runs of one scenario only because they looked at other moments: times, and the durations
# measured from them (phases, the chain's goodput).
TIMES = {"submitted_at", "updated_at", "start_time", "end_time", "since", "detected_at", "step_at", "log_at", "phases",
         "goodput", "admitted_at"}
STACKS_AT = re.compile(r"debug/stacks/\d+")


def running(fake, sid):
    fake.set(sid, "RUNNING", driver_node_id="n-w1", start_time=int(fake.clock.now * 1000))


def died(fake, sid):
    fake.set(sid, "FAILED", driver_exit_code=1, end_time=int(fake.clock.now * 1000), message=DIED)


def succeeded(fake, sid):
    fake.set(sid, "SUCCEEDED", driver_exit_code=0, end_time=int(fake.clock.now * 1000))


def head_restarted(fake, monkeypatch):
    head = dict(HEAD, start_time_ms=int(fake.clock.now * 1000))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [head, WORKER])


def lose_status(root):
    os.unlink(os.path.join(conventions.job_dir(root, SID), "status.json"))


# Each scenario: the spec's fields, the events before the n-th look at an attempt (a follower's wait, a watcher's
# pass), and the outcome the engine decides for each attempt it is asked about.
def hung(fake, sid, n, ctx):
    if sid == SID and n == 1:
        running(fake, sid)
        fake.logs[sid] = "step:1 - train/loss:5.0\n"
    elif sid != SID:
        succeeded(fake, sid)


def node_died(fake, sid, n, ctx):
    (died if sid == SID else succeeded)(fake, sid)


def rebuilt_ray_knows(fake, sid, n, ctx):
    if n == 1:
        lose_status(ctx["root"])
        head_restarted(fake, ctx["monkeypatch"])
        died(fake, sid)


def rebuilt_ray_forgot(fake, sid, n, ctx):
    if n == 1:
        lose_status(ctx["root"])
        head_restarted(fake, ctx["monkeypatch"])
        del fake.jobs[sid]


def stopped_by_a_person(fake, sid, n, ctx):
    if n == 1:
        running(fake, sid)
        fake.stop_to = None  # Ray takes its time: the record says who stopped it before Ray does
        ctx["module"](action="stop", submission_id=sid)
    elif n == 2:
        fake.set(sid, "STOPPED", end_time=int(fake.clock.now * 1000))


def deadline(fake, sid, n, ctx):
    if n == 1:
        running(fake, sid)


def too_few_healthy(fake, sid, n, ctx):
    died(fake, sid)


def exhausted(fake, sid, n, ctx):
    died(fake, sid)


SCENARIOS = {
    "hung": ({"timeouts": {"stall_s": 300, "max_run_s": None}, "retries": {"max": 1, "on": ["hung"]}}, hung,
             {SID: chain.SUBMITTED}),
    "node died": ({"retries": {"max": 1}}, node_died, {SID: chain.SUBMITTED}),
    "rebuilt, Ray knows it": ({"retries": {"max": 1}}, rebuilt_ray_knows, {SID: chain.NOT_DUE}),
    "rebuilt, Ray forgot it": ({"retries": {"max": 1}}, rebuilt_ray_forgot, {}),
    "stopped by a person": ({"retries": {"max": 1}}, stopped_by_a_person, {}),
    "stopped for a deadline": ({"timeouts": {"max_run_s": 60}, "retries": {"max": 1}}, deadline, {SID: chain.NOT_DUE}),
    "too few healthy workers": ({"retries": {"max": 1}}, too_few_healthy, {SID: chain.REFUSED}),
    "retries exhausted": ({"retries": {"max": 1}}, exhausted, {SID: chain.SUBMITTED, f"{SID}-r1": chain.NOT_DUE}),
}


def comparable(value, root):
    """A status.json without what only says when it was looked at, and with the shared root's path named alike."""
    if isinstance(value, dict):
        return {k: comparable(v, root) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [comparable(v, root) for v in value]
    return STACKS_AT.sub("debug/stacks/<at>", value.replace(root, "<root>")) if isinstance(value, str) else value


def differences(one, other, path=""):
    """Where two records differ, one line each (the assertion's message)."""
    if isinstance(one, dict) and isinstance(other, dict):
        return [line for k in sorted(set(one) | set(other))
                for line in differences(one.get(k), other.get(k), f"{path}.{k}".lstrip("."))]
    return [] if one == other else [f"{path}: {one!r} != {other!r}"]


def records(root):
    jobs = os.path.join(root, "jobs")
    found = {}
    for sid in sorted(n for n in os.listdir(jobs) if not n.startswith(".")):
        path = os.path.join(jobs, sid, "status.json")
        if not os.path.exists(path):  # lost, and nobody could rebuild it: the record's files say what is left
            found[sid] = sorted(n for n in os.listdir(os.path.join(jobs, sid)) if not n.startswith("."))
            continue
        with open(path, encoding="utf-8") as handle:
            found[sid] = comparable(json.load(handle), root)
    return found


def start(name, kind, tmp_path, monkeypatch, capsys):
    """A fresh fake Ray and shared root with the scenario's job submitted; (fake, ray_config, ctx, looks)."""
    fields, events, _ = SCENARIOS[name]
    fake = fake_ray(monkeypatch)
    root = tmp_path / kind
    root.mkdir()
    (root / conventions.SHARED_ROOT_MARK).write_text("0123abcd\n")
    config = {"address": "10.0.0.10:6379", "dashboard_url": "http://10.0.0.10:8265", "shared_root": str(root)}
    monkeypatch.setattr(stacks, "dump", lambda job, when: {"dir": f"debug/stacks/{when}", "files": [],
                                                           "summary": "rank 0 waits in all_reduce (gloo)"})
    if name == "too few healthy workers":
        monkeypatch.setattr(blame, "find", lambda *args, **kwargs: [dict(BLAMED)])
        monkeypatch.setattr(around, "HOLD_WAIT_S", 0)
        monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER, SMALL])
    spec = jobspec.resolve(SFT, name="sft", ray_config=config, cli={"submission_id": SID, **fields}, now=NOW,
                           token="abc123").to_dict()
    assert not module_result(capsys, spec=spec, ray_config=config, preflight=False).get("failed")
    ctx = {"root": str(root), "monkeypatch": monkeypatch,
           "module": lambda **args: module_result(capsys, ray_config=config, **args)}
    looks = {}

    def before_look(sid):
        looks[sid] = looks.get(sid, 0) + 1
        events(fake, sid, looks[sid], ctx)

    return fake, config, before_look


def plugin(config, executor, args):
    inventory = {"ray_config": config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python"}
    return make_action({"poll_s": POLL_S, **args}, inventory, executor).run(task_vars={"inventory_hostname": "head"})


def followed(name, tmp_path, monkeypatch, capsys):
    """job.yml -e id=tr-1 -e do=wait: (records, outcomes, the module calls)."""
    _, config, before_look = start(name, "follower", tmp_path, monkeypatch, capsys)
    calls, outcomes = [], {}

    def executor(module_name, module_args, task_vars):
        calls.append(module_args["action"])
        if module_args["action"] == "wait":
            before_look(module_args["submission_id"])
        out = module_result(capsys, **{k: v for k, v in module_args.items() if k != "token_path"})
        if module_args["action"] == "next":
            outcomes[module_args["submission_id"]] = out["outcome"]
        return out

    plugin(config, executor, {"action": "wait", "submission_id": SID})
    return records(config["shared_root"]), outcomes, calls


def watched(name, tmp_path, monkeypatch, capsys):
    """watch.yml every poll_s, nobody following: (records, outcomes, the module calls of each pass)."""
    fake, config, before_look = start(name, "watcher", tmp_path, monkeypatch, capsys)
    outcomes, passes, calls = {}, [], []
    jobs = os.path.join(config["shared_root"], "jobs")

    def executor(module_name, module_args, task_vars):
        calls.append(module_args["action"])
        return module_result(capsys, **{k: v for k, v in module_args.items() if k != "token_path"})

    for _ in range(40):
        for sid in open_index.listed(jobs) or []:
            before_look(sid)
        fake.clock.now += POLL_S  # the time a follower's wait takes
        out = plugin(config, executor, {"action": "watch"})
        assert not out.get("failed"), out
        passes.append((calls[:], out.get("attempts", [])))
        calls.clear()
        outcomes.update(out["outcomes"])
        unreadable = {line.split(":")[0] for line in out["unreadable"]}
        if set(open_index.listed(jobs) or []) <= unreadable and not open_index.listed(jobs, open_index.RETRY):
            break
    return records(config["shared_root"]), outcomes, passes


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_follower_and_the_watcher_leave_the_same_records(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(action.display, "display", lambda line: None)
    by_follower, decided_f, calls = followed(name, tmp_path, monkeypatch, capsys)
    by_watcher, decided_w, passes = watched(name, tmp_path, monkeypatch, capsys)
    assert by_follower == by_watcher, "\n".join(differences(by_follower, by_watcher))
    assert decided_f == decided_w == SCENARIOS[name][2]
    # One module call per decision: the follower's `next` per attempt that ended FAILED, the watcher's none beyond its
    # pass (the retry is made inside it).
    assert calls.count("next") == len(decided_f) and set(calls) <= {"wait", "next"}
    assert all(c == ["watch"] for c, _ in passes)
    retried = [attempts for _, attempts in passes if attempts]
    assert retried == [[f"{SID}-r1"]] if chain.SUBMITTED in decided_w.values() else retried == []
