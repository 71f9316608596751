"""Findings of a second review of driver_log.py and open_index.py (issue 24): each test showed one real bug, now
fixed: lines lost to a repeated block, a multi-line secret redacted in halves, a secret in the parse sidecar, a "\r"
that kept the anchor from ever being found, a wrong log size for hang tracking, a repaired record never watched."""

import os

import pytest
from ansible.module_utils.base import redaction
from ansible.module_utils.jobs.evidence import driver_log as dl
from ansible.module_utils.jobs.evidence import hang
from ansible.module_utils.jobs.life import reconcile
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record.status import StatusFile

SECRET = "hf_0123456789abcdef"


class RayLog:
    """Ray's driver log as its state API serves it: the tail counts lines by b"\\n" only (the log agent's way), the
    stream comes in 64 KiB chunks (ray_cluster._chunks), the job API gives it whole."""

    def __init__(self):
        self.text, self.calls, self.chunk, self.down = "", [], 1 << 16, False

    def log_tail(self, sid, lines):
        self.calls.append(("tail", lines))
        if self.down:
            raise RuntimeError("the driver's node does not answer")
        parts = self.text.split("\n")
        pieces = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        return "".join(pieces[-lines:])

    def log_stream(self, sid):
        self.calls.append(("stream", None))
        if self.down:
            raise RuntimeError("the driver's node does not answer")
        data = self.text.encode("utf-8")
        for i in range(0, len(data), self.chunk):
            yield data[i:i + self.chunk]

    def logs(self, sid):
        self.calls.append(("whole", None))
        if self.down:
            raise RuntimeError("the driver's node does not answer")
        return self.text


class Job:
    """What driver_log needs of a Job, with the module's own redaction (redaction.redact, as Job.redact)."""

    def __init__(self, directory):
        jr.create_exclusive(directory)
        self.sid = "j-1"
        self.client = RayLog()
        self.record = jr.Record(directory, self.sid)
        self.rec = jr.paths(directory)
        self.secrets = [SECRET]

    def redact(self, value):
        return redaction.redact(value, redaction.DEFAULT_SECRET_ENV_NAMES, extra_values=self.secrets)


@pytest.fixture
def job(tmp_path):
    return Job(str(tmp_path / "j-1"))


def kept(job):
    with open(job.rec["driver_log"], encoding="utf-8", newline="") as handle:  # "\r" kept as it is
        return handle.read()


def sidecar(job):
    with open(os.path.join(os.path.dirname(job.rec["driver_log"]), dl.PARSED_FILE), encoding="utf-8") as handle:
        return handle.read()


def step(n):
    return f"step:{n} - train/loss:{n}.5 - train/lr:0.001\n"


# 1. driver_log: a unique anchor in a tail that no longer reaches the record's end is taken as the place.
def test_a_recurring_block_in_a_tail_that_missed_the_records_end_loses_the_lines_between(job):
    # A warning block a job prints again and again (the same ~5 KB each time): the anchor is its last 4 KB.
    block = "".join(f"UserWarning: deprecated option, line {k} of the same warning " + "." * 20 + "\n"
                    for k in range(60))
    job.client.text = "start\n" + step(1) + block
    dl.refresh_log(job)
    assert kept(job) == job.client.text
    # Between two looks the job logs 300 steps (more than the 200 lines asked) and prints the block again.
    job.client.text += "".join(step(n) for n in range(2, 302)) + block + "after\n"
    log = dl.refresh_log(job)
    assert kept(job) == job.client.text  # fails: steps 2..301 and the second block are missing from driver.log
    assert log.parsed["last_step"] == 301


# 2. driver_log: the whole stream redacts each chunk's whole lines apart, so a multi-line secret is cut in halves.
def test_a_multiline_secret_across_a_stream_chunk_reaches_driver_log(job):
    key = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
           "-----END PRIVATE KEY-----")
    job.secrets = [key]  # e.g. a SSH_PRIVATE_KEY / *_CREDENTIALS env value, learnt from the runtime_env
    pad = "".join(f"noise {i:06d}\n" for i in range(5038))  # 65,494 bytes
    job.client.text = pad + "loaded key:\n" + key + "\n" + step(1)
    # The first 64 KiB chunk ends inside the key's second line: its first line is cut off and redacted alone.
    head = pad + "loaded key:\n" + key.split("\n")[0] + "\n"
    assert len(head.encode()) < job.client.chunk < len((pad + "loaded key:\n" + key).encode())
    assert key not in job.redact(job.client.text)  # redacting the text whole hides it
    dl.refresh_log(job, final=True)  # the first look (or any look that cannot place the anchor) streams the log
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" not in kept(job)  # fails: the key's body is there


# 3. driver_log: the sidecar keeps the parse of the unredacted text (its last step line, shown).
def test_a_secret_in_a_step_line_is_written_to_the_parse_sidecar(job):
    job.client.text = f"step:1 - train/loss:0.5 - hub:https://user:{SECRET}@huggingface.co\n"
    dl.refresh_log(job)
    assert SECRET not in kept(job)  # driver.log is redacted ...
    assert SECRET not in sidecar(job)  # ... fails: the sidecar's parsed.last_line holds the secret


# 4. driver_log: pieces split at "\r" (tqdm's bar) make the anchor start after a "\r": it is never found again.
def test_a_log_with_carriage_returns_is_streamed_whole_every_look(job):
    bar = "".join(f"Training Progress: {i:3d}%|{'#' * (i // 2):<50}| {i}/100\r" for i in range(100))
    job.client.text = "".join(f"init line {i}\n" for i in range(3000)) + step(1) + bar + "\n" + step(2)
    dl.refresh_log(job)
    assert kept(job) == job.client.text
    job.client.calls.clear()
    job.client.text += step(3)  # one line more
    assert dl.refresh_log(job).parsed["last_step"] == 3 and kept(job) == job.client.text
    # fails: [("tail", 200), ("tail", 1600), ("tail", 12800), ("stream", None)]: the whole log, four times over
    assert job.client.calls == [("tail", dl.MIN_LINES)]


# 5. driver_log: a look that falls back to the record's copy reports its length as the log's size.
def test_a_look_without_ray_keeps_the_logs_size_for_hang_tracking(job):
    job.client.text = "".join(f"waiting for the collective {i:07d} " + "." * 60 + "\n" for i in range(15000))
    first = dl.refresh_log(job)  # 1.5 MB, no steps: hang detection goes by the log's size
    status = StatusFile("j-1", state="RUNNING")
    hang.track(status, first, 1_000)
    job.client.down = True  # the driver's node stops answering (or another run holds the log lock: LockTimeout)
    again = dl.refresh_log(job)
    hang.track(status, again, 3_600_000)
    assert again.size == first.size  # fails: 1,048,576 (SHOWN) against 1,440,000
    assert status.progress.log_at == 1_000  # fails: the log "grew", an hour of silence is forgotten


# 6. open_index: the one-time scan indexes only records with a trusted, open status.json.
def test_a_record_untrusted_at_the_migration_scan_is_never_watched_once_repaired(tmp_path):
    root = str(tmp_path)
    out = os.path.join(root, "jobs", "old-run")
    assert jr.create_exclusive(out)  # a record from before the index, its status.json garbled (a torn NFS write)
    jr.write_json(jr.paths(out)["job_spec"], {"name": "grpo", "workload": "grpo"})
    with open(jr.paths(out)["status"], "w", encoding="utf-8") as handle:
        handle.write("{not json")
    unreadable = []
    assert reconcile.open_records(root, unreadable) == [] and unreadable  # the scan: listed as unreadable, not indexed
    assert open_index.COMPLETE in os.listdir(os.path.join(root, "jobs", open_index.INDEX))
    # job.yml -e do=status (follow.refresh): Ray still runs it, so the rebuilt status is saved, not final.
    rec = jr.Record(out, "old-run")
    status = rec.status()
    assert status.rebuilt and not status.final
    status.state = "RUNNING"
    rec.save_status(status)
    assert not rec.read_status().final
    unreadable = []
    found = reconcile.open_records(root, unreadable)
    assert "old-run" in found or any(u.startswith("old-run") for u in unreadable)  # fails: neither, for good
