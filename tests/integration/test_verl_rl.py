"""GRPO and PPO train for real on the lab (issue 11): verl's main_ppo with vLLM's CPU build.

The `lab` regression suite runs smoke, sft, grpo and ppo through submit's path (the ray_job action) with their
gates; the specs run unchanged, sized by the lab's jobspec_defaults. Then GRPO resumes from the suite's
checkpoint through submit.yml. Each verl job leaves checkpoints, verl's own metrics.jsonl (its file logger) and
TensorBoard event files in its record, and the run a report with gates, TensorBoard links and a trend plot.
"""

import json
import os
import subprocess
import uuid
import xml.etree.ElementTree as ET

import browser
import pytest
from conftest import HEAD, IPS, RECORDS, ROOT, WORKER1, WORKER2, playbook, ssh

from ansible.module_utils.verl import metrics  # isort: skip  (the tests' shim: tests/conftest.py)

REPORTS = os.path.join(ROOT, ".lab", "private", "regression")
RUNNER = [os.path.join(ROOT, ".venv", "bin", "python"), os.path.join(ROOT, "scripts", "regression.py")]
RUN_ID = f"it-rl-{uuid.uuid4().hex[:6]}"
SVG = "{http://www.w3.org/2000/svg}"


pytestmark = pytest.mark.usefixtures("cluster_up")


def record(sid, *parts):
    return os.path.join(RECORDS, sid, *parts)


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def status(sid):
    return json.loads(read(record(sid, "status.json")))


def metrics_rows(sid):
    """verl's file logger's lines: {"step": N, "data": {key: value}}."""
    return [json.loads(line) for line in read(record(sid, "metrics.jsonl")).splitlines()]


def console_values(sid):
    """{step: {key: value}} of the driver log's console step lines, as verl printed them (no rounding asked)."""
    steps = {}
    for line in read(record(sid, "logs", "driver.log")).splitlines():
        parsed = metrics.parse_line(line)
        if parsed:
            steps.setdefault(parsed[0], {}).update(parsed[1])
    return steps


def tensorboard_scalars(sid):
    """{tag: {step: value}} of the record's TensorBoard event files, read by TensorBoard's own reader."""
    code = ("import json, sys; from tensorboard.backend.event_processing.event_accumulator import EventAccumulator; "
            "acc = EventAccumulator(sys.argv[1]); acc.Reload(); "
            "print(json.dumps({t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()['scalars']}))")
    out = subprocess.run([os.path.join(ROOT, ".venv-verl", "bin", "python"), "-c", code, record(sid, "tensorboard")],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return {tag: {int(k): v for k, v in by_step.items()} for tag, by_step in json.loads(out).items()}


def svg_texts(path):
    return {t.text for t in ET.parse(path).getroot().iter(SVG + "text")}


def run_suite(tmp_path, suite, run_id):
    proc = subprocess.run([*RUNNER, "--state-dir", str(tmp_path / "state"), "--suite", suite, "--run-id", run_id],
                          cwd=ROOT, capture_output=True, text=True, timeout=3000, check=False)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    report = json.loads(read(os.path.join(REPORTS, run_id, "report.json")))
    return proc, report


def test_lab_suite_trains_grpo_and_ppo_to_checkpoints_with_metrics_and_gates(tmp_path):
    proc, report = run_suite(tmp_path, "lab", RUN_ID)
    entries = {e["name"]: e for e in report["entries"]}
    assert {n: e["state"] for n, e in entries.items()} == dict.fromkeys(("smoke", "sft", "grpo", "ppo"), "SUCCEEDED")
    assert proc.returncode == 0 and report["ok"], [g for e in entries.values() for g in e["gates"] if not g["ok"]]
    for name, wanted in (("grpo", {"loss", "reward", "kl", "entropy", "grad_norm", "response_length", "step_time_s"}),
                         ("ppo", {"loss", "reward", "critic_loss", "entropy", "response_length", "step_time_s"})):
        sid = f"{RUN_ID}-{name}"
        st = status(sid)
        assert st["steps"] == 2 and st["driver_node_ip"] in (IPS[WORKER1], IPS[WORKER2]), st
        step2 = record(sid, "checkpoints", "global_step_2")
        assert os.path.isfile(os.path.join(step2, "actor", "model_world_size_1_rank_0.pt"))
        assert os.path.isdir(os.path.join(step2, "actor", "huggingface"))
        assert os.path.isdir(os.path.join(step2, "critic")) == (name == "ppo")
        assert read(record(sid, "checkpoints", "latest_checkpointed_iteration.txt")).strip() == "2"
        rows = metrics_rows(sid)
        assert [r["step"] for r in rows] == [1, 2]
        assert all(wanted <= set(metrics.summarize(r["data"])) for r in rows), rows
        assert all(0 <= metrics.summarize(r["data"])["reward"] <= 1 for r in rows), rows
        # The same values verl logged: what its console printed of them, exactly, and TensorBoard's (float32).
        console, board = console_values(sid), tensorboard_scalars(sid)
        for row in rows:
            shown = console[row["step"]]
            assert shown and all(row["data"][key] == value for key, value in shown.items()), (row, shown)
            for key in ("actor/pg_loss", "critic/score/mean"):
                assert board[key][row["step"]] == pytest.approx(row["data"][key], rel=1e-6, abs=1e-7)
        assert st["metrics_note"] is None and st["last_step"].startswith("step 2 of 2, loss "), st
        assert ", reward " in st["last_step"] and " s/step" in st["last_step"], st
        assert entries[name]["gates"] and all(g["ok"] for g in entries[name]["gates"])
    summary = read(os.path.join(REPORTS, RUN_ID, "summary.md"))
    assert "# PASS: lab, 4/4 passed" in summary and "## Gates" in summary
    board = f"http://{IPS[HEAD]}:6006/?runFilter=%5E{RUN_ID}-grpo/#timeseries"
    assert f"[TensorBoard]({board})" in summary and "[trend.svg](trend.svg)" in summary
    assert "grpo: last reward" in svg_texts(os.path.join(REPORTS, RUN_ID, "trend.svg"))
    # The cluster's TensorBoard, in a real browser, draws the GRPO run's reward and loss (2 steps: raw and smoothed).
    grpo, tags = f"{RUN_ID}-grpo", ("critic/score/mean", "actor/pg_loss")
    url = browser.tensorboard_url(f"http://{IPS[HEAD]}:6006", run=grpo, tags="^(critic/score/mean|actor/pg_loss)$")
    dom = browser.page_dom(url, until=lambda d: all(browser.tensorboard_lines(d).get(t) for t in tags), timeout=120)
    assert browser.tensorboard_runs(dom) == {f"{grpo}/tensorboard"}
    assert [browser.tensorboard_lines(dom)[t] for t in tags] == [[2, 2], [2, 2]]


def test_grpo_resumes_from_the_suite_checkpoint():
    first = f"{RUN_ID}-grpo"
    if not os.path.isdir(record(first, "checkpoints", "global_step_2")):
        pytest.skip("the suite's GRPO job left no checkpoint (see the test before)")
    resumed = f"grpo-resume-{uuid.uuid4().hex[:8]}"
    # resume_from, not overrides: the resume keys are the spec's (an override of trainer.resume_* is refused).
    run = playbook("submit.yml", "-e", "spec=grpo", "-e", f"submission_id={resumed}", "-e", "wait=true",
                   "-e", "total_training_steps=4", "-e", f"resume_from={first}")
    assert run.rc == 0, run
    st = status(resumed)
    assert st["state"] == "SUCCEEDED" and st["steps"] == 4, st
    assert [r["step"] for r in metrics_rows(resumed)] == [3, 4] and st["last_step"].startswith("step 4 of 4, "), st
    assert os.path.isdir(record(resumed, "checkpoints", "global_step_4", "actor"))
    # The first job's record is untouched by the resumed one.
    assert sorted(os.listdir(record(first, "checkpoints"))) == ["global_step_2", "latest_checkpointed_iteration.txt"]


def test_a_failed_gate_fails_its_entry_naming_the_metric(tmp_path):
    run_id = f"it-gate-{uuid.uuid4().hex[:6]}"
    proc, report = run_suite(tmp_path, "lab-gate-failing", run_id)
    assert proc.returncode != 0 and not report["ok"]
    (entry,) = report["entries"]
    assert entry["state"] == "SUCCEEDED" and not entry["passed"]
    case = ET.parse(os.path.join(REPORTS, run_id, "junit.xml")).getroot().find(".//testcase")
    failure = case.find("failure")
    assert failure.get("type") == "GATE" and failure.get("message").startswith("gate loss last ≤ 0.01: loss last = ")
    summary = read(os.path.join(REPORTS, run_id, "summary.md"))
    assert "SUCCEEDED (gate failed)" in summary and "✗ **sft** gate loss last ≤ 0.01" in summary


def test_vllm_shared_memory_of_earlier_jobs_is_cleaned():
    # Each RL job above started a vLLM server on a worker and removed what earlier jobs had left there, so a
    # worker holds at most one job's segments (vLLM makes two), not a set per job.
    for host in (WORKER1, WORKER2):
        names = ssh(host, "ls /dev/shm").split()
        assert len([n for n in names if n.startswith("psm_")]) <= 2, (host, names)
