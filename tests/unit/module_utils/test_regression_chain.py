"""module_utils/regression/chain.py: a regression entry's chain goodput (productive share, lost by cause) and the nodes
its attempts blame, in report.json and summary.md; a first job's record the model refuses is shown as unreadable."""

import json
import re

import pytest
from ansible.module_utils.base import conventions
from ansible.module_utils.regression import chain
from ansible.module_utils.regression import report as rr

GOODPUT = {"wall_s": 660, "productive_s": 503, "detection_s": 60, "restart_s": 70, "recomputed_s": 20,
           "outages_s": 0, "pending_s": 7, "attempts": 2, "at": 1_767_225_600_000}
LINE = "goodput 76% (lost: pending 7 s, detection 60 s, restart 70 s, recomputed 20 s)"
BLAME = {"node_ip": "10.0.0.12", "host": "w2", "why": "unreadable rank while others wait in a collective",
         "evidence": {"file": "debug/stacks/x/processes.json", "line": "actor pid 7 on 10.0.0.12: no stack"}}


def put(root, sid, **fields):
    status = {"submission_id": sid, "final": True, **fields}
    directory = root / "jobs" / sid
    (directory / "logs").mkdir(parents=True)
    (directory / "status.json").write_text(json.dumps(status))
    return status


def retried(root, **first):
    """A hung first job r-e blamed on 10.0.0.12, resumed by r-e-r1, which succeeded; the entry is r-e-r1's."""
    put(root, "r-e", state="FAILED", reason="HUNG", attempts=["r-e-r1"], **{"blame": [BLAME], "goodput": GOODPUT,
                                                                            **first})
    last = put(root, "r-e-r1", state="SUCCEEDED", attempt_of="r-e", attempt=1)
    return rr.entry_result("e", "sft", "r-e-r1", {**last, "attempts": ["r-e-r1"]}, "",
                           conventions.job_dir(str(root), "r-e-r1"))


def summary(entries):
    return rr.summary_md(rr.build_report("r", "s", 1, 2, entries, []), [])


def test_a_retried_entry_shows_its_chains_goodput_and_who_it_blamed(tmp_path):
    entry = retried(tmp_path)
    assert entry["chain"]["goodput"] == LINE and entry["chain"]["attempts"] == 2
    assert entry["chain"]["account"] == {k: GOODPUT[k] for k in entry["chain"]["account"]}
    assert entry["chain"]["blame"] == [{"node_ip": "10.0.0.12", "why": BLAME["why"], "attempt": "r-e"}]
    md = summary([entry])
    assert "\n## Goodput and blame\n\n" in md
    assert (f"- **e**: goodput 76% (lost: pending 7 s, detection 60 s, restart 70 s, recomputed 20 s); "
            f"blamed: 10.0.0.12: {BLAME['why']} (in r-e)") in md
    assert json.loads(json.dumps(entry))["chain"] == entry["chain"]  # report.json keeps it as it is


@pytest.mark.parametrize("bad", [{"goodput": {**GOODPUT, "productive_s": -5}},
                                 {"goodput": "76%"},
                                 {"blame": [{**BLAME, "why": "[x](http://evil) it was them"}]},
                                 {"blame": [{**BLAME, "node_ip": None}]}])
def test_a_first_job_whose_goodput_or_blame_is_malformed_is_shown_unreadable(tmp_path, bad):
    entry = retried(tmp_path, **bad)
    assert entry["state"] == "SUCCEEDED" and entry["passed"] is True  # the entry's own outcome stands
    found = entry["chain"]
    assert found["goodput"] == "" and found["blame"] == [] and found["attempts"] == 0  # its attempts are unknown
    assert len(found["unreadable"]) == 1 and found["unreadable"][0].startswith("r-e: ")
    assert re.search(r"field '(goodput|blame)'", found["unreadable"][0])
    md = summary([entry])
    assert "- **e**: unreadable: r-e: " in md and "http://evil" not in md


def test_a_job_of_one_attempt_shows_its_blame_and_nothing_else(tmp_path):
    alone = put(tmp_path, "r-a", state="FAILED", blame=[BLAME])
    entry = rr.entry_result("a", "sft", "r-a", alone, "", conventions.job_dir(str(tmp_path), "r-a"))
    assert entry["chain"] == {"goodput": "", "account": None, "attempts": 1, "unreadable": [],
                              "blame": [{"node_ip": "10.0.0.12", "why": BLAME["why"], "attempt": "r-a"}]}
    ok = put(tmp_path, "r-b", state="SUCCEEDED")
    quiet = rr.entry_result("b", "sft", "r-b", ok, "", conventions.job_dir(str(tmp_path), "r-b"))
    assert quiet["chain"] is None and "Goodput and blame" not in summary([quiet])


def test_no_other_record_is_read_unless_the_entrys_record_is_its_jobs_folder(tmp_path):
    put(tmp_path, "r-e", state="FAILED", attempts=["r-e-r1"], goodput=GOODPUT)
    last = {"submission_id": "r-e-r1", "state": "SUCCEEDED", "final": True, "attempt_of": "r-e"}
    assert chain.entry_chain(last, str(tmp_path / "elsewhere" / "r-e-r1")) is None
    assert chain.entry_chain(last, None) is None
    assert chain.entry_chain(None, str(tmp_path)) is None
    assert chain.entry_chain({"state": "SUCCEEDED"}, str(tmp_path)) is None  # no record's status


def test_the_section_is_inert_markdown_whatever_report_json_holds():
    entries = [{"name": "x", "chain": {"goodput": "goodput 1% [x](http://evil)", "unreadable": ["<script>", 3],
                                       "blame": [None, {"node_ip": "`1`", "why": "**b**", "attempt": "![i](x)"}]}},
               {"name": "y", "chain": "not a chain"}, {"name": "z", "chain": {"unreadable": "all"}}, {"name": "w"}]
    lines = chain.section(entries, rr.md)
    assert lines[:3] == ["", "## Goodput and blame", ""] and len(lines) == 4
    assert "<script>" not in lines[3] and not re.search(r"(?<!\\)\]\(http", lines[3]) and "\\`1\\`" in lines[3]
    assert "\\*\\*b\\*\\*" in lines[3] and "\\!\\[i\\]" in lines[3]


def test_the_report_module_shows_a_retried_entrys_chain(tmp_path, capsys):
    import ray_regression_report
    from ansible.module_utils.testing import patch_module_args

    retried(tmp_path)
    args = {"run_id": "r", "suite": "s", "started_at": 1, "shared_root": str(tmp_path) + "/",
            "entries": [{"name": "e", "spec": "sft"}]}
    with patch_module_args(args), pytest.raises(SystemExit):
        ray_regression_report.main()
    out = json.loads(capsys.readouterr().out)
    assert f"- **e**: {LINE}; blamed: 10.0.0.12: {BLAME['why']} (in r-e)" in out["summary"]
    written = json.loads((tmp_path / "regression" / "r" / "report.json").read_text())
    assert written["entries"][0]["chain"]["goodput"] == LINE
