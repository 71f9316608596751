"""A job's log and its metrics.jsonl are untrusted (issue 22, class 4): parsing them is linear whatever their lines'
lengths, and nothing in them reaches the operator's terminal as a control character. The console path is a job that is
not verl (its `step:N - key:value` lines); the metrics path is what verl's file logger (or anyone who can write the
share) put in the record's metrics.jsonl. The driver log's incremental read is in
tests/unit/module_utils/jobs/test_incremental_log.py, metrics.jsonl's in
tests/unit/module_utils/jobs/test_progress.py."""

import json
import os
import re
import time

import pytest
from ansible.module_utils.base import conventions, files
from ansible.module_utils.jobs.evidence import driver_log, evidence, hang, progress
from ansible.module_utils.jobs.record.status import StatusFile
from ansible.module_utils.verl import diagnosis, metrics
from blocking import within
from ray_job_harness import RecordJob

# Lines that made a pattern backtrack over the whole line from each of their many starts.
LONG_LINES = {
    "node_died": lambda n: "node " * (n // 5),  # r"node .* (was|is) dead"
    "nccl": lambda n: "ProcessGroupNCCL " * (n // 17),  # r"ProcessGroupNCCL.*(timed out|Timeout)"
    "oom": lambda n: "Killed process 1 " * (n // 17),  # r"Killed process \d+ .*oom"
    "hydra": lambda n: "Key '" * (n // 5),  # r"Key '[^']+' is not in struct"
}


def step_line(n):
    """A step line behind an unclosed Ray prefix full of pid=: the prefix pattern backtracked over each pid=."""
    return "(x " + "pid=1 " * (n // 6) + "step:1 - train/loss:1.0"


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def assert_linear(work, make):
    """100 times the input costs less than 300 times the time (quadratic: ~10,000 times). The small input is timed
    as 100 calls, so a clock's resolution cannot decide it."""
    small, big = make(2_000), make(200_000)
    t_small = best_of(3, lambda: [work(small) for _ in range(100)]) / 100
    t_big = best_of(3, lambda: work(big))
    assert t_big < 300 * t_small, f"2 KB: {t_small:.6f}s, 200 KB: {t_big:.6f}s"


@pytest.mark.parametrize("kind", sorted(LONG_LINES))
def test_diagnosis_is_linear_in_a_long_line(kind):
    assert_linear(lambda text: diagnosis.classify([("logs/driver.log", text)]), LONG_LINES[kind])


def test_the_step_search_is_linear_in_a_long_line():
    assert_linear(metrics.last_step_line, step_line)
    assert_linear(hang.last_step, step_line)
    assert_linear(lambda text: metrics.fold(metrics.new_state(), text), step_line)
    assert_linear(lambda text: metrics.fold(metrics.new_state(), text),
                  lambda n: "step:1 - " + " - ".join(["a:1"] * (n // 6)))


def test_reading_a_metrics_line_is_linear_in_its_length():
    """A metrics.jsonl line of many keys, of keys to leave out, of one long string: each read in linear time."""
    def many(n):
        return '{"step":1,"data":{' + ",".join(f'"k{i}":{i}' for i in range(n // 12)) + "}}"

    def left_out(n):
        return '{"step":1,"data":{' + ",".join(f'"k{i}\\u001b":"x"' for i in range(n // 16)) + "}}"

    for make in (many, left_out, lambda n: '{"step":1,"data":{"a":"' + "x" * n + '"}}'):
        assert_linear(metrics.file_row, make)
        assert_linear(lambda line: metrics.fold_rows({}, [line]), make)
    assert len(metrics.file_row(many(200_000))[1]) == metrics.KEYS_CAP  # a row keeps at most KEYS_CAP keys


def test_a_long_line_still_shows_its_signature_at_either_end():
    middle = "x" * 100_000
    assert diagnosis.classify([("d", "CUDA out of memory " + middle)])["kind"] == "cuda_oom"
    found = diagnosis.classify([("d", middle + " NodeDiedError")])
    assert found["kind"] == "node_died" and len(found["evidence"]["line"]) == diagnosis.EVIDENCE_WIDTH
    # The split patterns match what the regex matched.
    assert diagnosis.classify([("d", "node 10.0.0.1 was dead")])["kind"] == "node_died"
    assert diagnosis.classify([("d", "node was dead")]) is None
    assert diagnosis.classify([("d", "Killed process 12 (python) total-vm oom")])["kind"] == "oom_kill"


def test_huge_numbers_in_a_step_line_are_no_error():
    assert metrics.parse_line("step:" + "9" * 5000 + " - train/loss:1.0") is None
    assert metrics.parse_line("step:1 - train/loss:" + "1" * 5000 + " - a:2") == (1, {"a": 2.0})


# An OSC 52 clipboard write, clear screen and cursor home (7- and 8-bit), BEL, backspace, a bidi override; then CR.
ESCAPES = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[H\x9b2J\x07\x08\u202e"
NASTY = ESCAPES + "\r"


def test_printable_removes_controls_and_escapes_but_keeps_text():
    assert conventions.printable(f"a{NASTY}b\tc\nd") == "ab\tc\nd"
    assert conventions.one_line(f"a{NASTY}b\tc\nd") == "a b c d"  # the CR is a space on one line
    assert conventions.printable("\x1b[36m(pid=1)\x1b[0m step:1") == "(pid=1) step:1"
    # An unterminated OSC ends at the line's end, never swallowing the next line.
    assert conventions.printable("a\x1b]0;title\nnext") == "a\nnext"
    assert conventions.printable("é ü → 日本") == "é ü → 日本"


@pytest.fixture
def job(tmp_path):
    """A job on a record of its own (a command job: no verl spec, so no total steps)."""
    return RecordJob(str(tmp_path / "j-1"))


def running_info():
    return {"status": "RUNNING", "start_time": 1, "submission_id": "j-1"}


def running():
    return StatusFile("j-1", state="RUNNING", timeouts={"pending_s": 600}, retries={"max": 0, "on": []})


def assert_printable(line):
    assert not any(c in line for c in "\x1b\x07\x9b\r\x08\u202e\x00"), repr(line)


@pytest.mark.parametrize("log", [f"step:3 - train/loss:1.0 - note:{NASTY}x\n",
                                 f"{NASTY}(Actor pid=1) step:3 - train/loss:1.0{NASTY}\n"])
def test_control_characters_never_reach_the_progress_line(job, log):
    """The console path: a job that is not verl, whose own step lines are what its progress line shows."""
    status = running()
    for text in (log, driver_log.log_text(log, _parsed(log))):
        line = evidence.progress_line(job, running_info(), status, text)
        assert "step:3 - train/loss:1.0" in line
        assert_printable(line)
    status.state, status.reason, status.ended_short = "FAILED", f"X{NASTY}", None
    assert "\x1b" not in evidence.final_line(job, status)


# What verl's file logger could never write but the share may hold: each is left out, never shown.
E = json.dumps(ESCAPES)[1:-1]  # the escapes as JSON writes them (\u001b...)
NASTY_METRICS = {
    "escapes-in-a-key": '{"step":3,"data":{"train/loss' + E + '":9.0,"' + E + '":1,"train/loss":1.0}}',
    "escapes-in-a-value": '{"step":3,"data":{"train/loss":1.0,"perf/throughput":"' + E + '"}}',
    "nan-inf-bool-str-null": ('{"step":3,"data":{"train/loss":1.0,"critic/score/mean":NaN,"timing_s/step":Infinity,'
                              '"perf/throughput":-Infinity,"actor/entropy":true,"train/grad_norm":"0.5","x":null}}'),
    "nested-junk": '{"step":3,"data":{"train/loss":1.0,"critic/score/mean":{"a":[1,{"b":2}]},"x":[[1.5]]}}',
    "deeply-nested": '{"step":3,"data":{"train/loss":1.0}}\n{"step":4,"data":' + "[" * 100_000 + "]" * 100_000 + "}",
    "non-dict-rows": '{"step":3,"data":{"train/loss":1.0}}\n[1,2]\n"step:4 - train/loss:0.1"\n4\nnull\n'
                     '{"step":"4","data":{}}\n{"step":true,"data":{}}\n{"step":-4,"data":{}}\n{"step":4,"data":[1]}\n'
                     '{"step":4.0,"data":{}}\n{"step":4}',
    "not-json": '{"step":3,"data":{"train/loss":1.0}}\n' + NASTY + "step:4 - train/loss:0.1\n\udcff\x00{",
}


@pytest.mark.parametrize("lines", NASTY_METRICS.values(), ids=NASTY_METRICS.keys())
def test_nothing_odd_in_metrics_jsonl_reaches_the_progress_line(job, lines):
    """The metrics path: whatever metrics.jsonl holds, the progress line shows the step and the known values only."""
    job.config.tensorboard_url = "http://10.0.0.10:6006"
    job.write_metrics(lines.encode("utf-8", errors="surrogateescape") + b"\n")
    log = driver_log.refresh_log(job, final=True)
    line = evidence.progress_line(job, running_info(), running(), log)
    assert_printable(line)
    assert line.endswith("; step 3, loss 1; http://10.0.0.10:6006/?runFilter=%5Ej-1/#timeseries"), line
    bad = len(lines.splitlines()) - 1
    out_of_range = int("NaN" in lines)  # a row whose NaN and infinities are left out, and counted
    assert log.metrics["bad_lines"] == bad and log.metrics["bad_values"] == out_of_range
    problems = [f"{bad} line(s) are not verl's rows"] * bool(bad) + [
        "1 line(s) hold a number out of range (NaN, infinite or beyond ±1e+40), left out"] * out_of_range
    assert progress.note(log.metrics, "grpo", None) == ("metrics.jsonl: " + "; ".join(problems) if problems else None)
    with open(job.rec["metrics_state"], encoding="utf-8") as handle:
        assert_printable(handle.read())


def test_a_50_mb_metrics_line_is_skipped_a_capped_look_at_a_time(job, monkeypatch):
    job.log_metrics(1, {"train/loss": 2.0})
    job.write_metrics(b'{"step":2,"data":{"train/loss":0.1,"pad":"' + b"x" * (50 << 20) + b'"}}\n')
    job.log_metrics(3, {"train/loss": 1.0})
    reads, read_from = [], files.read_from
    monkeypatch.setattr(files, "read_from", lambda *a, **k: reads.append(read_from(*a, **k)) or reads[-1])
    looks = 0
    while (progress.refresh(job) or {}).get("last_step") != 3:
        looks += 1
        assert looks <= 8, "a look reads at most READ_CAP: 50 MB in 7 looks, then the next line"
    assert max(len(got[0]) for got in reads) <= progress.READ_CAP
    state = progress.read_state(job)
    assert (state["bad_lines"], state["last_loss"]) == (1, [3, 1.0])
    assert state["offset"] == os.path.getsize(job.rec["metrics"])
    assert [row["step"] for row in metrics.read_jsonl(job.rec["metrics"])] == [1, 3]  # the report's read skips it too


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_symlinked_or_fifo_metrics_jsonl_is_never_followed_and_never_blocks(job, tmp_path, kind):
    path = job.rec["metrics"]
    if kind == "symlink":
        (tmp_path / "head-only.jsonl").write_text('{"step":77,"data":{"train/loss":4242.5}}\n')
        os.symlink(tmp_path / "head-only.jsonl", path)
    else:
        os.mkfifo(path)
    job.text = "step:2 - train/loss:0.5\n"
    for final in (False, True):
        result = within(5, lambda final=final: driver_log.refresh_log(job, final), path if kind == "fifo" else None)
        assert "error" not in result and result["value"].metrics is None
        line = evidence.progress_line(job, running_info(), running(), result["value"])
        shown = re.sub(r" for \d+s;", " for Ns;", line)  # the time in its state may hold "77" itself
        assert "4242" not in shown and "77" not in shown and line.endswith("; step:2 - train/loss:0.5")
    assert within(5, lambda: metrics.read_jsonl(path), path if kind == "fifo" else None)["value"] == []
    assert progress.note(None, "ppo", 2).startswith("no step in metrics.jsonl, but the driver log printed step 2")


def _parsed(text):
    state = metrics.new_state()
    metrics.fold(state, text)
    return state


def test_the_diagnosis_evidence_and_the_logs_tail_are_printable():
    found = diagnosis.classify([("d", f"NodeDiedError {ESCAPES} here")])
    assert found["evidence"]["line"] == "NodeDiedError here"
    tail = driver_log.log_text(f"a{NASTY}\nb\n", _parsed(""))
    assert tail == "a\nb\n" and tail.splitlines()[-1] == "b"
