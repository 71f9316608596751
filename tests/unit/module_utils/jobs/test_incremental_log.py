"""jobs/evidence/driver_log.py: each look at a running job reads about what its driver log gained (Ray's tail,
placed by the record's anchor), appends only that to the record's driver.log and parses only that (issue 24); the
log is streamed whole, in bounded memory, only when the place cannot be found for sure."""

import json
import os

import pytest
from ansible.module_utils.jobs.evidence import driver_log as dl
from ansible.module_utils.jobs.evidence import evidence, hang
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record.status import StatusFile
from ansible.module_utils.verl import metrics

SECRET = "hf_0123456789abcdef"


class FakeRay:
    """Ray's two ways to a driver log: the state API's tail and stream, and the job API's whole text."""

    def __init__(self):
        self.text, self.served, self.calls = "", 0, []
        self.stream_error = None

    def log_tail(self, sid, lines):
        self.calls.append(("tail", lines))
        out = "".join(self.text.splitlines(keepends=True)[-lines:])
        self.served += len(out)
        return out

    def log_stream(self, sid):
        self.calls.append(("stream", None))
        data = self.text.encode("utf-8")
        self.served += len(self.text)
        for i in range(0, len(data), 5):  # chunks that split lines and characters
            if self.stream_error and i > len(data) // 2:
                raise self.stream_error
            yield data[i:i + 5]

    def logs(self, sid):
        self.calls.append(("whole", None))
        self.served += len(self.text)
        return self.text


class Job:
    def __init__(self, directory):
        jr.create_exclusive(directory)
        self.sid = "j-1"
        self.client = FakeRay()
        self.record = jr.Record(directory, self.sid)
        self.rec = jr.paths(directory)

    @staticmethod
    def redact(value):
        return value.replace(SECRET, "<redacted>") if isinstance(value, str) else value


@pytest.fixture
def job(tmp_path):
    return Job(str(tmp_path / "j-1"))


def step(n):
    return f"step:{n} - train/loss:{10 - n}.5 - train/lr:0.001\n"


def kept(job):
    with open(job.rec["driver_log"], encoding="utf-8") as handle:
        return handle.read()


def sidecar(job):
    with open(os.path.join(os.path.dirname(job.rec["driver_log"]), dl.PARSED_FILE), encoding="utf-8") as handle:
        return handle.read()


def test_a_poll_costs_what_the_log_gained_not_its_size(job, monkeypatch):
    folded = []
    fold = metrics.fold
    monkeypatch.setattr(metrics, "fold", lambda state, text, **kw: folded.append(text) or fold(state, text, **kw))
    job.client.text = f"token {SECRET}\n" + "".join(f"noise line {i} " + "x" * 80 + "\n" for i in range(20000))
    job.client.text += step(1)
    log = dl.refresh_log(job)  # the first look: the whole log, streamed
    assert kept(job) == job.redact(job.client.text) and log.parsed["last_step"] == 1
    assert SECRET not in sidecar(job)  # the anchor is a digest, never the text
    inode, served = os.stat(job.rec["driver_log"]).st_ino, job.client.served

    job.client.text += step(2) + "step:3 - train/lo"  # a line still being written is left for the next look
    folded.clear()
    log = dl.refresh_log(job)
    assert folded == [step(2)] and kept(job) == job.redact(job.client.text.rsplit("step:3", 1)[0])
    assert os.stat(job.rec["driver_log"]).st_ino == inode  # appended, not rewritten
    assert job.client.served - served < 40_000 < len(job.client.text) // 40  # a tail (200 lines), not the 1.8 MB log
    assert hang.last_step(log) == 2 and log.size == len(job.client.text)

    served, folded[:] = job.client.served, []
    assert dl.refresh_log(job).parsed["last_step"] == 2 and folded == []  # nothing new: nothing parsed
    job.client.text += "ss:7.5\ndone"  # the job ended: the rest is taken too
    log = dl.refresh_log(job, final=True)
    assert folded == ["step:3 - train/loss:7.5\ndone"] and kept(job) == job.redact(job.client.text)
    assert log.parsed["last_line"] == "step:3 - train/loss:7.5" and job.client.served - served < 40_000


def test_a_log_that_gained_more_than_the_tail_asks_for_grows_the_tail(job):
    job.client.text = step(1)
    dl.refresh_log(job)
    job.client.text += "".join(step(n) for n in range(2, 1000))
    assert dl.refresh_log(job).parsed["last_step"] == 999
    tails = [lines for kind, lines in job.client.calls if kind == "tail"]
    assert tails == [dl.MIN_LINES, dl.MIN_LINES * 8]  # asked again, eight times as many lines
    assert kept(job) == job.client.text


def test_a_log_that_repeats_itself_is_taken_whole_and_right(job):
    job.client.text = "waiting\n" * 50
    dl.refresh_log(job)
    job.client.text += "waiting\n" * 5 + step(1)  # the anchor shows more than once: no place for sure
    job.client.calls.clear()
    assert dl.refresh_log(job).parsed["last_step"] == 1
    assert ("stream", None) in job.client.calls and kept(job) == job.client.text


def test_another_text_or_a_changed_driver_log_is_taken_whole(job):
    job.client.text = step(1) + step(2)
    dl.refresh_log(job)
    with open(job.rec["driver_log"], "a", encoding="utf-8") as handle:
        handle.write("someone else's line\n")
    job.client.text += step(3)
    assert dl.refresh_log(job).parsed["last_step"] == 3
    assert kept(job) == step(1) + step(2) + step(3)
    job.client.text = step(5)  # not the text the record holds: taken whole
    assert dl.refresh_log(job).parsed["last_loss"] == [5, 5.5]
    assert kept(job) == step(5)


def test_without_ray_the_record_and_its_parse_are_used(job):
    job.client.text = step(1) + step(4)
    dl.refresh_log(job)
    job.client.text = ""  # the driver's node died: Ray serves nothing
    log = dl.refresh_log(job)
    assert log == step(1) + step(4) and log.parsed["last_step"] == 4
    assert kept(job) == step(1) + step(4)


def test_a_stream_that_breaks_off_leaves_the_record_as_it_was(job):
    job.client.text = step(1)
    dl.refresh_log(job)
    job.client.text = step(7) + "".join(step(n) for n in range(8, 40))  # another text: taken whole, streamed
    job.client.stream_error = ConnectionError("the node's agent went away")
    log = dl.refresh_log(job)
    assert kept(job) == step(1) and log.parsed["last_step"] == 1
    assert not [n for n in os.listdir(os.path.dirname(job.rec["driver_log"])) if n.startswith(".tmp-")]


def test_without_the_state_api_the_job_api_serves_the_log(job):
    def no_state_api(*args):
        raise RuntimeError("state API unavailable")

    job.client.log_tail = job.client.log_stream = no_state_api
    job.client.text = step(1)
    dl.refresh_log(job)
    job.client.text += step(2)
    assert dl.refresh_log(job).parsed["last_step"] == 2 and kept(job) == step(1) + step(2)


def test_a_corrupt_sidecar_means_the_log_is_taken_whole(job):
    job.client.text = step(1)
    dl.refresh_log(job)
    path = os.path.join(os.path.dirname(job.rec["driver_log"]), dl.PARSED_FILE)
    digest = "0" * 64
    for bad in ('{"offset": "x"}', "[1]", "not json",
                json.dumps({"offset": 1, "log_bytes": 0, "lines": 1, "parsed": metrics.new_state(),
                            "anchor": {"size": 1, "sha": digest, "last": "short"}}),
                json.dumps({"offset": 1, "log_bytes": 0, "lines": 1, "parsed": metrics.new_state(),
                            "anchor": {"size": 0, "sha": digest, "last": digest}})):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(bad)
        job.client.text += step(2)
        assert dl.refresh_log(job).parsed["last_step"] == 2
        assert kept(job) == job.client.text
        job.client.text = step(1)
        dl.refresh_log(job)


@pytest.mark.parametrize("field, value", [("last_loss", [5]), ("last_loss", 5), ("last_loss", {"a": 1}),
                                          ("first_loss", [1, "x"]), ("last_step", "2"), ("last_step", True),
                                          ("last_line", 7), ("last_line", "x" * 5000)])
def test_a_sidecar_whose_parse_has_another_shape_means_the_log_is_taken_whole(job, field, value):
    """The record is the job's to write (docs/security.md): a parse of another shape is never used, so a verl job's
    progress from its console (evidence.step_text) and its hang check never meet it."""
    job.client.text = step(1)
    dl.refresh_log(job)
    path = os.path.join(os.path.dirname(job.rec["driver_log"]), dl.PARSED_FILE)
    with open(path, encoding="utf-8") as handle:
        state = json.load(handle)
    state["parsed"][field] = value
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    assert dl.read_state(job) is None
    job.client.text += step(2)
    log = dl.refresh_log(job)
    assert log.parsed["last_step"] == 2 and log.parsed["last_loss"] == [2, 8.5] and kept(job) == job.client.text
    assert evidence.step_text(log, {"workload": "grpo", "total_training_steps": 4}) == "step 2 of 4, loss 8.5"
    assert hang.last_step(log) == 2


def test_a_big_log_is_shown_by_its_end_only(job):
    job.client.text = "".join(f"line {i} " + "y" * 200 + "\n" for i in range(8000)) + step(9)
    log = dl.refresh_log(job)
    assert len(log) <= dl.SHOWN and log.endswith(step(9)) and log.size == len(job.client.text)


def test_the_anchor_is_found_once_or_not_at_all():
    text = "a\nb\nc\n"
    anchor = dl.anchor_of("b\nc\n")
    assert dl.find_anchor(text, anchor) == [len(text)]
    assert dl.find_anchor("c\n" + text, dl.anchor_of("c\n")) == [2, len(text) + 2]
    assert dl.find_anchor("xb\nc\n", anchor) == []  # only from a line's start
    assert dl.anchor_of("") is None


def test_progress_is_tracked_from_the_parse(job):
    status = StatusFile("j-1", state="RUNNING", timeouts={"pending_s": 600}, retries={"max": 0, "on": []})
    job.client.text = step(1) + step(2)
    hang.track(status, dl.refresh_log(job), 0)
    assert status.progress.step == 2 and status.progress.log_bytes == len(job.client.text)


def test_each_look_carries_the_new_lines_of_verls_metrics(job):
    """refresh_log reads the record's metrics.jsonl alongside (progress.refresh: its new lines only) and hands the
    state on as .metrics, whose step hang.last_step prefers to the console's."""
    job.client.text = step(1) + step(2)
    with open(job.rec["metrics"], "w", encoding="utf-8") as handle:
        handle.write('{"step":1,"data":{"train/loss":9.25}}\n{"step":2,"data":{"train/loss":8.125}}\n'
                     '{"step":3,"data":{"train/lo')  # the logger is still writing step 3
    log = dl.refresh_log(job)
    assert (log.metrics["last_step"], log.metrics["last_loss"], log.metrics["partial"]) == (2, [2, 8.125], False)
    with open(job.rec["metrics"], "a", encoding="utf-8") as handle:
        handle.write('ss":7.0}}\n')
    log = dl.refresh_log(job)
    assert log.parsed["last_step"] == 2 and log.metrics["last_step"] == 3 and hang.last_step(log) == 3
    with open(job.rec["metrics"], "a", encoding="utf-8") as handle:
        handle.write('{"step":4,"data":{"train/loss":6.5}}')  # the driver died mid-line
    log = dl.refresh_log(job, final=True)
    assert log.metrics["last_step"] == 3 and log.metrics["partial"] is True
    # The console's steps are the log's parse only: metrics.jsonl is verl's file logger's, never made from them.
    job2_text = kept(job)
    assert "train/loss:9.25" not in job2_text
