"""jobs/evidence/progress.py: a verl job's metrics.jsonl (its file logger's) read a look at a time, only the bytes
it gained (the state in logs/metrics.state.json); the line people read (readable) and why the metrics are missing or
cut short (note). What the share may put in the file is in tests/unit/module_utils/test_untrusted_logs.py."""

import json
import os

import pytest
from ansible.module_utils.base import files
from ansible.module_utils.jobs.evidence import progress
from ansible.module_utils.verl import metrics
from ray_job_harness import RecordJob, file_logger_line

LOSS = "train/loss"
T0_NS = 1_735_787_045 * 10**9


@pytest.fixture
def job(tmp_path):
    return RecordJob(str(tmp_path / "j-1"))


@pytest.fixture
def reads(monkeypatch):
    """What each look read of metrics.jsonl: (offset, bytes) of every files.read_from."""
    seen, read_from = [], files.read_from

    def spy(path, offset, limit=files.READ_CAP, base=None):
        got = read_from(path, offset, limit, base)
        seen.append((offset, got[0] if got else None))
        return got

    monkeypatch.setattr(files, "read_from", spy)
    return seen


def size(job):
    return os.path.getsize(job.rec["metrics"])


def steps_of(state):
    return state["first_step"], state["last_step"], state["first_loss"], state["last_loss"]


# Incremental reads

def test_a_second_look_reads_only_the_bytes_the_file_gained(job, reads, monkeypatch):
    job.log_metrics(1, {LOSS: 2.0})
    job.log_metrics(2, {LOSS: 1.5})
    state = progress.refresh(job)
    first_size = size(job)
    with open(job.rec["metrics"], "rb") as handle:
        assert reads == [(0, handle.read())]
    assert steps_of(state) == (1, 2, [1, 2.0], [2, 1.5])
    assert state["offset"] == first_size == progress.read_state(job)["offset"]

    third = file_logger_line(3, {LOSS: 1.25})
    job.write_metrics(third)
    state = progress.refresh(job)
    assert reads[-1] == (first_size, third)  # from the offset the state kept: only the new line
    assert steps_of(state) == (1, 3, [1, 2.0], [3, 1.25])
    assert state["offset"] == size(job) == progress.read_state(job)["offset"]

    writes = []
    monkeypatch.setattr(job.record, "write_text", lambda path, text: writes.append(path))
    assert progress.refresh(job) == state and reads[-1] == (size(job), b"")  # nothing new: nothing read or written
    assert writes == []


def test_a_line_still_being_written_is_taken_once_it_is_whole(job):
    job.log_metrics(1, {LOSS: 2.0})
    whole = file_logger_line(2, {LOSS: 1.5, "train/lr": 0.001})
    job.write_metrics(whole[:20])
    state = progress.refresh(job)
    assert state["last_step"] == 1 and state["offset"] == size(job) - 20 and not state["partial"]
    assert progress.note(state, "sft", 1) is None  # a running job's unfinished line is no problem
    job.write_metrics(whole[20:])
    state = progress.refresh(job)
    assert state["last_step"] == 2 and state["last"] == {"loss": 1.5} and state["offset"] == size(job)
    assert state["bad_lines"] == 0


@pytest.mark.parametrize("tail", [b'{"step":2,"data":{"train/lo', b'{"step":2,"data":{"train/loss":1.5}}'])
def test_final_marks_a_last_line_without_its_newline_as_cut_short(job, tail):
    job.log_metrics(1, {LOSS: 2.0})
    job.write_metrics(tail)
    assert not progress.refresh(job)["partial"]
    state = progress.refresh(job, final=True)
    assert state["partial"] and state["last_step"] == 1 and state["bad_lines"] == 0
    assert progress.note(state, "sft", None) == "metrics.jsonl: its last line is cut short"
    assert progress.read_state(job)["partial"]  # kept for whoever looks next


def test_final_reads_the_file_to_its_end_a_capped_look_at_a_time(job, reads, monkeypatch):
    monkeypatch.setattr(progress, "READ_CAP", 100)
    for step in range(1, 11):
        job.log_metrics(step, {LOSS: 1.0 / step})
    assert progress.refresh(job)["last_step"] < 10  # a look reads at most READ_CAP
    state = progress.refresh(job, final=True)
    assert state["last_step"] == 10 and state["offset"] == size(job) and not state["partial"]
    assert all(len(data) <= 100 for _, data in reads)


def test_a_replaced_shorter_file_is_read_from_its_start(job):
    for step in (1, 2, 3):
        job.log_metrics(step, {LOSS: 2.0 / step})
    progress.refresh(job)
    fresh = job.rec["metrics"] + ".new"
    with open(fresh, "wb") as handle:  # a trainer that started again truncates it (FileLogger opens it "wb")
        handle.write(file_logger_line(1, {LOSS: 9.0}))
    os.replace(fresh, job.rec["metrics"])
    state = progress.refresh(job)
    assert steps_of(state) == (1, 1, [1, 9.0], [1, 9.0]) and state["offset"] == size(job)


def test_without_metrics_jsonl_there_is_no_state(job):
    assert progress.refresh(job) is None and progress.refresh(job, final=True) is None
    assert not os.path.lexists(job.rec["metrics_state"])


def test_a_metrics_jsonl_made_a_symlink_after_a_look_keeps_what_was_read(job, tmp_path):
    job.log_metrics(1, {LOSS: 2.0})
    progress.refresh(job)
    (tmp_path / "head-only.jsonl").write_bytes(file_logger_line(77, {LOSS: 4242.5}) * 50)
    os.replace(job.rec["metrics"], tmp_path / "old.jsonl")
    os.symlink(tmp_path / "head-only.jsonl", job.rec["metrics"])
    assert steps_of(progress.refresh(job, final=True)) == (1, 1, [1, 2.0], [1, 2.0])


def test_a_state_that_cannot_be_written_is_read_again_next_time(job, monkeypatch):
    job.log_metrics(1, {LOSS: 2.0})

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(job.record, "write_text", full)
    assert progress.refresh(job)["last_step"] == 1 and progress.read_state(job) is None
    monkeypatch.undo()
    job.log_metrics(2, {LOSS: 1.0})
    assert steps_of(progress.refresh(job)) == (1, 2, [1, 2.0], [2, 1.0])


# The state file is the share's data: taken only in the shape progress writes

def valid_state(job):
    """A state that says the file was read to its end and was at step 99: trusted, nothing is read again."""
    return {**progress.new_state(), "offset": size(job), "first_step": 99, "last_step": 99, "first_loss": [99, 0.5],
            "last_loss": [99, 0.5], "last": {"loss": 0.5}, "pace": [[98, 1000], [99, 2000]]}


def write_state(job, state):
    with open(job.rec["metrics_state"], "w", encoding="utf-8") as handle:
        handle.write(state if isinstance(state, str) else json.dumps(state))


def test_a_state_of_the_shape_progress_writes_is_trusted(job):
    job.log_metrics(1, {LOSS: 2.0})
    write_state(job, valid_state(job))
    state = progress.refresh(job)
    assert state["last_step"] == 99 and progress.step_s(state) == 1.0


def off(**fields):
    """A state one field off one that would be trusted."""
    return lambda valid: {**valid, **fields}


BAD_STATES = {
    "list": [], "text": "x", "null": None, "number": 7, "not-json": "{",
    "missing-key": lambda valid: {k: v for k, v in valid.items() if k != "pace"}, "extra-key": off(extra=1),
    "offset-text": off(offset="10"), "offset-negative": off(offset=-1), "offset-float": off(offset=1.0),
    "offset-bool": off(offset=True), "offset-null": off(offset=None), "bad_lines-text": off(bad_lines="0"),
    "skipping-int": off(skipping=1), "partial-null": off(partial=None), "last_step-text": off(last_step="99"),
    "first_step-float": off(first_step=1.0), "last_step-bool": off(last_step=True),
    "loss-short": off(last_loss=[99]), "loss-text": off(last_loss=[99, "0.5"]), "loss-bool": off(first_loss=[99, True]),
    "loss-step-text": off(last_loss=["99", 0.5]), "loss-long": off(last_loss=[99, 0.5, 1]),
    "loss-dict": off(last_loss={"99": 0.5}), "pace-dict": off(pace={"a": 1}), "pace-three": off(pace=[[1, 1]] * 3),
    "pace-flat": off(pace=[1, 2]), "pace-text": off(pace=[[1, "t"]]),
    "pace-nulls": off(pace=[None, None]),
    "last-list": off(last=[]), "last-text": off(last={"loss": "0.5"}), "last-bool": off(last={"loss": True}),
    "last-null": off(last={"loss": None}), "over-64-KB": off(last={f"k{i}": 0.5 for i in range(10_000)}),
}


@pytest.mark.parametrize("bad", BAD_STATES.values(), ids=BAD_STATES.keys())
def test_a_state_of_another_shape_is_ignored_and_the_file_read_from_its_start(job, bad):
    job.log_metrics(1, {LOSS: 2.0})
    job.log_metrics(2, {LOSS: 1.5})
    write_state(job, bad(valid_state(job)) if callable(bad) else bad)
    state = progress.refresh(job)
    assert steps_of(state) == (1, 2, [1, 2.0], [2, 1.5]) and state["offset"] == size(job)
    progress.readable(state, 10)  # and the line people read is made without error


def test_a_state_beyond_the_file_is_another_file_read_from_its_start(job):
    job.log_metrics(1, {LOSS: 2.0})
    write_state(job, {**valid_state(job), "offset": size(job) + 1000})
    assert steps_of(progress.refresh(job)) == (1, 1, [1, 2.0], [1, 2.0])


def test_a_symlinked_state_file_is_never_read_or_written_through(job, tmp_path):
    job.log_metrics(1, {LOSS: 2.0})
    target = tmp_path / "head-only.json"
    target.write_text(json.dumps(valid_state(job)))
    os.symlink(target, job.rec["metrics_state"])
    state = progress.refresh(job)
    assert state["last_step"] == 1  # not the target's 99
    assert json.loads(target.read_text())["last_step"] == 99 and not os.path.islink(job.rec["metrics_state"])


# Lines longer than a look reads

def test_a_line_longer_than_read_cap_is_skipped_and_counted(job, reads, monkeypatch):
    monkeypatch.setattr(progress, "READ_CAP", 64)
    job.log_metrics(1, {LOSS: 2.0})
    job.log_metrics(50, {LOSS: 0.001, "pad": "x" * 300})  # whole JSON, but longer than a look: never taken
    job.log_metrics(3, {LOSS: 1.0})
    for _ in range(10):  # a look at a time, as a follower's polls read it
        state = progress.refresh(job)
    assert steps_of(state) == (1, 3, [1, 2.0], [3, 1.0]) and state["bad_lines"] == 1
    assert state["offset"] == size(job) and not state["skipping"]
    assert all(len(data) <= 64 for _, data in reads)
    assert progress.note(state, "ppo", 3) == "metrics.jsonl: 1 line(s) are not verl's rows"


def test_a_long_last_line_is_skipped_across_looks_until_its_end(job, monkeypatch):
    monkeypatch.setattr(progress, "READ_CAP", 64)
    job.log_metrics(1, {LOSS: 2.0})
    job.write_metrics(b'{"step":2,"data":{"pad":"' + b"x" * 100)  # still being written, already too long
    for _ in range(4):
        state = progress.refresh(job)
    assert state["skipping"] and state["bad_lines"] == 1 and progress.read_state(job)["skipping"]
    job.write_metrics(b'x"}}\n' + file_logger_line(3, {LOSS: 1.0}))
    for _ in range(3):
        state = progress.refresh(job)
    assert steps_of(state) == (1, 3, [1, 2.0], [3, 1.0]) and state["bad_lines"] == 1 and not state["skipping"]


# The pace

def test_the_pace_is_verls_own_step_time_where_it_logs_one(job):
    job.log_metrics(1, {"actor/pg_loss": 0.5, "timing_s/step": 3.2})
    os.utime(job.rec["metrics"], ns=(T0_NS, T0_NS))
    state = progress.refresh(job)
    assert progress.step_s(state) == 3.2
    job.log_metrics(2, {"actor/pg_loss": 0.5, "timing_s/step": 4.0})
    os.utime(job.rec["metrics"], ns=(T0_NS + 10**9, T0_NS + 10**9))  # 1 s later: the logged time wins
    assert progress.step_s(progress.refresh(job)) == 4.0


def test_without_a_logged_step_time_the_pace_is_from_two_looks_mtimes(job):
    job.log_metrics(1, {LOSS: 2.0})
    os.utime(job.rec["metrics"], ns=(T0_NS, T0_NS))
    state = progress.refresh(job)
    assert state["pace"] == [[1, T0_NS // 10**6]] and progress.step_s(state) is None
    for step in (2, 3, 4, 5):
        job.log_metrics(step, {LOSS: 2.0 / step})
    os.utime(job.rec["metrics"], ns=(T0_NS + 40 * 10**9, T0_NS + 40 * 10**9))  # four steps in 40 s
    state = progress.refresh(job)
    assert state["pace"] == [[1, T0_NS // 10**6], [5, T0_NS // 10**6 + 40_000]]
    assert progress.step_s(state) == 10.0
    assert progress.readable(state, 10) == "step 5 of 10, loss 0.4, 10 s/step, 0m50s left"


def test_no_pace_from_a_look_that_did_not_read_to_the_end_or_from_a_clock_gone_back(job, monkeypatch):
    monkeypatch.setattr(progress, "READ_CAP", 40)
    for step in (1, 2, 3):
        job.log_metrics(step, {LOSS: 1.0})
    state = progress.refresh(job)
    assert state["last_step"] < 3 and state["pace"] == []  # the file's mtime says nothing of a step not yet read
    monkeypatch.undo()
    os.utime(job.rec["metrics"], ns=(T0_NS, T0_NS))
    progress.refresh(job)
    job.log_metrics(4, {LOSS: 1.0})
    os.utime(job.rec["metrics"], ns=(T0_NS - 10**9, T0_NS - 10**9))
    state = progress.refresh(job)
    assert len(state["pace"]) == 2 and progress.step_s(state) is None


# The line people read

def at(job, step, data, total=None):
    job.log_metrics(step, data)
    return progress.readable(progress.refresh(job), total)


GRPO_STEP = {"actor/pg_loss": 0.5321, "critic/score/mean": 0.41, "timing_s/step": 3.2, "perf/throughput": 1520.0,
             "actor/kl_loss": 0.001}


def test_readable_says_step_of_total_loss_reward_pace_throughput_and_time_left(job):
    assert progress.readable(progress.new_state()) is None and progress.readable(progress.new_state(), 100) is None
    assert at(job, 12, GRPO_STEP, 100) == "step 12 of 100, loss 0.5321, reward 0.41, 3.2 s/step, 1520 tok/s, 4m41s left"
    state = progress.refresh(job)
    assert progress.readable(state) == "step 12, loss 0.5321, reward 0.41, 3.2 s/step, 1520 tok/s"
    for total in (True, "100", 0, -5, 100.0, None):  # a total that is no positive int: as without one
        assert progress.readable(state, total) == progress.readable(state)
    assert progress.readable(state, 12) == "step 12 of 12, loss 0.5321, reward 0.41, 3.2 s/step, 1520 tok/s"


def test_readable_shows_only_what_the_workload_logs(job, tmp_path):
    assert at(job, 3, {"train/loss": 0.123456, "train/lr": 0.001}) == "step 3, loss 0.1235"  # SFT
    other = RecordJob(str(tmp_path / "j-2"))
    # SFT's token count over the step time; hours once the rest is long.
    assert at(other, 10, {"train/loss": 0.5, "train/global_tokens": 6400, "timing_s/step": 36.0}, 1000) == (
        "step 10 of 1000, loss 0.5, 36 s/step, 178 tok/s, 9h54m left")
    bare = RecordJob(str(tmp_path / "j-3"))
    assert at(bare, 0, {"val-core/acc": 0.25}, 5) == "step 0 of 5"


def test_a_huge_finite_step_time_is_no_error(job):
    line = at(job, 1, {"actor/pg_loss": 0.5, "timing_s/step": 1e308}, 10)
    assert line.startswith("step 1 of 10, loss 0.5")


# Why the metrics are missing or cut short

def state_at(last_step, bad_lines=0, partial=False):
    return {**progress.new_state(), "last_step": last_step, "first_step": last_step, "bad_lines": bad_lines,
            "partial": partial}


def test_note_says_why_a_verl_jobs_metrics_are_missing_or_cut_short():
    missing = "no metrics.jsonl: verl's file logger wrote no step (the trainer logged none)"
    assert progress.note(None, "grpo", None) == missing
    assert progress.note(progress.new_state(), "sft", None) == missing  # a file without a step
    silent = ("no step in metrics.jsonl, but the driver log printed step 5: verl's file logger did not write "
              "(trainer.logger without file?)")
    assert progress.note(None, "ppo", 5) == silent
    assert progress.note(state_at(None, bad_lines=2), "ppo", 5) == silent + "; 2 line(s) of it are not verl's rows"
    assert progress.note(state_at(None, bad_lines=2), "ppo", None) == (
        "metrics.jsonl has no row of verl's: its 2 line(s) are not verl's rows")
    assert progress.note(state_at(3), "ppo", 5) == "metrics.jsonl: it ends at step 3 but the driver log printed step 5"
    assert progress.note(state_at(3, bad_lines=2), "ppo", 3) == "metrics.jsonl: 2 line(s) are not verl's rows"
    assert progress.note(state_at(3, bad_lines=1, partial=True), "grpo", 4) == (
        "metrics.jsonl: its last line is cut short; it ends at step 3 but the driver log printed step 4; "
        "1 line(s) are not verl's rows")
    for console in (None, 2, 3):  # the console behind or level with the file: whole
        assert progress.note(state_at(3), "sft", console) is None


@pytest.mark.parametrize("workload", ["command", "smoke", None, "other"])
def test_note_says_nothing_for_a_job_that_is_not_verl(workload):
    for state in (None, progress.new_state(), state_at(3, bad_lines=2, partial=True)):
        assert progress.note(state, workload, 9) is None


def test_read_jsonl_and_refresh_agree_on_the_rows(job):
    """The report (verl.metrics.read_jsonl) and a follower (progress) read the same file the same way."""
    job.log_metrics(1, {"actor/pg_loss": 0.5, "critic/score/mean": 0.25})
    job.write_metrics(b"not a row\n")
    job.log_metrics(2, {"actor/pg_loss": 0.25, "critic/score/mean": 0.5})
    state = progress.refresh(job, final=True)
    rows = metrics.read_jsonl(job.rec["metrics"])
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 0.5), (2, 0.25)]
    assert (state["first_loss"], state["last_loss"], state["last"]) == ([1, 0.5], [2, 0.25], {"loss": 0.25,
                                                                                            "reward": 0.5})
    assert state["bad_lines"] == 1


def test_from_console_keeps_only_the_console_step_and_its_loss():
    assert progress.readable(progress.from_console({"last_step": 3, "last_loss": [3, 0.5]}), 10) == \
        "step 3 of 10, loss 0.5"
    # A loss from an earlier step is not this step's; nothing else of the console line is taken.
    assert progress.readable(progress.from_console({"last_step": 4, "last_loss": [3, 0.5]}), None) == "step 4"
    for parsed in (None, {}, {"last_step": None}, {"last_step": "7"}, {"last_step": True, "last_loss": [True, 1.0]}):
        assert progress.readable(progress.from_console(parsed)) is None
    for loss in ([3], 3, {"a": 1}, [3, "0.5"], [3, True], "3,0.5"):  # a loss of another shape is no loss
        assert progress.readable(progress.from_console({"last_step": 3, "last_loss": loss})) == "step 3"
