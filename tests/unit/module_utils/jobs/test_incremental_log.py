"""module_utils/jobs/evidence.py refresh_log: Ray's text is fetched whole (its job API has no ranged read), but each
look appends to the record's driver.log only what the log gained, and parses only that (issue 22, class 4)."""

import json
import os

from ansible.module_utils import verl_metrics as vm
from ansible.module_utils.jobs import evidence, hang
from ansible.module_utils.jobs import record as jr
from ansible.module_utils.jobs.status import JobStatus

SECRET = "hf_0123456789abcdef"


class FakeRay:
    def __init__(self):
        self.text = ""

    def logs(self, sid):
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


def step(n):
    return f"step:{n} - train/loss:{10 - n}.5 - train/lr:0.001\n"


def driver_log(job):
    with open(job.rec["driver_log"], encoding="utf-8") as handle:
        return handle.read()


def test_each_look_appends_and_parses_only_what_the_log_gained(tmp_path, monkeypatch):
    job = Job(str(tmp_path / "j-1"))
    folded, whole_writes = [], []
    fold, write_text = vm.fold, job.record.write_text
    monkeypatch.setattr(vm, "fold", lambda state, text, **kw: folded.append(text) or fold(state, text, **kw))
    monkeypatch.setattr(job.record, "write_text", lambda path, text: (
        whole_writes.append(os.path.basename(path)), write_text(path, text)))

    job.client.text = f"token {SECRET}\n" + step(1)
    log = evidence.refresh_log(job)
    assert driver_log(job) == "token <redacted>\n" + step(1)
    assert log.parsed["last_step"] == 1 and "driver.log" in whole_writes
    inode = os.stat(job.rec["driver_log"]).st_ino

    whole_writes.clear()
    job.client.text += step(2) + "step:3 - train/lo"  # a line still being written is left for the next look
    log = evidence.refresh_log(job)
    assert folded[-1] == step(2)  # parsed: only the new whole line
    assert "driver.log" not in whole_writes and os.stat(job.rec["driver_log"]).st_ino == inode  # appended
    assert driver_log(job) == "token <redacted>\n" + step(1) + step(2)
    assert (log.parsed["first_loss"], log.parsed["last_loss"]) == ([1, 9.5], [2, 8.5])
    assert hang.last_step(log) == 2 and log.size == len(job.client.text)

    folded.clear()
    assert evidence.refresh_log(job).parsed["last_step"] == 2 and folded == []  # nothing new: nothing parsed

    job.client.text += "ss:7.5\ndone"  # the job ended: the rest is taken too
    log = evidence.refresh_log(job, final=True)
    assert folded == ["step:3 - train/loss:7.5\ndone"]
    assert driver_log(job) == job.redact(job.client.text) and os.stat(job.rec["driver_log"]).st_ino == inode
    assert log.parsed["last_line"] == "step:3 - train/loss:7.5"
    # The console's steps are the log's parse only: metrics.jsonl is verl's file logger's, never made from them.
    assert not os.path.lexists(job.rec["metrics"]) and log.metrics is None


def test_each_look_carries_the_new_lines_of_verls_metrics(tmp_path):
    """refresh_log reads the record's metrics.jsonl alongside (progress.refresh: its new lines only) and hands the
    state on as .metrics, whose step hang.last_step prefers to the console's."""
    job = Job(str(tmp_path / "j-1"))
    job.client.text = step(1) + step(2)
    with open(job.rec["metrics"], "w", encoding="utf-8") as handle:
        handle.write('{"step":1,"data":{"train/loss":9.25}}\n{"step":2,"data":{"train/loss":8.125}}\n'
                     '{"step":3,"data":{"train/lo')  # the logger is still writing step 3
    log = evidence.refresh_log(job)
    assert (log.metrics["last_step"], log.metrics["last_loss"], log.metrics["partial"]) == (2, [2, 8.125], False)
    with open(job.rec["metrics"], "a", encoding="utf-8") as handle:
        handle.write('ss":7.0}}\n')
    log = evidence.refresh_log(job)
    assert log.parsed["last_step"] == 2 and log.metrics["last_step"] == 3 and hang.last_step(log) == 3
    assert log.metrics["offset"] == os.path.getsize(job.rec["metrics"])
    with open(job.rec["metrics"], "a", encoding="utf-8") as handle:
        handle.write('{"step":4,"data":{"train/loss":6.5}}')  # the driver died mid-line
    log = evidence.refresh_log(job, final=True)
    assert log.metrics["last_step"] == 3 and log.metrics["partial"] is True


def test_another_text_or_a_changed_driver_log_is_taken_whole(tmp_path):
    job = Job(str(tmp_path / "j-1"))
    job.client.text = step(1) + step(2)
    evidence.refresh_log(job)
    with open(job.rec["driver_log"], "a", encoding="utf-8") as handle:
        handle.write("someone else's line\n")
    job.client.text += step(3)
    assert evidence.refresh_log(job).parsed["last_step"] == 3
    assert driver_log(job) == step(1) + step(2) + step(3)
    job.client.text = step(5)  # not the text the record holds: taken whole
    assert evidence.refresh_log(job).parsed["last_loss"] == [5, 5.5]
    assert driver_log(job) == step(5)


def test_without_ray_the_record_and_its_parse_are_used(tmp_path):
    job = Job(str(tmp_path / "j-1"))
    job.client.text = step(1) + step(4)
    evidence.refresh_log(job)
    job.client.text = ""  # the driver's node died: Ray serves nothing
    log = evidence.refresh_log(job)
    assert log == step(1) + step(4) and log.parsed["last_step"] == 4
    assert driver_log(job) == step(1) + step(4)


def test_a_corrupt_sidecar_means_the_log_is_taken_whole(tmp_path):
    job = Job(str(tmp_path / "j-1"))
    job.client.text = step(1)
    evidence.refresh_log(job)
    path = os.path.join(os.path.dirname(job.rec["driver_log"]), evidence.PARSED_FILE)
    for bad in ('{"offset": "x"}', "[1]", "not json", json.dumps({"offset": 10 ** 9, "log_bytes": 0, "head_chars": 0,
                                                                     "head": "", "parsed": vm.new_state()})):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(bad)
        job.client.text += step(2)
        assert evidence.refresh_log(job).parsed["last_step"] == 2
        assert driver_log(job) == job.client.text
        job.client.text = step(1)
        evidence.refresh_log(job)


def test_progress_is_tracked_from_the_parse(tmp_path):
    job = Job(str(tmp_path / "j-1"))
    status = JobStatus("j-1", state="RUNNING", timeouts={"pending_s": 600}, retries={"max": 0, "on": []})
    job.client.text = step(1) + step(2)
    hang.track(status, evidence.refresh_log(job), 0)
    assert status.progress["step"] == 2 and status.progress["log_bytes"] == len(job.client.text)
