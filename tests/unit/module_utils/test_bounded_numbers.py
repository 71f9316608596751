"""Every number read from a job's files is bounded where it is read, and the report reads metrics.jsonl in bounded
memory (issue 31). A 400-digit integer in metrics.jsonl (a value, or a step) made float() raise OverflowError in
verl.metrics, which stopped progress.refresh, the watcher's pass, the job's own wait and the regression report; a
5000-digit one is past what Python parses (ValueError). Each is now a value or a line left out and noted."""

import itertools
import json
import math
import os
import tracemalloc

import pytest
from ansible.module_utils.base import files
from ansible.module_utils.jobs.evidence import driver_log, evidence, hang, progress
from ansible.module_utils.jobs.record.status import StatusFile
from ansible.module_utils.regression import gates as rg
from ansible.module_utils.regression import report as rr
from ansible.module_utils.verl import checkpoints as ck
from ansible.module_utils.verl import metrics
from ray_job_harness import RecordJob

HUGE = "9" * 400
HUGER = "9" * 5000  # past Python's 4300 digits: int() of it raises ValueError
ODD_VALUES = {"400 digits": HUGE, "-400 digits": "-" + HUGE, "5000 digits": HUGER, "NaN": "NaN",
              "Infinity": "Infinity", "-Infinity": "-Infinity", "1e400": "1e400", "past VALUE_MAX": "1e41"}
ODD_STEPS = {"400 digits": HUGE, "5000 digits": HUGER, "past STEP_MAX": str(files.STEP_MAX + 1), "NaN": "NaN",
             "Infinity": "Infinity", "1e400": "1e400"}


def line(step, data):
    return f'{{"step":{step},"data":{{' + ",".join(f'"{k}":{v}' for k, v in data.items()) + "}}"


# base/files.py: the bounds and the JSON they read

def test_the_bounds_refuse_what_no_arithmetic_could_take():
    assert files.bounded_number(10 ** 40) == 10 ** 40 and files.bounded_number(-1e40) == -1e40
    for odd in (int(HUGE), -int(HUGE), 10 ** 41, 1e41, math.nan, math.inf, -math.inf, True, "1", None):
        assert files.bounded_number(odd) is None, odd
    assert files.bounded_step(0) == 0 and files.bounded_step(files.STEP_MAX) == files.STEP_MAX
    for odd in (-1, files.STEP_MAX + 1, int(HUGE), 1.0, True, "3"):
        assert files.bounded_step(odd) is None, odd
    assert files.bounded_int(5, 4) is None and files.bounded_int(4, 4) == 4 and files.bounded_int(0, low=1) is None


def test_loads_bounded_reads_a_huge_integer_as_infinity_never_raising():
    got = files.loads_bounded(f'{{"a":{HUGE},"b":-{HUGE},"c":{HUGER},"d":12,"e":NaN,"f":-{"1" * 63}}}')
    assert got["a"] == math.inf and got["b"] == -math.inf and got["c"] == math.inf and got["d"] == 12
    assert math.isnan(got["e"]) and got["f"] == -int("1" * 63)
    with pytest.raises(ValueError):  # what json.loads does with it, for comparison
        json.loads(HUGER)
    with pytest.raises(ValueError):
        files.loads_bounded("{")


# verl/metrics.py: one line

@pytest.mark.parametrize("value", ODD_VALUES.values(), ids=ODD_VALUES.keys())
def test_a_value_out_of_range_is_left_out_and_counted_the_row_kept(value):
    text = line(4, {"train/loss": 1.5, "x": value, "n": 3})
    assert metrics.read_row(text) == (4, {"train/loss": 1.5, "n": 3}, 1)
    assert metrics.file_row(text) == (4, {"train/loss": 1.5, "n": 3})
    counts = {}
    assert metrics.fold_rows({}, [text], counts) == 0 and counts == {"bad_values": 1}


@pytest.mark.parametrize("step", ODD_STEPS.values(), ids=ODD_STEPS.keys())
def test_a_step_out_of_range_makes_the_line_no_row(step):
    text = line(step, {"train/loss": 1.5})
    assert metrics.read_row(text) is None and metrics.file_row(text) is None
    assert metrics.fold_rows({}, [text]) == 1
    assert metrics.file_row(line(files.STEP_MAX, {"a": 1})) == (files.STEP_MAX, {"a": 1})


def test_a_console_value_out_of_range_is_left_out():
    assert metrics.parse_line("step:3 - a:1e41 - b:" + "9" * 60 + " - c:2.5") == (3, {"c": 2.5})


# verl/metrics.py: the report's read, streamed

def write(path, lines):
    path.write_text("".join(text + "\n" for text in lines))
    return str(path)


ODD_FILE = [line(1, {"train/loss": 2.0}), line(2, {"train/loss": 1.5, "x": HUGE}), line(HUGE, {"train/loss": 0.1}),
            line(2, {"y": HUGER}), line(HUGER, {"train/loss": 0.1}), line(3, {"train/loss": "NaN", "z": "Infinity"}),
            line(4, {"train/loss": 1.0})]


def test_read_metrics_reads_around_huge_numbers_and_notes_them(tmp_path):
    got = metrics.read_metrics(write(tmp_path / metrics.METRICS_FILE, ODD_FILE))
    assert [row["step"] for row in got["rows"]] == [1, 2, 3, 4] == [row["step"] for row in metrics.read_jsonl(
        str(tmp_path / metrics.METRICS_FILE))]
    assert (got["lines"], got["bad_lines"], got["bad_values"]) == (5, 2, 3)
    assert got["note"] == ("metrics.jsonl: 2 line(s) are not verl's rows; 3 line(s) hold a number out of range (NaN, "
                           "infinite or beyond ±1e+40), left out")
    assert got["stats"]["loss"]["count"] == 3 and got["stats"]["step"]["last"] == 4


def test_read_metrics_keeps_at_most_its_caps_thinned_evenly_and_reduces_every_row(tmp_path):
    n = 20_000
    path = write(tmp_path / metrics.METRICS_FILE, (line(s, {"train/loss": s, "a": 1}) for s in range(1, n + 1)))
    got = metrics.read_metrics(path, rows_cap=100)
    steps = [row["step"] for row in got["rows"]]
    assert len(steps) <= 100 + 2 and steps[0] == 1 and steps[-1] == n  # the first and last step's rows too
    assert got["stride"] == 256 and {b - a for a, b in itertools.pairwise(steps[1:-1])} == {256}  # evenly
    assert "kept (every 256th step's, the first and the last)" in got["note"]
    loss = got["stats"]["loss"]
    assert (loss["count"], loss["first"], loss["last"], loss["min"], loss["max"]) == (n, 1, n, 1, n)
    assert rg.reduce_stat(loss, "mean") == (n + 1) / 2 and rg.reduce_stat(loss, "change") == n - 1
    assert len(metrics.read_jsonl(path)) <= metrics.ROWS_CAP + 2


def test_read_metrics_keeps_at_most_names_cap_names(tmp_path):
    wide = [line(s, {f"k{s}_{i}": 1 for i in range(1000)}) for s in range(1, 6)]
    got = metrics.read_metrics(write(tmp_path / metrics.METRICS_FILE, wide))
    assert len(got["stats"]) == metrics.NAMES_CAP + 1  # and "step"
    assert got["note"] == f"metrics.jsonl: 904 value(s) under names past the first {metrics.NAMES_CAP} were left out"


def test_read_metrics_memory_is_bounded_by_its_caps_not_by_the_file(tmp_path, monkeypatch):
    """What reading holds at once is a chunk and the rows kept: a 1 MB file peaks far below its size (reading it
    whole and splitting it into lines took ~25 times its size)."""
    monkeypatch.setattr(metrics, "CHUNK", 1 << 14)
    path = write(tmp_path / metrics.METRICS_FILE, (line(s, {"train/loss": 0.5, "timing_s/step": 2.25})
                                              for s in range(1, 20_001)))
    size = os.path.getsize(path)
    tracemalloc.start()
    try:
        got = metrics.read_metrics(path, rows_cap=200)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got["lines"] == 20_000 and len(got["rows"]) <= 202
    assert size > 1_000_000 and peak < size / 4, (size, peak)


def test_read_metrics_notes_a_file_longer_than_its_limit(tmp_path):
    path = write(tmp_path / metrics.METRICS_FILE, [line(s, {"a": s}) for s in (1, 2, 3)])
    got = metrics.read_metrics(path, limit=len(line(1, {"a": 1})) + 1)
    assert [row["step"] for row in got["rows"]] == [1]
    assert got["note"] == f"metrics.jsonl: only its first {len(line(1, {'a': 1})) + 1} bytes were read"


# jobs/: a follower's look, the hang detector, the record's steps

@pytest.fixture
def job(tmp_path):
    return RecordJob(str(tmp_path / "j-1"))


def running():
    return StatusFile("j-1", state="RUNNING", timeouts={"pending_s": 600, "max_run_s": None, "stall_s": 60},
                     retries={"max": 0, "on": []}, workload="grpo")


def test_a_followed_job_reads_around_huge_numbers_and_notes_them(job):
    status = running()
    job.write_metrics("".join(text + "\n" for text in ODD_FILE[:3]).encode())
    log = driver_log.refresh_log(job)
    hang.track(status, log, 1_000)
    assert log.metrics["last_step"] == 2 and status.progress.step == 2
    job.write_metrics("".join(text + "\n" for text in ODD_FILE[3:]).encode())
    log = driver_log.refresh_log(job, final=True)
    hang.track(status, log, 61_000)
    assert status.progress.step == 4 and status.progress.step_s == [30.0]
    assert (log.metrics["bad_lines"], log.metrics["bad_values"], log.metrics["last_loss"]) == (2, 3, [4, 1.0])
    evidence.took_steps(job, status, log, {"workload": "grpo", "total_training_steps": 10})
    assert status.steps == 4 and status.last_step.startswith("step 4 of 10, loss 1")
    assert status.metrics_note == ("metrics.jsonl: 2 line(s) are not verl's rows; 3 line(s) hold a number out of "
                                   "range (NaN, infinite or beyond ±1e+40), left out")
    StatusFile.from_dict(status.to_dict())  # what is kept is what the record's model takes
    assert hang.hung(status, 200_000).step == 4


@pytest.mark.parametrize("odd", [int(HUGE), -1, files.STEP_MAX + 1, 1.5, math.nan, True])
def test_a_state_file_holding_a_number_out_of_range_is_not_trusted(job, odd):
    job.log_metrics(1, {"train/loss": 2.0})
    state = progress.refresh(job)
    for key in ("last_step", "first_loss") + (("offset",) if odd != files.STEP_MAX + 1 else ()):  # a fine offset
        bad = {**state, key: [odd, 1.0] if key == "first_loss" else odd}
        with open(job.rec["metrics_state"], "w") as handle:
            handle.write(json.dumps(bad))
        assert progress.read_state(job) is None, key
    with open(job.rec["metrics_state"], "w") as handle:
        handle.write(json.dumps(state).replace(f'"offset": {state["offset"]}', '"offset": ' + HUGER))
    assert progress.read_state(job) is None
    assert progress.refresh(job)["last_step"] == 1  # read again from the start


def test_a_driver_log_sidecar_holding_a_huge_number_is_not_trusted(job):
    job.text = "step:1 - train/loss:1.0\n"
    driver_log.refresh_log(job)
    assert driver_log.read_state(job) is not None
    sidecar = os.path.join(os.path.dirname(job.rec["driver_log"]), driver_log.PARSED_FILE)
    with open(sidecar) as handle:
        text = handle.read()
    for key in ("offset", "lines", "last_step"):
        state = json.loads(text)
        (state["parsed"] if key == "last_step" else state)[key] = 10 ** 30
        with open(sidecar, "w") as handle:
            handle.write(json.dumps(state))
        assert driver_log.read_state(job) is None, key
    with open(sidecar, "w") as handle:
        handle.write(text.replace('"log_bytes": ', '"log_bytes": ' + HUGER + ', "x": '))
    assert driver_log.read_state(job) is None


def test_hang_takes_no_number_out_of_range_from_status_progress():
    status = running()
    status.progress = {"step": int(HUGE), "step_at": int(HUGE), "log_bytes": int(HUGE), "log_at": -int(HUGE),
                       "step_s": [int(HUGE), math.nan, math.inf, 1e41, 10.0, "x"]}
    status.timeouts.stall_s = int(HUGE)
    assert hang.limit_s(status) == 900  # no stall_s in range: 10 times the median of [10.0], at least the floor
    assert hang.idle_s(status, 5_000) == (0.0, "step")
    hang.track(status, "step:3 - train/loss:1.0\n", 5_000)
    assert status.progress.to_dict() == {"step": 3, "step_at": 5_000, "log_bytes": 24, "log_at": 5_000,
                                         "step_s": [10.0]}
    assert hang.hung(status, 5_000 + 901_000).step == 3
    log = driver_log.log_text("", metrics.new_state(), metrics={**progress.new_state(), "last_step": int(HUGE)})
    assert hang.last_step(log) is None


# verl/checkpoints.py: a step folder or a tracker past STEP_MAX

def test_a_checkpoint_step_past_step_max_is_skipped_saying_so(tmp_path):
    for step in (2, files.STEP_MAX + 1):
        folder = tmp_path / f"global_step_{step}"
        folder.mkdir()
        (folder / "model_world_size_1_rank_0.pt").write_bytes(b"x")
    (tmp_path / ck.TRACKER).write_text(str(10 ** 17))
    assert ck.read_tracker(str(tmp_path)) == (None, f"names a step beyond {files.STEP_MAX}")
    (tmp_path / ck.TRACKER).write_text("2")
    found = ck.newest_whole([str(tmp_path)], 1)
    assert found["step"] == 2
    assert found["skipped"] == [(str(tmp_path / f"global_step_{files.STEP_MAX + 1}"),
                                 f"its step is beyond {files.STEP_MAX}")]


# regression/: the report over such a record, and over an earlier report.json holding huge numbers

def test_the_report_module_reads_around_huge_numbers_and_notes_them(tmp_path, capsys):
    import ray_regression_report
    from ansible.module_utils.testing import patch_module_args

    record = tmp_path / "jobs" / "run-g"
    (record / "logs").mkdir(parents=True)
    (record / "status.json").write_text(json.dumps({"submission_id": "run-g", "state": "SUCCEEDED", "final": True}))
    write(record / "metrics.jsonl", ODD_FILE)
    earlier = tmp_path / "regression" / "run-0"
    earlier.mkdir(parents=True)
    (earlier / "report.json").write_text(
        '{"run_id": "run-0", "suite": "s", "started_at": 0, "entries": [{"name": "g", "passed": true, '
        f'"state": "SUCCEEDED", "last_loss": {HUGE}, "durations": {{"total_s": {HUGE}}}, '
        f'"metrics": {{"last loss": -{HUGE}}}}}]}}')
    args = {"run_id": "run", "suite": "s", "started_at": 1, "shared_root": str(tmp_path),
            "entries": [{"name": "g", "spec": "grpo", "gates": [{"metric": "loss", "at": "max", "max": 2},
                                                                 {"metric": "step", "at": "last", "min": 4}]}]}
    with patch_module_args(args), pytest.raises(SystemExit):
        ray_regression_report.main()
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["failed_gates"] == []
    written = json.loads((tmp_path / "regression" / "run" / "report.json").read_text())
    entry = written["entries"][0]
    assert entry["metrics"]["last loss"] == 1.0 and entry["metrics_note"].startswith("metrics.jsonl: 2 line(s)")
    assert "## Metrics notes" in out["summary"] and "3 line(s) hold a number out of range" in out["summary"]
    assert "g last_loss: inf → –" in out["summary"]  # the earlier report's 400-digit loss, shown as what it is
    assert os.path.isfile(tmp_path / "regression" / "run" / rr.TREND_FILE)


def test_an_earlier_report_with_a_huge_start_time_is_skipped(tmp_path):
    for name, started in (("a", HUGE), ("b", "1e400"), ("c", "5")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(
            f'{{"run_id": "{name}", "suite": "s", "started_at": {started}, "entries": []}}')
    assert [r["run_id"] for r in rr.load_previous(str(tmp_path), "s", "x")] == ["c"]


def test_a_gate_bound_out_of_range_is_refused_never_raised():
    with pytest.raises(rg.GateError, match="max must be a number"):
        rg.check_gates([{"metric": "loss", "max": int(HUGE)}])
