"""jobs/record/status.py: the typed model of status.json, its merge rules, and the published JSON Schema."""

import dataclasses
import json
import os
import re

import pytest
from ansible.module_utils.base import files, model
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record import status as js
from ansible.module_utils.jobs.record.status import (
    FIELDS,
    STATES,
    TERMINAL,
    Merge,
    RecordError,
    StatusFile,
    json_schema,
)

from plugin_utils import PROJECT_ROOT
from plugin_utils.schemas import schema_text

SECRET = "hf_0123456789abcdefSECRET"


def test_every_field_round_trips_and_unknown_keys_are_kept():
    data = {"submission_id": "a-1", "state": "RUNNING", "by": "another tool", "timeouts": {"pending_s": 5}}
    status = StatusFile.from_dict(data)
    assert status.state == "RUNNING" and status.final is False and status.attempts == []
    assert status.extra == {"by": "another tool"}
    out = status.to_dict()
    assert set(out) == {f.name for f in FIELDS} | {"by"} and StatusFile.from_dict(out) == status


@pytest.mark.parametrize(("data", "field"), [
    ({"state": "RUNNING"}, "submission_id"),
    ({"submission_id": "a-1"}, "state"),
    ({"submission_id": "a-1", "state": "DONE"}, "state"),
    ({"submission_id": "a-1", "state": "RUNNING", "final": "yes"}, "final"),
    ({"submission_id": "a-1", "state": "RUNNING", "submitted_at": True}, "submitted_at"),
    ({"submission_id": "a-1", "state": "RUNNING", "timeouts": {"pending_s": "600"}}, "pending_s"),
    ({"submission_id": "a-1", "state": "RUNNING", "attempts": ["a-1-r1", 3]}, "attempts"),
    ({"submission_id": "a-1", "state": "RUNNING", "diagnosis": {"hint": "x"}}, "kind"),
    ({"submission_id": "../x", "state": "RUNNING"}, "submission_id"),
    ({"submission_id": "a-1", "state": "RUNNING", "message": 7}, "message"),
    ({"submission_id": "a-1", "state": "RUNNING", "progress": {"step": files.STEP_MAX + 1}}, "step"),
    ({"submission_id": "a-1", "state": "RUNNING", "submitted_at": -1}, "submitted_at"),
    ({"submission_id": "a-1", "state": "RUNNING", "outages": [{"from": files.MS_MAX + 1, "to": 1, "seconds": 0,
                                                                "seen_by": "wait"}]}, "from"),
])
def test_a_field_of_the_wrong_type_is_one_line_naming_the_file_and_field(data, field):
    with pytest.raises(RecordError) as exc:
        StatusFile.from_dict(data, where="/p/jobs/a-1/status.json")
    message = str(exc.value)
    assert message.startswith("/p/jobs/a-1/status.json: ") and f"'{field}'" in message and "\n" not in message


def test_an_error_never_quotes_the_value():
    with pytest.raises(RecordError) as exc:
        StatusFile.from_dict({"submission_id": "a-1", "state": "RUNNING", "message": {"token": SECRET}})
    assert SECRET not in str(exc.value)


def test_the_field_table_and_the_class_name_the_same_fields():
    assert [f.name for f in dataclasses.fields(StatusFile) if f.name != "extra"] == [f.name for f in FIELDS]


def test_states_say_which_are_terminal():
    assert set(TERMINAL) <= set(STATES) and all(STATES.values())
    assert StatusFile("a", state="STOPPED").is_terminal() and not StatusFile("a", state="UNKNOWN").is_terminal()


def test_a_final_record_is_never_written_over():
    recorded = StatusFile("a", state="STOPPED", final=True, reason="STOPPED_BY_USER")
    mine = StatusFile("a", state="SUCCEEDED", final=True)
    assert mine.merge(recorded) is Merge.ALREADY_FINAL and mine == recorded and mine is not recorded


def test_a_reason_another_run_gave_is_kept():
    running = StatusFile("a", state="RUNNING")
    assert running.merge(StatusFile("a", state="RUNNING", reason="SLURM_ALLOCATION_ENDING")) is Merge.WRITE
    assert running.reason == "SLURM_ALLOCATION_ENDING"
    final = StatusFile("a", state="STOPPED", final=True, ray_status="STOPPED")
    assert final.merge(StatusFile("a", state="RUNNING"), stop_request="STOPPED_BY_USER") is Merge.REASON_GIVEN
    assert final.reason == "STOPPED_BY_USER"
    # A job that failed on its own keeps its diagnosis: a stop request explains only a job Ray STOPPED.
    failed = StatusFile("a", state="FAILED", final=True, ray_status="FAILED")
    assert failed.merge(None, stop_request="STOPPED_BY_USER") is Merge.WRITE and failed.reason is None


@pytest.mark.parametrize("content", ['["not", "a status"', '[1, 2]', '{"submission_id": "x-1", "state": 3}',
                                     '{"submission_id": "someone-else", "state": "RUNNING"}'])
def test_an_untrusted_status_json_is_rebuilt_and_kept_beside_the_new_one(tmp_path, content, monkeypatch):
    monkeypatch.setattr(jr, "now_ms", lambda: 1_700_000_000_000)  # both kept in one millisecond: neither is lost
    out = tmp_path / "x-1"
    jr.create_exclusive(str(out))
    jr.write_json(str(out / "config" / "job_spec.json"), {"name": "sft", "timeouts": {"pending_s": "bad"}})
    (out / "status.json").write_text(content)
    record = jr.Record(str(out), "x-1")
    status = record.status()
    assert status.state == "UNKNOWN" and status.rebuilt.startswith("status.json is untrusted (")
    assert status.spec == "sft" and status.timeouts.pending_s == 600  # a bad value in the spec is not used
    status.state = "RUNNING"
    assert record.save_status(status) is Merge.WRITE
    [kept] = out.glob("status.json.untrusted-*")
    assert kept.read_text() == content
    assert record.status().state == "RUNNING" and record.status().rebuilt.startswith("status.json is untrusted")
    # A second untrusted file is kept too, beside the first.
    (out / "status.json").write_bytes(b"\xff second")
    record.save_status(record.status())
    kept = sorted(p.read_bytes() for p in out.glob("status.json.untrusted-*"))
    assert kept == sorted([content.encode(), b"\xff second"])


def test_a_status_json_that_cannot_be_read_is_never_replaced(tmp_path):
    out = tmp_path / "x-1"
    jr.create_exclusive(str(out))
    (out / "status.json").mkdir()  # reading it fails with an OSError, as EIO or ESTALE would
    record = jr.Record(str(out), "x-1")
    assert record.status().state == "UNKNOWN"
    with pytest.raises(jr.UnreadableStatus) as exc:
        record.save_status(StatusFile("x-1", state="RUNNING"))
    assert str(exc.value).startswith(f"{out / 'status.json'}: cannot be read") and (out / "status.json").is_dir()


def test_a_status_that_is_not_valid_is_never_written(tmp_path):
    out = tmp_path / "x-1"
    jr.create_exclusive(str(out))
    record = jr.Record(str(out), "x-1")
    record.save_status(StatusFile("x-1", state="RUNNING"))
    with pytest.raises(RecordError, match="field 'state'"):
        record.save_status(StatusFile("x-1", state=None))
    assert record.status().state == "RUNNING"


def test_a_lost_status_json_is_rebuilt_without_a_submit_time(tmp_path):
    out = tmp_path / "x-1"
    jr.create_exclusive(str(out))
    status = jr.Record(str(out), "x-1").status()
    assert (status.state, status.rebuilt, status.submitted_at) == ("UNKNOWN", jr.LOST, None)


def test_the_published_schema_matches_the_model_and_accepts_what_the_module_writes(tmp_path):
    with open(os.path.join(PROJECT_ROOT, "job_status.schema.json"), encoding="utf-8") as handle:
        assert handle.read() == schema_text("job_status.schema.json"), "regenerate: python -m plugin_utils.schemas"
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json_schema())
    jsonschema.Draft202012Validator.check_schema(json_schema())
    written = StatusFile("a-1", state="FAILED", final=True, reason="PENDING_TIMEOUT", timeouts={"pending_s": 5},
                        retries={"max": 1, "on": ["node_died"]}, phases={"submit_s": 0.1}, attempts=["a-1-r1"],
                        diagnosis={"kind": "resources_pending", "evidence": None, "hint": "h"})
    validator.validate(json.loads(json.dumps(written.to_dict())))
    assert not validator.is_valid({"submission_id": "a-1", "state": "DONE"})
    assert not validator.is_valid({"submission_id": "a-1", "state": "RUNNING", "final": "no"})


def test_an_outage_another_run_noted_meanwhile_is_kept():
    mine = StatusFile("j-1", state="RUNNING", outages=[{"from": 1, "to": 5, "seconds": 0.004, "seen_by": "wait"}])
    theirs = StatusFile("j-1", state="RUNNING", outages=[
        {"from": 2, "to": 5, "seconds": 0.003, "seen_by": "reconcile"},
        {"from": 7, "to": 9, "seconds": 0.002, "seen_by": "reconcile"}])
    assert mine.merge(theirs) is Merge.WRITE
    assert [(o.to, o.seen_by) for o in mine.outages] == [(5, "wait"), (9, "reconcile")]


def test_every_object_of_status_json_is_a_typed_part_made_from_its_field():
    blank = StatusFile("a-1")
    objects = [f for f in FIELDS if f.kind == "object"]
    assert {"timeouts", "retries", "phases", "preflight", "diagnosis", "resumed_from", "progress", "stall",
            "goodput", "queue", "preempt"} == {f.name for f in objects}
    for f in objects:
        part = getattr(blank, f.name)
        assert type(part) is model.part_class(f) and part.FIELD is f and not part and blank.to_dict()[f.name] is None
    outages = next(f for f in FIELDS if f.name == "outages")
    assert js.Outage is model.part_class(outages.item) and js.Stall.FIELD is next(f for f in objects
                                                                                 if f.name == "stall")
    read = StatusFile.from_dict({"submission_id": "a-1", "state": "RUNNING", "outages": [
        {"from": 1, "to": 2, "seconds": 0.001, "seen_by": "wait"}], "diagnosis": {"kind": "hung", "evidence": {
            "file": "f", "line": "l"}}, "retries": {"max": 1, "on": ["hung"]}})
    assert read.outages[0].from_ == 1 and read.diagnosis.evidence.line == "l" and read.retries.on == ["hung"]
    read.stall = {"since": 5}  # a mapping assigned is typed too
    assert read.stall.since == 5 and read.to_dict()["stall"] == {"since": 5}


def test_a_status_json_written_before_parts_were_typed_is_written_back_the_same():
    # Parts as the earlier writers left them: some sub-fields only, nulls given, an empty object, a newer key.
    on_disk = {"submission_id": "a-1", "state": "FAILED", "final": True, "future": {"x": [1]},
               "timeouts": {"pending_s": 600, "max_run_s": None}, "retries": {"max": 1, "on": []},
               "phases": {"submit_s": None, "total_s": 4.0}, "preflight": {"ok": True, "code_id": "c"},
               "diagnosis": {"kind": "unknown", "evidence": None, "hint": "h"}, "resumed_from": {},
               "progress": {"step": None, "step_at": 1, "log_bytes": 0, "log_at": 1, "step_s": [], "newer": 1},
               "stall": None, "outages": [{"from": 1, "to": 2, "seconds": 0.001, "seen_by": "wait", "by": "x"}]}
    written = StatusFile.from_dict(json.loads(json.dumps(on_disk))).to_dict()
    assert {k: v for k, v in written.items() if k in on_disk} == on_disk
    assert all(written[f.name] in (None, False, []) for f in FIELDS if f.name not in on_disk)


def test_steps_and_times_in_ms_are_bounded_as_the_readers_of_a_jobs_files_bound_them():
    for path, f in model.walk(FIELDS):
        if f.kind == "int" and "(ms" in f.doc:
            assert (f.minimum, f.maximum) == (0, files.MS_MAX), path
        elif f.kind == "int" and f.name in ("step", "steps"):
            assert (f.minimum, f.maximum) == (0, files.STEP_MAX), path
    outage = next(f for f in FIELDS if f.name == "outages").item
    assert all((f.minimum, f.maximum) == (0, files.MS_MAX) for f in outage.fields if f.name in ("from", "to"))


def test_no_reader_takes_a_part_of_status_json_as_a_mapping():
    parts = "|".join(f.name for f in FIELDS if f.kind == "object")
    pattern = re.compile(rf"\.({parts})\s+or\s+\{{\}}|\.({parts})(\.get\(|\[\")")
    found = []
    for folder in ("module_utils", "action_plugins", "library", "plugin_utils", "scripts"):
        for root, _, names in os.walk(os.path.join(PROJECT_ROOT, folder)):
            for name in names:
                if name.endswith(".py"):
                    with open(os.path.join(root, name), encoding="utf-8") as handle:
                        found += [f"{name}:{n}" for n, line in enumerate(handle, 1) if pattern.search(line)]
    assert found == []
