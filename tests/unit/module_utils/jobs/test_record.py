"""module_utils/jobs/record/record.py (the job directory, atomic writes) and the helpers the record is made with."""

import json
import os
import stat
import threading

import pytest
from ansible.module_utils.jobs.evidence import evidence
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record.status import final_state
from ansible.module_utils.verl import metrics

# What verl's console logger prints (Ray prefixes the driver's lines with the actor).
LOG = """\
(TaskRunner pid=4242) Training from scratch
(TaskRunner pid=4242) step:1 - train/loss:6.0625 - train/grad_norm:4.10 - train/lr:0.001
(TaskRunner pid=4242) step:2 - train/loss:5.5000 - train/grad_norm:3.90 - train/lr:0.001
(TaskRunner pid=4242) step:3 - val/loss:5.9 - timing_s/step:0.53
(TaskRunner pid=4242) step:4 - train/loss:4.75e-01 - train/grad_norm:1.2 - timing_s/step:0.51
(TaskRunner pid=4242) saved checkpoint to global_step_4
"""


def listing(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_paths_layout(tmp_path):
    p = jr.paths(str(tmp_path / "job"))
    job = str(tmp_path / "job")
    assert p["dir"] == job
    assert p["job_spec"] == os.path.join(job, "config", "job_spec.json")
    assert p["submit_out"] == os.path.join(job, "logs", "ray_job_submit.out")
    assert p["status_pre"] == os.path.join(job, "debug", "ray_status_pre.txt")
    assert p["status"] == os.path.join(job, "status.json")
    # verl's loggers write these (VERL_FILE_LOGGER_PATH, TENSORBOARD_DIR); a follower keeps how far it read.
    assert p["metrics"] == os.path.join(job, metrics.METRICS_FILE) == os.path.join(job, "metrics.jsonl")
    assert p["tensorboard"] == os.path.join(job, "tensorboard")
    assert p["metrics_state"] == os.path.join(job, "logs", "metrics.state.json")
    # Every file lives in the job directory itself or in one of the LAYOUT subdirectories.
    for key, path in p.items():
        rel = os.path.relpath(path, job)
        assert rel in (".", "status.json", "preflight.json", ".stop_request", "metrics.jsonl", "tensorboard") or \
            rel.split(os.sep)[0] in jr.LAYOUT, key


def test_create_exclusive_builds_the_layout_once(tmp_path):
    job = tmp_path / "jobs" / "a"  # the parent does not exist yet
    assert jr.create_exclusive(str(job)) is True
    assert sorted(os.listdir(job)) == sorted(jr.LAYOUT)
    assert stat.S_IMODE(os.stat(job / "checkpoints").st_mode) == 0o1777
    (job / "status.json").write_text("{}")
    os.chmod(job / "checkpoints", 0o755)
    before = listing(job)

    assert jr.create_exclusive(str(job)) is False
    assert listing(job) == before
    assert (job / "status.json").read_text() == "{}"
    assert stat.S_IMODE(os.stat(job / "checkpoints").st_mode) == 0o755


def test_create_exclusive_has_one_winner_among_threads(tmp_path):
    job = str(tmp_path / "jobs" / "race")
    start = threading.Barrier(16)
    results = []

    def attempt():
        start.wait()
        results.append(jr.create_exclusive(job))

    threads = [threading.Thread(target=attempt) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 15 + [True]
    assert sorted(os.listdir(job)) == sorted(jr.LAYOUT)


def test_write_text_and_json_are_complete_and_world_readable(tmp_path):
    old = os.umask(0o077)
    try:
        jr.write_text(str(tmp_path / "a.txt"), "hello\n")
        jr.write_json(str(tmp_path / "b.json"), {"b": 1, "a": [1, 2]})
    finally:
        os.umask(old)
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.json"]  # no .tmp- left behind
    assert (tmp_path / "a.txt").read_text() == "hello\n"
    assert json.loads((tmp_path / "b.json").read_text()) == {"a": [1, 2], "b": 1}
    assert (tmp_path / "b.json").read_text().endswith("}\n")
    for name in ("a.txt", "b.json"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o644


def test_write_replaces_an_existing_file(tmp_path):
    path = str(tmp_path / "s.json")
    jr.write_json(path, {"state": "PENDING"})
    jr.write_json(path, {"state": "RUNNING"})
    assert jr.read_json(path) == {"state": "RUNNING"}
    assert os.listdir(tmp_path) == ["s.json"]


def test_failed_rename_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    jr.write_json(str(path), {"state": "PENDING"})

    def boom(src, dst, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(jr.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        jr.write_json(str(path), {"state": "SUCCEEDED"})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"state": "PENDING"}
    assert os.listdir(tmp_path) == ["status.json"]


def test_failure_while_writing_keeps_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "driver.log"
    jr.write_text(str(path), "old\n")
    with pytest.raises(UnicodeEncodeError):
        jr.write_text(str(path), "new \ud800 text")  # a lone surrogate fails inside handle.write
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["driver.log"]


def test_unserializable_json_leaves_the_old_file(tmp_path):
    path = tmp_path / "status.json"
    jr.write_json(str(path), {"state": "PENDING"})
    loop = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular"):
        jr.write_json(str(path), loop)
    assert jr.read_json(str(path)) == {"state": "PENDING"}
    assert os.listdir(tmp_path) == ["status.json"]


def test_write_json_stringifies_other_types(tmp_path):
    path = str(tmp_path / "x.json")
    jr.write_json(path, {"path": tmp_path})
    assert jr.read_json(path) == {"path": str(tmp_path)}


def test_read_json_missing_broken_or_directory_is_none(tmp_path):
    (tmp_path / "broken.json").write_text('{"state": "RUN')
    (tmp_path / "ok.json").write_text('{"state": "RUNNING"}')
    assert jr.read_json(str(tmp_path / "missing.json")) is None
    assert jr.read_json(str(tmp_path / "broken.json")) is None
    assert jr.read_json(str(tmp_path)) is None
    assert jr.read_json(str(tmp_path / "ok.json")) == {"state": "RUNNING"}


def test_last_step_line_is_the_newest_step_line_stripped():
    assert metrics.last_step_line(LOG) == "step:4 - train/loss:4.75e-01 - train/grad_norm:1.2 - " \
                                     "timing_s/step:0.51"
    assert metrics.last_step_line("  step:7 - train/loss:1.0  \n") == "step:7 - train/loss:1.0"


def test_last_step_line_ignores_lines_that_only_look_like_steps():
    assert metrics.last_step_line("global_step:5\nsaved global_step_5\nno steps here\n") is None
    assert metrics.last_step_line("") is None


def test_last_step_line_is_cut_to_width():
    line = "step:12 - " + " - ".join(f"actor/metric_{i}:{i}.000" for i in range(40))
    cut = metrics.last_step_line(line)
    assert len(cut) == 200 and cut.endswith("...") and cut.startswith("step:12 - ")
    assert metrics.last_step_line(line, width=20) == line[:17] + "..."
    assert metrics.last_step_line("step:1 - a:1", width=12) == "step:1 - a:1"


def console_losses(text):
    """(first, last) [step, loss] of a log's console step lines, as a job that is not verl gets them (fold)."""
    state = metrics.new_state()
    metrics.fold(state, text)
    return state["first_loss"], state["last_loss"]


def test_losses_from_console_lines_in_order():
    # step 3 has only a validation loss: it is not a training loss.
    assert console_losses(LOG) == ([1, 6.0625], [4, 0.475])
    assert console_losses(LOG.replace("step:4 - train/loss:4.75e-01", "step:4 - val/loss:1")) == ([1, 6.0625],
                                                                                                  [2, 5.5])
    assert console_losses("step:10 - train/loss: -0.25\n") == ([10, -0.25], [10, -0.25])
    assert console_losses("train/loss:1.0 without a step\nstep:1 - no loss\n") == (None, None)
    # Log order, not step order: the record's last step is the last one the trainer printed.
    assert console_losses("step:5 - train/loss:2.0\nstep:3 - train/loss:1.0\n") == ([5, 2.0], [3, 1.0])


def test_losses_survive_a_non_numeric_loss():
    assert console_losses("step:1 - train/loss:1.5\nstep:2 - train/loss:-inf\n") == ([1, 1.5], [1, 1.5])
    assert console_losses("step:1 - train/loss:nan\nstep:2 - train/loss:0.5\n") == ([2, 0.5], [2, 0.5])


def test_losses_from_verl_file_logger_lines():
    """What a verl job's record takes them from: metrics.jsonl rows (SFT's train/loss, PPO's actor/pg_loss), exact."""
    steps = {}
    bad = metrics.fold_rows(steps, ['{"step":1,"data":{"train/loss":6.0625123}}', '{"step":2,"data":{"val/loss":5.9}}',
                               '{"step":3,"data":{"actor/pg_loss":-1e-07,"train/loss":NaN}}'])
    rows = metrics.rows_of(steps)
    assert bad == 0 and [(r["step"], r.get("loss")) for r in rows] == [(1, 6.0625123), (2, None), (3, -1e-07)]


def test_final_state_timeouts_are_failures():
    assert final_state("STOPPED", "PENDING_TIMEOUT") == "FAILED"
    assert final_state("PENDING", "PENDING_TIMEOUT") == "FAILED"
    assert final_state("STOPPED", "DEADLINE_EXCEEDED") == "FAILED"
    assert final_state("STOPPED", "STOPPED_BY_USER") == "STOPPED"
    assert final_state("SUCCEEDED", None) == "SUCCEEDED"
    assert final_state("FAILED", None) == "FAILED"


def test_phases():
    assert evidence.phases(1_000, 3_500, 13_500, 0.1234) == {"submit_s": 0.123, "pending_s": 2.5,
                                                        "running_s": 10.0, "total_s": 12.5}
    # Never started (pending timeout): only what is known.
    assert evidence.phases(1_000, None, 5_000, None) == {"submit_s": None, "total_s": 4.0}
    assert evidence.phases(None, None, None, 0.5) == {"submit_s": 0.5}
    # Clocks of different hosts may disagree a little: never a negative duration.
    assert evidence.phases(5_000, 4_000, 3_000, 0)["pending_s"] == 0
    assert evidence.phases(5_000, 4_000, 3_000, 0)["running_s"] == 0


def test_step_line_drops_rays_coloured_actor_prefix():
    line = "\x1b[36m(TaskRunnerV1 pid=68764)\x1b[0m step:2 - actor/pg_loss:-0.01"
    assert metrics.last_step_line("noise\n" + line + "\n") == "step:2 - actor/pg_loss:-0.01"
