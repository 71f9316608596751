"""A verl job's metrics (issue 23): verl's own file logger writes the record's metrics.jsonl (the runtime env's
VERL_FILE_LOGGER_PATH, on the shared root); a follower reads it, prints what people watch (step N of M, loss,
reward, pace, time left, the run in TensorBoard) and keeps its exact values in status.json. The module writes neither
metrics.jsonl nor a plot. The reading itself is tested in tests/unit/module_utils/jobs/test_progress.py."""

import json
import os

from ray_job_harness import GRPO_SID, make_verl_spec, record, run, submit

BOARD = "http://10.0.0.10:6006"
# verl's console rounds what it prints (4 significant digits); its file logger writes the exact values.
CONSOLE = ("\x1b[36m(TaskRunnerV1 pid=7)\x1b[0m step:1 - actor/pg_loss:-0.06 - critic/score/mean:0.08"
           " - timing_s/step:35.9\n"
           "\x1b[36m(TaskRunnerV1 pid=7)\x1b[0m step:2 - actor/pg_loss:0.01 - critic/score/mean:0.09"
           " - timing_s/step:3.5\n")
STEPS = {1: {"actor/pg_loss": -0.0612345678, "critic/score/mean": 0.08, "actor/kl_loss": 0.0, "timing_s/step": 35.9,
             "training/global_step": 1},
         2: {"actor/pg_loss": 0.0101234567, "critic/score/mean": 0.09, "actor/kl_loss": 0.003, "timing_s/step": 3.5,
             "training/global_step": 2}}


def start(capsys, ray, ray_config, **cli):
    code, out = submit(capsys, ray_config, make_verl_spec(ray_config, **cli), preflight=False)
    assert code == 0 and out["submission_id"] == GRPO_SID, out
    ray.set(GRPO_SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))


def wait(capsys, ray_config, **args):
    code, out = run(capsys, action="wait", submission_id=GRPO_SID, ray_config=ray_config, **args)
    assert code == 0, out
    return out


def status_of(ray_config):
    with open(os.path.join(record(ray_config, GRPO_SID), "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def read(ray_config, name):
    with open(os.path.join(record(ray_config, GRPO_SID), name), "rb") as handle:
        return handle.read()


def test_a_verl_jobs_progress_and_record_come_from_its_file_logger(ray, ray_config, capsys):
    ray_config = {**ray_config, "tensorboard_url": BOARD + "/"}
    start(capsys, ray, ray_config)
    [call] = ray.submitted
    assert call["runtime_env"]["env_vars"]["VERL_FILE_LOGGER_PATH"] == os.path.join(record(ray_config, GRPO_SID),
                                                                                    "metrics.jsonl")
    ray.logs[GRPO_SID] = CONSOLE.splitlines(keepends=True)[0]
    first = ray.log_metrics(GRPO_SID, 1, STEPS[1])
    out = wait(capsys, ray_config, poll_s=5)
    assert out["progress"] == (f"{GRPO_SID}: RUNNING for 5s; step 1 of 2, loss -0.06123, reward 0.08, 35.9 s/step,"
                               f" 0m35s left; {BOARD}/?runFilter=%5E{GRPO_SID}/#timeseries")
    assert read(ray_config, "metrics.jsonl") == first  # verl's file, as verl wrote it
    assert json.loads(read(ray_config, "logs/metrics.state.json"))["offset"] == len(first)

    second = ray.log_metrics(GRPO_SID, 2, STEPS[2])
    ray.logs[GRPO_SID] = CONSOLE
    ray.set(GRPO_SID, "SUCCEEDED", driver_exit_code=0, end_time=int(ray.clock.now * 1000) + 1000)
    out = wait(capsys, ray_config)
    assert out["done"] and out["progress"] == f"{GRPO_SID}: SUCCEEDED"
    status = status_of(ray_config)
    # The exact values verl logged (the console printed -0.06 and 0.01); PPO/GRPO's actor/pg_loss is the loss.
    assert (status["steps"], status["first_loss"], status["last_loss"]) == (2, -0.0612345678, 0.0101234567)
    assert status["last_step"] == "step 2 of 2, loss 0.01012, reward 0.09, 3.5 s/step"
    assert status["metrics_note"] is None and status["ended_short"] is None
    assert read(ray_config, "metrics.jsonl") == first + second
    assert "metrics.svg" not in os.listdir(record(ray_config, GRPO_SID))


def test_status_of_a_running_verl_job_prints_its_progress_line(ray, ray_config, capsys):
    start(capsys, ray, ray_config)
    ray.logs[GRPO_SID] = CONSOLE
    ray.log_metrics(GRPO_SID, 1, STEPS[1])
    ray.clock.now += 40
    code, out = run(capsys, action="status", submission_id=GRPO_SID, ray_config=ray_config)
    # No tensorboard_url in ray_config: no link.
    assert code == 0 and out["progress"] == (f"{GRPO_SID}: RUNNING for 40s; step 1 of 2, loss -0.06123, reward 0.08,"
                                             " 35.9 s/step, 0m35s left")
    assert out["state"] == "RUNNING" and not out["done"]


def test_a_verl_job_whose_file_logger_wrote_nothing_says_so(ray, ray_config, capsys):
    start(capsys, ray, ray_config)
    ray.logs[GRPO_SID] = CONSOLE  # the console logger printed two steps, the file logger none
    ray.set(GRPO_SID, "SUCCEEDED", driver_exit_code=0, end_time=int(ray.clock.now * 1000) + 1000)
    wait(capsys, ray_config)
    assert status_of(ray_config)["metrics_note"] == (
        "no step in metrics.jsonl, but the driver log printed step 2: verl's file logger did not write"
        " (trainer.logger without file?)")
    # Still a line people read (the console's step and loss), never verl's raw console line.
    assert status_of(ray_config)["last_step"] == "step 2 of 2, loss 0.01"
    assert "metrics.jsonl" not in os.listdir(record(ray_config, GRPO_SID))  # the module never writes it


def test_a_verl_job_takes_its_steps_and_losses_from_metrics_jsonl_only(ray, ray_config, capsys):
    start(capsys, ray, ray_config)
    ray.logs[GRPO_SID] = CONSOLE
    ray.set(GRPO_SID, "SUCCEEDED", driver_exit_code=0, end_time=int(ray.clock.now * 1000) + 1000)
    wait(capsys, ray_config)
    status = status_of(ray_config)
    assert (status["steps"], status["first_loss"], status["last_loss"]) == (None, None, None)


def test_a_verl_job_whose_metrics_are_cut_short_says_so(ray, ray_config, capsys):
    start(capsys, ray, ray_config)
    ray.logs[GRPO_SID] = CONSOLE
    ray.log_metrics(GRPO_SID, 1, STEPS[1])
    ray.write_metrics(GRPO_SID, b'{"step":2,"data":{"actor/pg_loss":0.01')  # the driver died mid-line
    ray.set(GRPO_SID, "FAILED", driver_exit_code=1, end_time=int(ray.clock.now * 1000) + 1000)
    wait(capsys, ray_config)
    status = status_of(ray_config)
    assert status["metrics_note"] == ("metrics.jsonl: its last line is cut short; it ends at step 1 but the driver"
                                      " log printed step 2")
    assert (status["steps"], status["last_loss"]) == (1, -0.0612345678)


def test_a_job_that_is_not_verl_has_no_metrics_files_or_note(ray, ray_config, capsys):
    submit(capsys, ray_config)  # smoke: not verl, so no file logger
    sid = ray.submitted[0]["submission_id"]
    assert "VERL_FILE_LOGGER_PATH" not in ray.submitted[0]["runtime_env"]["env_vars"]
    ray.logs[sid] = "hello\n"
    ray.set(sid, "SUCCEEDED", driver_node_id="n-w1", start_time=1, end_time=2)
    run(capsys, action="wait", submission_id=sid, ray_config=ray_config)
    names = set(os.listdir(record(ray_config, sid))) | set(os.listdir(os.path.join(record(ray_config, sid), "logs")))
    assert not {"metrics.jsonl", "metrics.svg", "metrics.state.json"} & names
    with open(os.path.join(record(ray_config, sid), "status.json"), encoding="utf-8") as handle:
        assert json.load(handle)["metrics_note"] is None


def test_a_symlinked_metrics_jsonl_is_never_read(ray, ray_config, capsys, tmp_path_factory):
    head = tmp_path_factory.mktemp("head")
    (head / "shadow.jsonl").write_text('{"step":77,"data":{"actor/pg_loss":4242.5}}\n')
    start(capsys, ray, ray_config)
    os.symlink(head / "shadow.jsonl", os.path.join(record(ray_config, GRPO_SID), "metrics.jsonl"))
    ray.logs[GRPO_SID] = CONSOLE
    out = wait(capsys, ray_config, poll_s=5)
    assert "77" not in out["progress"] and "4242" not in out["progress"]
    ray.set(GRPO_SID, "SUCCEEDED", driver_exit_code=0, end_time=int(ray.clock.now * 1000) + 1000)
    wait(capsys, ray_config)
    status = status_of(ray_config)
    assert status["last_loss"] != 4242.5 and status["metrics_note"].startswith("no step in metrics.jsonl")
    assert (head / "shadow.jsonl").read_text() == '{"step":77,"data":{"actor/pg_loss":4242.5}}\n'


def test_a_huge_step_time_in_metrics_jsonl_is_no_error(ray, ray_config, capsys):
    start(capsys, ray, ray_config, total_training_steps=10)
    ray.log_metrics(GRPO_SID, 1, {"actor/pg_loss": 0.5, "timing_s/step": 1e308})  # finite, and valid JSON
    code, out = run(capsys, action="wait", submission_id=GRPO_SID, ray_config=ray_config, poll_s=5)
    assert code == 0 and out["progress"].startswith(f"{GRPO_SID}: RUNNING for 5s; step 1 of 10"), out
