"""module_utils/regression/report.py: results, regressions, JUnit, summary, history."""

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible.module_utils.base.conventions import tensorboard_link
from ansible.module_utils.regression import report as rr

T0 = 1795323728000  # epoch ms, like the job records


def status(state="SUCCEEDED", total_s=22.786, first_loss=6.0, last_loss=5.75, **extra):
    out = {"state": state, "final": True, "reason": None, "message": "", "error_type": None, "steps": 2,
           "first_loss": first_loss, "last_loss": last_loss,
           "phases": {"submit_s": 0.017, "pending_s": 0.008, "running_s": 22.778, "total_s": total_s}}
    out.update(extra)
    return out


def result(name, st=None, log="", sid=None):
    sid = sid or f"{name}-0001"
    return rr.entry_result(name, name, sid, st, log, f"/private/jobs/{sid}")


def report(run_id, results, previous=(), started_at=T0, wall_ms=60_000):
    return rr.build_report(run_id, "nightly", started_at, started_at + wall_ms, results, list(previous))


# entry_result and counting

def test_entry_result_takes_the_status_and_shortens_message_and_log():
    log = "\n".join(f"line {i}" for i in range(100))
    e = rr.entry_result("sft", "sft", "sft-57b97634", status(message="boom\n  at  x\n" + "y" * 500), log,
                        "/private/jobs/sft-57b97634")
    assert e["state"] == "SUCCEEDED" and e["passed"] is True
    assert e["durations"] == {"queued_s": None, "pending_s": 0.008, "running_s": 22.778, "total_s": 22.786}
    assert (e["steps"], e["first_loss"], e["last_loss"]) == (2, 6.0, 5.75)
    assert "\n" not in e["message"] and e["message"].startswith("boom at x y")
    assert len(e["message"]) <= rr.MESSAGE_WIDTH and e["message"].endswith("...")
    assert e["log_tail"].splitlines() == [f"line {i}" for i in range(60, 100)]
    assert e["record"] == "/private/jobs/sft-57b97634"


def test_an_entrys_wait_in_the_queue_is_from_entering_it_to_its_admission_or_its_end():
    def queued(queue, **extra):
        return result("e", status(queue=queue, **extra))["durations"]["queued_s"]

    assert queued({"since": 1_000, "admitted_at": 91_500}) == 90.5
    assert queued({"since": 1_000, "admitted_at": 1_000}) == 0  # it went to Ray at once
    assert queued({"since": 1_000, "admitted_at": None}, end_time=61_000) == 60  # stopped, or QUEUE_TIMEOUT
    assert queued({"since": 1_000, "admitted_at": None}) is None and queued(None) is None
    assert queued({"since": "1000", "admitted_at": 5}) is None
    assert queued({"since": 10 ** 400, "admitted_at": 1}) is None
    waited = report("r1", [result("e", status(queue={"since": 0, "admitted_at": 90_500}))])
    row = next(line for line in rr.summary_md(waited, []).splitlines() if line.startswith("| e |"))
    assert "| 90.5 | 22.8 |" in row, row


def test_missing_status_and_unfinished_jobs_do_not_pass():
    missing = result("gone", None)
    assert missing["state"] == "MISSING" and missing["passed"] is False
    assert missing["durations"] == {"queued_s": None, "pending_s": None, "running_s": None, "total_s": None}
    assert result("slow", status(state="RUNNING"))["passed"] is False


def test_counts_and_ok():
    results = [result("a", status()), result("b", status(state="FAILED", reason="DEADLINE_EXCEEDED")),
               result("c", None)]
    rep = report("r1", results)
    assert rep["counts"] == {"total": 3, "passed": 1, "failed": 2, "regressed": 0}
    assert rep["ok"] is False and rep["wall_s"] == 60.0
    assert report("r2", [result("a", status())])["ok"] is True


# regressions

def test_first_run_has_no_regressions():
    rep = report("r1", [result("a", status(state="FAILED"))])
    assert rep["regressions"] == [] and rep["compared_with"] is None


def test_state_flip_is_a_regression_against_the_newest_previous_run():
    old = report("r1", [result("a", status())], started_at=T0 - 10_000)
    older = report("r0", [result("a", status(state="FAILED"))], started_at=T0 - 20_000)
    rep = report("r2", [result("a", status(state="FAILED"))], previous=[old, older])
    assert [(r["entry"], r["kind"]) for r in rep["regressions"]] == [("a", "state")]
    assert "was SUCCEEDED, now FAILED" in rep["regressions"][0]["message"]
    assert "r1" in rep["regressions"][0]["message"] and rep["compared_with"] == "r1"
    # Failing again after a failure is a failure, not a regression.
    assert report("r3", [result("a", status(state="FAILED"))], previous=[older])["regressions"] == []


def test_loss_rise_beyond_threshold_is_a_regression():
    old = report("r1", [result("a", status(last_loss=5.0)), result("b", status(last_loss=5.0))])
    rep = report("r2", [result("a", status(last_loss=5.6)), result("b", status(last_loss=5.4))], previous=[old])
    assert [(r["entry"], r["kind"], r["previous"], r["current"]) for r in rep["regressions"]] == [
        ("a", "loss", 5.0, 5.6)]
    assert rep["ok"] is False and rep["counts"]["regressed"] == 1
    nan = report("r3", [result("a", status(last_loss=float("nan")))], previous=[old])
    assert [r["kind"] for r in nan["regressions"]] == ["loss"]
    stricter = rr.build_report("r4", "nightly", T0, T0, [result("b", status(last_loss=5.4))], [old], loss_rise=0.05)
    assert [r["kind"] for r in stricter["regressions"]] == ["loss"]


def test_duration_growth_beyond_threshold_is_a_regression():
    old = report("r1", [result("a", status(total_s=10.0)), result("b", status(total_s=10.0))])
    rep = report("r2", [result("a", status(total_s=15.5)), result("b", status(total_s=14.9))], previous=[old])
    assert [(r["entry"], r["kind"]) for r in rep["regressions"]] == [("a", "duration")]
    assert "+55 %" in rep["regressions"][0]["message"]


def test_new_entry_is_no_regression():
    old = report("r1", [result("a", status())])
    rep = report("r2", [result("a", status()), result("new", status(state="FAILED", total_s=999.0))], previous=[old])
    assert rep["regressions"] == []
    assert rep["ok"] is False  # but its failure still fails the run


# JUnit

def test_junit_parses_one_testcase_per_entry_failures_carry_message_and_log():
    results = [result("ok", status()),
               result("bad", status(state="FAILED", reason="DEADLINE_EXCEEDED", error_type="RuntimeError",
                                    message="driver died"), log="first\nTraceback: boom"),
               result("gone", None)]
    root = ET.fromstring(rr.junit_xml(report("r1", results)))
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "2"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["ok", "bad", "gone"]
    assert {c.get("classname") for c in cases} == {"regression.nightly"}
    assert cases[0].get("time") == "22.786" and cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure.get("message") == "FAILED / DEADLINE_EXCEEDED / RuntimeError: driver died"
    assert failure.get("type") == "FAILED"
    assert "Traceback: boom" in failure.text and "/private/jobs/bad-0001" in failure.text
    assert cases[2].find("failure").get("message") == "MISSING"


def test_junit_escapes_special_characters_and_drops_control_characters():
    nasty = 'a<&>"b'
    results = [result(nasty, status(state="FAILED", message=f"x {nasty}"), log=f"\x1b[31m{nasty}\x1b[0m\n</failure>")]
    text = rr.junit_xml(report("r1", results))
    case = ET.fromstring(text).find("testsuite/testcase")
    assert case.get("name") == nasty
    assert case.find("failure").get("message") == f"FAILED: x {nasty}"
    assert nasty in case.find("failure").text and "</failure>" in case.find("failure").text
    assert "\x1b" not in text


def test_junit_reports_a_regression_as_failure():
    old = report("r1", [result("a", status(last_loss=5.0))])
    case = ET.fromstring(rr.junit_xml(report("r2", [result("a", status(last_loss=6.0))], previous=[old])))
    failure = case.find("testsuite/testcase/failure")
    assert failure.get("type") == "REGRESSION"
    assert failure.get("message").startswith("regression: last_loss rose 5 → 6")
    assert case.get("failures") == "1"


# summary

def history(n, name="smoke"):
    """n earlier reports, newest first, with total_s 6.0, 6.1, ... and always passing."""
    runs = [report(f"r{i}", [result(name, status(total_s=6.0 + i / 10, last_loss=5.0 - i / 10))],
                   started_at=T0 + i * 1000) for i in range(n)]
    return runs[::-1]


def test_summary_headline_table_and_records():
    results = [result("smoke", status(), sid="smoke-aa11"),
               result("sft", status(state="FAILED", reason="PENDING_TIMEOUT"))]
    md = rr.summary_md(report("run-7", results), [])
    lines = md.splitlines()
    assert lines[0] == "# FAIL: nightly, 1/2 passed, 1 failed"
    assert "`run-7`" in lines[2] and "1m 00s" in lines[2]
    assert "| smoke | SUCCEEDED | 2 | 6 → 5.75 | – | – | – | 22.8 | [smoke-aa11](../../jobs/smoke-aa11/) | – |" in lines
    assert "- **sft**: FAILED / PENDING_TIMEOUT" in lines
    odd = rr.summary_md(report("run-9", [result("a|b", status(state="FAILED", message="<class 'X'>"))]), [])
    assert "| a\\|b | FAILED |" in odd and "- **a\\|b**: FAILED: &lt;class 'X'&gt;" in odd
    assert "No earlier run of this suite." in md
    assert rr.summary_md(report("run-8", results[:1]), []).startswith("# PASS: nightly, 1/1 passed\n")


def test_summary_compares_with_previous_runs():
    previous = history(6)  # only the newest five show up in the trend
    results = [result("smoke", status(total_s=6.0, last_loss=4.0)), result("extra", status())]
    rep = report("now", results, previous=previous[:1])
    md = rr.summary_md(rep, previous)
    assert "- smoke total_s: 6.1, 6.2, 6.3, 6.4, 6.5 → 6.0" in md
    assert "- smoke last_loss: 4.9, 4.8, 4.7, 4.6, 4.5 → 4" in md
    assert "- extra: new entry (SUCCEEDED)" in md
    assert "Baseline: run `r5`" in md


def test_summary_names_state_changes_and_regressions():
    previous = history(2)
    rep = report("now", [result("smoke", status(state="FAILED", error_type="OOM"))], previous=previous)
    md = rr.summary_md(rep, previous)
    assert md.startswith("# FAIL: nightly, 0/1 passed, 1 failed, 1 regressed")
    assert "- smoke: SUCCEEDED → FAILED" in md
    assert "- **smoke**: was SUCCEEDED, now FAILED (vs run r1)" in md
    assert "| smoke | FAILED (regressed) |" in md


# write_report and load_previous

def test_write_report_and_load_previous_round_trip(tmp_path):
    rep = report("r1", [result("a", status())])
    paths = rr.write_report(str(tmp_path / "r1"), rep, [])
    assert json.loads(Path(paths["report.json"]).read_text()) == rep
    ET.parse(paths["junit.xml"])
    assert Path(paths["summary.md"]).read_text().startswith("# PASS")
    assert rr.load_previous(str(tmp_path), "nightly", "r2") == [rep]
    assert rr.load_previous(str(tmp_path), "nightly", "r1") == []
    assert rr.load_previous(str(tmp_path), "other", "r2") == []


def test_load_previous_newest_first_by_start_time_skipping_broken_files(tmp_path):
    # Names sort the other way round from start times, so ordering by name would fail.
    for name, started in (("a", T0 + 3000), ("b", T0 + 1000), ("c", T0 + 2000), ("d", T0 + 4000)):
        rr.write_report(str(tmp_path / name), report(name, [result("x", status())], started_at=started), [])
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "report.json").write_text("{not json")
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "report.json").write_text("[1, 2]")
    (tmp_path / "no-report").mkdir()
    (tmp_path / "stray-file").write_text("x")
    found = rr.load_previous(str(tmp_path), "nightly", exclude_run_id="d")
    assert [r["run_id"] for r in found] == ["a", "c", "b"]
    assert [r["run_id"] for r in rr.load_previous(str(tmp_path), "nightly", "d", limit=2)] == ["a", "c"]
    assert rr.load_previous(str(tmp_path / "absent"), "nightly", "d") == []


# metrics, gates and the trend plot (issue 11); the curves are the run's in TensorBoard (issue 23)

ROWS = [{"step": 1, "loss": 0.06, "reward": 0.08, "step_time_s": 20.0},
        {"step": 2, "loss": 0.01, "reward": 0.09, "step_time_s": 4.0}]
GATES = [{"metric": "step", "at": "last", "min": 2}, {"metric": "reward", "at": "last", "min": 0.5}]
BOARD = "http://10.0.0.10:6006"


def gated(name="grpo", st=None, rows=ROWS, gates=GATES):
    sid = f"{name}-0001"
    return rr.entry_result(name, name, sid, st or status(), "", f"/private/jobs/{sid}", metric_rows=rows, gates=gates,
                           tensorboard=tensorboard_link(BOARD, sid))


def test_failed_gate_fails_a_succeeded_entry_and_names_the_metric():
    e = gated()
    assert e["state"] == "SUCCEEDED" and not e["passed"]
    assert [g["ok"] for g in e["gates"]] == [True, False]
    assert e["metrics"] == {"last loss": 0.01, "last reward": 0.09, "mean step s": 12.0}
    rep = report("run-g", [e])
    assert not rep["ok"] and rep["counts"]["failed"] == 1
    case = ET.fromstring(rr.junit_xml(rep)).find(".//testcase")
    failure = case.find("failure")
    assert failure.get("type") == "GATE"
    assert failure.get("message") == "gate reward last ≥ 0.5: reward last = 0.09, below 0.5"
    md = rr.summary_md(rep, [])
    assert "| grpo | SUCCEEDED (gate failed) | 2 | 6 → 5.75 | 0.09 | 1/2 |" in md
    assert "- ✗ **grpo** gate reward last ≥ 0.5: reward last = 0.09, below 0.5" in md
    assert "- ✓ **grpo** gate step last ≥ 2: 2" in md
    assert e["tensorboard"] == f"{BOARD}/?runFilter=%5Egrpo-0001/#timeseries"
    assert (f"| [grpo-0001](../../jobs/grpo-0001/) | [TensorBoard]({BOARD}/?runFilter=%5Egrpo-0001/#timeseries) |"
            in md) and "[trend.svg](trend.svg)" in md
    assert "metrics.svg" not in md


def test_an_entry_without_metrics_or_a_board_links_no_curves():
    assert gated(rows=[], gates=[])["tensorboard"] is None  # no metrics.jsonl: no run in TensorBoard either
    no_board = rr.entry_result("a", "a", "a-0001", status(), "", "/private/jobs/a-0001", metric_rows=ROWS)
    for e in (gated(rows=[], gates=[]), no_board):
        sid = e["submission_id"]
        assert f"| [{sid}](../../jobs/{sid}/) | – |" in rr.summary_md(report("r", [e]), [])


def test_gates_that_hold_pass_and_a_failed_job_is_not_gated():
    assert gated(gates=GATES[:1])["passed"]
    failed = gated(st=status(state="FAILED"))
    assert not failed["passed"] and failed["gates"] == []
    assert rr._failure_text(failed).startswith("FAILED")


def test_trend_svg_has_a_chart_per_entry_value_across_runs(tmp_path):
    older = report("r1", [gated(gates=[])], started_at=T0)
    newer = report("r2", [gated(gates=[], rows=[{"step": 1, "loss": 0.02, "reward": 0.2}])], started_at=T0 + 1000)
    root = ET.fromstring(rr.trend_svg(newer, [older]))
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "grpo: last reward" in titles and "grpo: total s" in titles and "grpo: mean step s" in titles
    # Two runs, so every chart with values in both has a line of two points.
    lines = [p.get("points").split() for p in root.iter("{http://www.w3.org/2000/svg}polyline")]
    assert lines and all(len(points) == 2 for points in lines)
    paths = rr.write_report(str(tmp_path / "r2"), newer, [older])
    assert os.path.isfile(paths["trend.svg"])


def report_module(capsys, args):
    import ray_regression_report
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args), pytest.raises(SystemExit):
        ray_regression_report.main()
    return json.loads(capsys.readouterr().out)


def test_report_module_reads_metrics_jsonl_only_and_links_each_run_in_tensorboard(tmp_path, capsys):
    """The gates and the trend read verl's metrics.jsonl; the console is no source (no fallback), no plot is written,
    and an entry with metrics links to its run in the cluster's TensorBoard."""
    jobs = tmp_path / "jobs"
    for sid in ("run-g", "run-c"):
        (jobs / sid / "logs").mkdir(parents=True)
        (jobs / sid / "status.json").write_text(json.dumps({"submission_id": sid, "state": "SUCCEEDED", "final": True,
                                                            "steps": 2}))
        # What the console printed (rounded, and a reward of 0.9) is never read for a gate.
        (jobs / sid / "logs" / "driver.log").write_text("step:1 - train/loss:6.0 - critic/score/mean:0.9\n"
                                                        "step:2 - train/loss:5.5 - critic/score/mean:0.9\n")
    (jobs / "run-g" / "metrics.jsonl").write_text('{"step":1,"data":{"actor/pg_loss":0.5,"critic/score/mean":0.125}}\n'
                                                  '{"step":2,"data":{"actor/pg_loss":0.25,"critic/score/mean":0.375}}\n')
    gates = [{"metric": "reward", "at": "last", "min": 0.3}]
    args = {"run_id": "run", "suite": "s", "started_at": 1, "shared_root": str(tmp_path),
            "entries": [{"name": "g", "spec": "grpo", "gates": gates}, {"name": "c", "spec": "sft", "gates": gates}],
            "tensorboard_url": BOARD}
    out = report_module(capsys, args)
    assert out["failed_entries"] == ["c"]
    assert out["failed_gates"] == ["c: gate reward last ≥ 0.3: metric reward has no value"]
    summary = out["summary"]
    assert f"| [run-g](../../jobs/run-g/) | [TensorBoard]({BOARD}/?runFilter=%5Erun-g/#timeseries) |" in summary
    assert "| [run-c](../../jobs/run-c/) | – |" in summary  # no metrics.jsonl: no curves
    written = json.loads((tmp_path / "regression" / "run" / "report.json").read_text())
    assert [(e["name"], e["tensorboard"], e["metrics"]["last reward"]) for e in written["entries"]] == [
        ("g", f"{BOARD}/?runFilter=%5Erun-g/#timeseries", 0.375), ("c", None, None)]
    assert not list(jobs.rglob("metrics.svg")) and not (jobs / "run-c" / "metrics.jsonl").exists()
    # Without tensorboard_url (no TensorBoard on the cluster): the same report, no link.
    out = report_module(capsys, {**args, "tensorboard_url": None, "_ansible_check_mode": True})
    assert "TensorBoard" not in out["summary"] and "| [run-g](../../jobs/run-g/) | – |" in out["summary"]


def test_a_failed_entry_names_its_diagnosis():
    status = {"state": "FAILED", "reason": None, "error_type": None, "message": "exit code 1",
              "diagnosis": {"kind": "import_error", "evidence": {"file": "logs/driver.log", "line": "x"},
                            "hint": "check code_id"}}
    entry = rr.entry_result("bad", "smoke", "r-bad", status, "", "/private/jobs/r-bad")
    assert entry["diagnosis"]["kind"] == "import_error"
    assert rr._failure_text(entry) == "FAILED: exit code 1 [diagnosis: import_error: check code_id]"


def test_an_entry_whose_record_was_once_rebuilt_keeps_its_own_state(tmp_path, capsys):
    """A status.json that says it was rebuilt once is still the job's record: an error of the entry's submit
    command does not make it NOT_SUBMITTED."""
    import ray_regression_report
    from ansible.module_utils.testing import patch_module_args

    record = tmp_path / "jobs" / "run-e"
    (record / "logs").mkdir(parents=True)
    (record / "status.json").write_text(json.dumps({"submission_id": "run-e", "state": "SUCCEEDED", "final": True,
                                                    "rebuilt": "status.json is lost"}))
    args = {"run_id": "run", "suite": "s", "started_at": 1, "shared_root": str(tmp_path),
            "entries": [{"name": "e", "spec": "sft"}], "errors": {"e": "the wait timed out"},
            "_ansible_check_mode": True}
    with patch_module_args(args), pytest.raises(SystemExit):
        ray_regression_report.main()
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["failed_entries"] == []


def test_a_retried_entry_is_judged_by_its_last_attempt(tmp_path, capsys):
    import ray_regression_report
    from ansible.module_utils.testing import patch_module_args

    jobs = tmp_path / "jobs"
    for sid, st in (("run-e", {"state": "FAILED", "final": True, "attempts": ["run-e-r1"]}),
                    ("run-e-r1", {"state": "SUCCEEDED", "final": True, "attempt_of": "run-e"})):
        (jobs / sid / "logs").mkdir(parents=True)
        (jobs / sid / "status.json").write_text(json.dumps({"submission_id": sid, **st}))
    (jobs / "run-e-r1" / "logs" / "driver.log").write_text("step:3 - train/loss:4.0\n")
    args = {"run_id": "run", "suite": "s", "started_at": 1, "shared_root": str(tmp_path),
            "entries": [{"name": "e", "spec": "sft"}], "_ansible_check_mode": True}
    with patch_module_args(args), pytest.raises(SystemExit):
        ray_regression_report.main()
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["failed_entries"] == [] and "run-e-r1" in out["summary"]


def test_the_report_reads_only_a_logs_tail_and_never_through_a_link(tmp_path, capsys):
    """A multi-day run's driver log is read from its end (its last lines are all the report shows); a driver.log that is
    a link to another file is never followed (the entry shows no log)."""
    jobs = tmp_path / "jobs"
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("not the job's: a file only root may read\n")
    for sid in ("run-long", "run-link"):
        (jobs / sid / "logs").mkdir(parents=True)
        (jobs / sid / "status.json").write_text(json.dumps({"submission_id": sid, "state": "FAILED", "final": True}))
    with open(jobs / "run-long" / "logs" / "driver.log", "w", encoding="utf-8") as handle:
        handle.write("early line that no report shows\n" + "x" * 100 + "\n")
        handle.writelines(f"step {step} " + "y" * 40 + "\n" for step in range(20000))
        handle.write("Traceback: the last line\n")
    os.symlink(secret, jobs / "run-link" / "logs" / "driver.log")
    args = {"run_id": "run", "suite": "s", "started_at": 1, "shared_root": str(tmp_path),
            "entries": [{"name": "long", "spec": "smoke"}, {"name": "link", "spec": "smoke"}]}
    report_module(capsys, args)
    report = json.loads((tmp_path / "regression" / "run" / "report.json").read_text())
    written = {e["name"]: e for e in report["entries"]}
    tail = written["long"]["log_tail"].splitlines()
    assert len(tail) == rr.LOG_TAIL_LINES and tail[-1] == "Traceback: the last line"
    assert tail[0].startswith("step 19961 ")
    assert written["link"]["log_tail"] == "" and "only root" not in json.dumps(written)
