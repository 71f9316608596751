"""Issue 22 §5: reports show job text as text. summary.md escapes it for Markdown and HTML, junit.xml for XML (and
drops what XML 1.0 forbids), and a state that is not a known one is shown as "invalid"."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible.module_utils.base.conventions import tensorboard_link
from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.regression import gates as rg
from ansible.module_utils.regression import report as rr

T0 = 1795323728000
PIECES = ["[x](http://evil)", "![i](http://x)", "<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
          "line\n# heading", "x\n===", "| cell |", "<http://auto>", "http://bare.example", "www.evil.example",
          "a@b.example", "**bold**", "`code`", "~~gone~~", "_em_", "&amp; &#60;", "\\[x\\](http://escaped)",
          "[ref]: http://evil", "[x][ref]", "x\x1b]52;c;Y2xpcA==\x07 \u202eevil\x00 \x1b[2J"]
EVIL = " ".join(PIECES)


def status(state="FAILED", message=EVIL, **extra):
    return {"state": state, "final": True, "reason": "DEADLINE_EXCEEDED", "message": message, "error_type": "E<rr>",
            "steps": 2, "first_loss": 1.0, "last_loss": 0.5,
            "phases": {"pending_s": 1, "running_s": 2, "total_s": 3}, **extra}


def report(entries, previous=(), run_id="r2"):
    return rr.build_report(run_id, "nightly", T0, T0 + 1000, entries, list(previous))


def entry(name="e", st=None, log="", gates=None, rows=None):
    return rr.entry_result(name, "smoke", f"{name}-0001", st if st is not None else status(), log,
                           f"/private/jobs/{name}-0001", metric_rows=rows, gates=gates)


def rendered(md):
    """summary.md as a CommonMark renderer with GFM tables shows it (markdown-it-py, which Ansible's venv has)."""
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough").render(md)


def assert_inert(md):
    """No link, image, HTML or heading comes from job text: only the report's own."""
    for line in md.splitlines():
        assert not re.match(r"#+ (?!FAIL|PASS|Gates$|Failures$|Compared with previous runs$)", line), line
    assert not re.search(r"(?<!\\)\]\(http", md) and "<script" not in md and "<img" not in md and "<http" not in md
    assert not re.search(r"(?<!\\)\[(?!trend\.svg\]|e-0001\]|g-0001\])", md)
    assert not re.search(r"https?://|www\.|(?<!\\)@", md)  # nothing GitHub would turn into a link
    assert "\x1b" not in md and "\x00" not in md and "\u202e" not in md and "\x07" not in md
    html = rendered(md)
    assert "<script" not in html and "<img" not in html
    assert "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert set(re.findall(r'<a href="([^"]*)"', html)) <= {"trend.svg", "../../jobs/e-0001/", "../../jobs/g-0001/"}
    assert len(re.findall(r"<h1>", html)) == 1 and "<h1>heading" not in html and "<h2>heading" not in html
    assert "<strong>bold" not in html and "<code>code" not in html and "<del>" not in html and "<em>em" not in html


@pytest.mark.parametrize("message", [*PIECES, EVIL])
def test_a_jobs_message_is_inert_in_the_summary(message):
    md = rr.summary_md(report([entry(st=status(message=message))]), [])
    assert_inert(md)
    # Shown as the text it was, on one line: still there to read (control characters and escape sequences aside).
    html = rendered(md).replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    assert " ".join(message.split())[:150] in html if message.isprintable() or "\n" in message else "evil" in html


def test_a_message_cannot_add_a_line_or_a_table_cell():
    md = rr.summary_md(report([entry(st=status(state="FAILED", message="a | b\n| x | y |\n# h"))]), [])
    failure = next(line for line in md.splitlines() if line.startswith("- **e**"))
    assert failure == "- **e**: FAILED / DEADLINE_EXCEEDED / E&lt;rr&gt;: a \\| b \\| x \\| y \\| # h"
    row = next(line for line in md.splitlines() if line.startswith("| e |"))
    assert row.count(" | ") == 9  # ten cells, as the header has


STATES = ["<img src=x onerror=alert(1)>", "SUCCEEDED\n# pwned", "[x](http://evil)", "succeeded", 7, None, ["FAILED"],
          "NEW", "a\x00b"]


@pytest.mark.parametrize("state", STATES)
def test_a_state_that_is_not_a_known_one_is_shown_as_invalid(state):
    e = entry(st=status(state=state))
    assert e["state"] == ("MISSING" if state is None else "invalid") and not e["passed"]
    md = rr.summary_md(report([e]), [])
    assert "| e | invalid |" in md or "| e | MISSING |" in md
    assert_inert(md)
    ET.fromstring(rr.junit_xml(report([e])))


def test_states_of_an_earlier_report_are_checked_too():
    """report.json of an earlier run is data: its entries' states and names are checked and escaped."""
    old = report([entry(st=status(state="SUCCEEDED", message=""))], run_id="r1")
    old["entries"][0]["state"] = "<script>x</script>"
    old["entries"].append({"name": "[y](http://evil)", "state": "![i](http://x)", "passed": True})
    old["entries"].append("not an entry")
    old["run_id"] = "r1) [z](http://evil"
    md = rr.summary_md(report([entry()], previous=[old]), [old])
    assert "- e: invalid → FAILED" in md
    assert_inert(md)


def test_a_gates_metric_name_cannot_inject_a_heading():
    with pytest.raises(rg.GateError, match=r"metric must be a metric name"):
        rg.check_gates([{"metric": "loss\n# pwned", "max": 1}])
    for metric in ("loss\n# pwned", "[x](http://evil)", "<b>x</b>", "a|b", "x" * 201, "1abc", ""):
        with pytest.raises(rg.GateError):
            rg.check_gates([{"metric": metric, "max": 1}])
    assert rg.check_gates([{"metric": "val-core/x/reward/mean@1", "max": 1}])
    assert rg.check_gates([{"metric": "critic/score/max", "max": 1}])
    # A gate that never went through check_gates (an old report, a caller's own) is still shown inert.
    gate = {"metric": "loss\n# pwned [x](http://evil)", "at": "last", "max": 0.1}
    e = entry("g", st=status(state="SUCCEEDED", message=""), gates=[gate], rows=[{"step": 1, "loss": 0.5}])
    md = rr.summary_md(report([e]), [])
    assert "# pwned" in md and not any(line.startswith("# pwned") for line in md.splitlines())
    assert_inert(md)


def test_junit_is_well_formed_whatever_the_job_wrote():
    nasty = "a<b & c>d \"q\" 'q' \x00 \x1b[31m \x0b \ud800 ]]> </failure> \ufffe"
    e = entry(name="n", st=status(state="FAILED", message=nasty, reason=nasty, error_type=nasty,
                                  diagnosis={"kind": nasty, "hint": nasty}), log=nasty)
    odd = entry(name="o", st=status(state="FAILED\x00<&\x1b"))
    text = rr.junit_xml(report([e, odd]))
    root = ET.fromstring(text.encode("utf-8"))
    assert root.findall("testsuite/testcase/failure")[1].get("type") == "invalid"
    failure = root.find("testsuite/testcase/failure")
    message = failure.get("message")
    assert "a<b & c>d" in message and "\x00" not in message and "\x1b" not in message
    assert "a<b & c>d" in failure.text and "</failure>" in failure.text
    for bad in ("\x00", "\x1b", "\x0b", "\ud800", "\ufffe"):
        assert bad not in text
    assert "&lt;b &amp; c&gt;" in text


def test_report_json_keeps_the_text_as_data(tmp_path):
    rep = report([entry()])
    paths = rr.write_report(str(tmp_path / "r2"), rep, [])
    ET.parse(paths["junit.xml"])
    assert json.loads(Path(paths["report.json"]).read_text())["entries"][0]["state"] == "FAILED"
    assert_inert(Path(paths["summary.md"]).read_text())


def test_md_escapes_what_would_be_markup():
    assert rr.md("[x](http://evil)") == "\\[x\\](http\\://evil)"
    assert rr.md("![i](http://x)") == "\\!\\[i\\](http\\://x)"
    assert rr.md("<script>") == "&lt;script&gt;"
    assert rr.md("line\n# heading") == "line # heading"
    assert rr.md("DEADLINE_EXCEEDED step_time_s") == "DEADLINE_EXCEEDED step_time_s"  # intraword _ is plain
    assert rr.md("_em_ *b* `c` ~d~ a|b \\ www.x.org a@b") == \
        "\\_em\\_ \\*b\\* \\`c\\` \\~d\\~ a\\|b \\\\ www\\.x.org a\\@b"


# The link to a run in TensorBoard (issue 23): report.json is data, so summary.md links only what
# conventions.tensorboard_link makes for the entry's own id.

BOARD = "http://10.0.0.10:6006"
GOOD = f"{BOARD}/?runFilter=%5Ee-0001/#timeseries"
BAD_BOARDS = ["javascript:alert(1)", "JavaScript:alert(1)//?runFilter=%5Ee-0001/#timeseries",
              "data:text/html,<script>alert(1)</script>", f"{GOOD}) [x](http://evil", f"{GOOD}\n# heading",
              f"{GOOD}<script>", f"{GOOD} ", f" {GOOD}", f"{GOOD}\x1b[2J",
              f"{BOARD}/?runFilter=%5Eother-0001/#timeseries", f"{BOARD}/?runFilter=e-0001",
              f"{BOARD}//?runFilter=%5Ee-0001/#timeseries", "ftp://h/?runFilter=%5Ee-0001/#timeseries",
              "http://user@evil.example/?runFilter=%5Ee-0001/#timeseries",
              "http://evil.example\\@h/?runFilter=%5Ee-0001/#timeseries",
              "http://h:6006/x/?runFilter=%5Ee-0001/#timeseries", "http:// h/?runFilter=%5Ee-0001/#timeseries",
              "http://h:123456/?runFilter=%5Ee-0001/#timeseries", "", ["list"], 7, {"url": BOARD}]


def with_board(board, sid="e-0001"):
    e = entry(st=status(state="SUCCEEDED", message=""), rows=[{"step": 1, "loss": 0.5}])
    e["tensorboard"], e["submission_id"] = board, sid  # as an earlier or edited report.json may hold them
    return e


def curves_cell(md):
    return next(line for line in md.splitlines() if line.startswith("| e |")).rsplit(" | ", 1)[1]


@pytest.mark.parametrize("board", BAD_BOARDS)
def test_a_board_link_that_is_not_the_expected_shape_renders_as_a_dash(board):
    assert rr._board_link(board, "e-0001") is False
    md = rr.summary_md(report([with_board(board)]), [])
    assert curves_cell(md) == "– |"
    assert_inert(md)


def test_the_board_link_of_the_entry_is_its_only_external_link():
    md = rr.summary_md(report([with_board(GOOD)]), [])
    assert rr._board_link(GOOD, "e-0001") and curves_cell(md) == f"[TensorBoard]({GOOD}) |"
    assert set(re.findall(r'<a href="([^"]*)"', rendered(md))) == {"trend.svg", "../../jobs/e-0001/", GOOD}
    assert_inert(md.replace(f"[TensorBoard]({GOOD})", "–"))
    # Not an id (so no record link either): no curves link, whatever the board says.
    odd = rr.summary_md(report([with_board(f"{BOARD}/?runFilter=e 1#timeseries", sid="e 1")]), [])
    assert curves_cell(odd) == "– |"


@pytest.mark.parametrize("url", [BOARD, BOARD + "/", "https://tb.example.org", "http://head:6006//"])
@pytest.mark.parametrize("sid", ["e-0001", "grpo-20250102T030405Z-abc123", "A" + "._-" * 42 + "9"])
def test_tensorboard_link_is_the_run_of_the_job_and_the_report_shows_it(url, sid):
    link = tensorboard_link(url, sid)
    assert link == f"{url.rstrip('/')}/?runFilter=%5E{sid.replace('.', '%5C.')}/#timeseries"
    assert rr._board_link(link, sid) and not rr._board_link(link, sid + "x")


def test_without_a_board_there_is_no_link():
    assert tensorboard_link(None, "e-0001") is None and tensorboard_link("", "e-0001") is None
    assert rr._board_link(None, "e-0001") is False


def test_every_tensorboard_url_ray_config_accepts_gives_a_link_the_summary_shows():
    url = "http://[fd00::10]:6006"
    assert jobspec.as_ray_config({"address": "10.0.0.10:6379", "dashboard_url": "http://10.0.0.10:8265",
                                  "tensorboard_url": url}).tensorboard_url == url
    assert rr._board_link(tensorboard_link(url, "e-0001"), "e-0001")
