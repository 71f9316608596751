"""library/ray_acceptance.py: the verdict from real job records on a shared root, and the report it writes."""

import json
import os
import xml.etree.ElementTree as ET

import pytest
import ray_acceptance
from acceptance_helpers import WORKERS, raw_result, slow_worker3
from ansible.module_utils.acceptance import judgement
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record.status import StatusFile
from ansible.module_utils.testing import patch_module_args

RUN = "acceptance-20270101T000000Z"
MEASURE, SFT = f"{RUN}-measure", f"{RUN}-sft"


def job(root, sid, state, result=None, raw_text=None):
    paths = jr.paths(os.path.join(root, "jobs", sid))
    os.makedirs(paths["checkpoints"])
    jr.write_json(paths["status"], StatusFile(sid, state=state, final=True, record=paths["dir"],
                                             message="boom" if state == "FAILED" else None).to_dict())
    if result is not None or raw_text is not None:
        os.mkdir(os.path.dirname(judgement.result_path(root, sid)), 0o755)
        with open(judgement.result_path(root, sid), "w", encoding="utf-8") as handle:
            handle.write(raw_text if raw_text is not None else json.dumps(result))


def run(capsys, root, **extra):
    args = {"run_id": RUN, "shared_root": root, "workers": WORKERS, "measure_id": MEASURE, "sft_id": SFT, **extra}
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ray_acceptance.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_a_passing_run_writes_its_report(tmp_path, capsys):
    root = str(tmp_path)
    job(root, MEASURE, "SUCCEEDED", raw_result())
    job(root, SFT, "SUCCEEDED")
    code, out = run(capsys, root)
    assert code == 0 and out["ok"] and out["failures"] == [] and out["changed"]
    report = tmp_path / "acceptance" / RUN
    assert out["report_dir"] == str(report)
    assert sorted(os.listdir(report)) == ["junit.xml", "result.json", "table.txt"]
    assert (report / "table.txt").read_text().splitlines() == out["table"]
    saved = json.loads((report / "result.json").read_text())
    assert saved["ok"] and saved["jobs"]["sft"]["state"] == "SUCCEEDED" and saved["measurement"]["nodes"]
    ET.fromstring((report / "junit.xml").read_text().split("\n", 1)[1])
    assert oct(os.stat(tmp_path / "acceptance").st_mode & 0o777) == "0o755"


def test_a_slow_worker_fails_naming_it(tmp_path, capsys):
    root = str(tmp_path)
    job(root, MEASURE, "SUCCEEDED", slow_worker3())
    job(root, SFT, "SUCCEEDED")
    code, out = run(capsys, root)
    assert code == 0 and not out["ok"] and out["common_node"] == "lab-worker3"
    assert out["failures"][0].startswith("lab-worker3 (198.18.0.13): all-reduce bus bandwidth")
    assert out["slowest"]["link"][0] == "lab-worker3"


@pytest.mark.parametrize("text, why", [
    ("not json", "its result cannot be read"),
    ('{"nodes": 5}', "its result is malformed: result.nodes: must be a list"),
    (None, "it left no result"),
])
def test_an_unusable_result_fails_the_measuring_check(tmp_path, capsys, text, why):
    root = str(tmp_path)
    job(root, MEASURE, "SUCCEEDED", raw_text=text)
    job(root, SFT, "SUCCEEDED")
    code, out = run(capsys, root)
    assert code == 0 and not out["ok"] and out["failures"][0].startswith(f"{MEASURE}: SUCCEEDED: {why}")


def test_a_result_too_large_or_a_symlink_is_not_read(tmp_path, capsys):
    root = str(tmp_path)
    job(root, MEASURE, "SUCCEEDED", raw_text=" " * (ray_acceptance.RESULT_CAP + 1))
    job(root, SFT, "SUCCEEDED")
    _code, out = run(capsys, root)
    assert "is larger than" in out["failures"][0]
    path = judgement.result_path(root, MEASURE)
    os.remove(path)
    (tmp_path / "elsewhere.json").write_text(json.dumps(raw_result()))
    os.symlink(tmp_path / "elsewhere.json", path)
    _code, out = run(capsys, root)
    assert not out["ok"] and "is a symlink" in out["failures"][0]
    # The result's folder a symlink to a folder holding a good result: not followed either.
    folder = os.path.dirname(path)
    os.remove(path)
    os.rmdir(folder)
    os.mkdir(tmp_path / "other")
    (tmp_path / "other" / judgement.RESULT_FILE).write_text(json.dumps(raw_result()))
    os.symlink(tmp_path / "other", folder)
    _code, out = run(capsys, root)
    assert not out["ok"] and "is not a directory of the record (a symlink is never followed)" in out["failures"][0]


@pytest.mark.parametrize("literal", ["1" + "0" * 400, "1e400", "Infinity", "NaN"])
def test_a_number_past_every_bound_is_refused_in_one_line(tmp_path, capsys, literal):
    """10**400 TFLOP/s raised OverflowError out of the module; now the result is refused naming the field."""
    root = str(tmp_path)
    text = json.dumps(raw_result()).replace('"tflops": 0.05', f'"tflops": {literal}', 1)
    job(root, MEASURE, "SUCCEEDED", raw_text=text)
    job(root, SFT, "SUCCEEDED")
    code, out = run(capsys, root)
    assert code == 0 and not out["ok"]
    assert out["failures"][0] == (f"{MEASURE}: SUCCEEDED: its result is malformed: result.nodes[0].matmul.tflops: "
                                  "must be a positive number up to 1e+40")


def test_a_node_outside_the_inventory_is_refused(tmp_path, capsys):
    """An invented fast node (and its fast pairs) would have made the inventory's workers slow: it is left out."""
    root = str(tmp_path)
    raw = raw_result(tflops=(0.05, 0.05, 0.05, 50.0), pair_s={"0-1": 0.01, "0-2": 0.01, "1-2": 0.01, "0-3": 1e-6,
                                                             "1-3": 1e-6, "2-3": 1e-6})
    raw["nodes"][3]["ip"] = raw["allreduce"]["ranks"][3] = "10.9.9.9"
    job(root, MEASURE, "SUCCEEDED", raw)
    job(root, SFT, "SUCCEEDED")
    code, out = run(capsys, root)
    assert code == 0 and not out["ok"]
    assert out["failures"] == ["refused, not judged (not an inventory worker): 10.9.9.9"]
    assert out["slowest"]["tflops"][1] == 0.05 and "10.9.9.9" not in "\n".join(out["table"][:4])
    saved = json.loads((tmp_path / "acceptance" / RUN / "result.json").read_text())
    assert [n["ip"] for n in saved["measurement"]["nodes"]] == [w["ip"] for w in WORKERS]
    assert saved["measurement"]["outside"] == ["10.9.9.9"] and len(saved["measurement"]["allreduce"]["pairs"]) == 3


def test_jobs_that_failed_or_never_ran_are_named(tmp_path, capsys):
    root = str(tmp_path)
    job(root, MEASURE, "FAILED")
    _code, out = run(capsys, root, errors={"sft": "jobspec field 'x': unknown field"})
    assert not out["ok"]
    assert out["failures"][0] == f"{MEASURE}: FAILED: boom"
    assert out["failures"][-1] == f"{SFT}: NOT_SUBMITTED: jobspec field 'x': unknown field"
    assert out["failures"][1].startswith("not measured")


def test_check_mode_writes_nothing_and_bad_ids_are_refused(tmp_path, capsys):
    root = str(tmp_path)
    job(root, MEASURE, "SUCCEEDED", raw_result())
    code, out = run(capsys, root, _ansible_check_mode=True)
    assert code == 0 and not out["changed"] and not os.path.exists(tmp_path / "acceptance")
    code, out = run(capsys, root, run_id="../x")
    assert code == 1 and out["msg"].startswith("run_id: must be")
    code, out = run(capsys, root, threshold=1.5)
    assert code == 1 and out["msg"] == "threshold: must be a fraction between 0 and 1"


def test_an_acceptance_folder_that_is_a_symlink_is_refused(tmp_path, capsys):
    root = str(tmp_path)
    job(root, MEASURE, "SUCCEEDED", raw_result())
    job(root, SFT, "SUCCEEDED")
    os.mkdir(tmp_path / "other")
    os.symlink(tmp_path / "other", tmp_path / "acceptance")
    code, out = run(capsys, root)
    assert code == 1 and "is a symlink, not the acceptance reports' folder" in out["msg"] and out["table"]
    assert os.listdir(tmp_path / "other") == []
