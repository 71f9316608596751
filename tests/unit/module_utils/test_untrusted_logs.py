"""A job's log is untrusted text (issue 22, class 4): parsing it is linear whatever its lines' lengths, and nothing
in it reaches the operator's terminal as a control character. The driver log's incremental read is in
tests/unit/module_utils/jobs/test_incremental_log.py."""

import time

import pytest
from ansible.module_utils import conventions, diagnosis
from ansible.module_utils import verl_metrics as vm
from ansible.module_utils.jobs import evidence, hang
from ansible.module_utils.jobs.status import JobStatus

# Lines that made a pattern backtrack over the whole line from each of their many starts.
LONG_LINES = {
    "node_died": lambda n: "node " * (n // 5),  # r"node .* (was|is) dead"
    "nccl": lambda n: "ProcessGroupNCCL " * (n // 17),  # r"ProcessGroupNCCL.*(timed out|Timeout)"
    "oom": lambda n: "Killed process 1 " * (n // 17),  # r"Killed process \d+ .*oom"
    "hydra": lambda n: "Key '" * (n // 5),  # r"Key '[^']+' is not in struct"
}


def step_line(n):
    """A step line behind an unclosed Ray prefix full of pid=: the prefix pattern backtracked over each pid=."""
    return "(x " + "pid=1 " * (n // 6) + "step:1 - train/loss:1.0"


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def assert_linear(work, make):
    """100 times the input costs less than 300 times the time (quadratic: ~10,000 times). The small input is timed
    as 100 calls, so a clock's resolution cannot decide it."""
    small, big = make(2_000), make(200_000)
    t_small = best_of(3, lambda: [work(small) for _ in range(100)]) / 100
    t_big = best_of(3, lambda: work(big))
    assert t_big < 300 * t_small, f"2 KB: {t_small:.6f}s, 200 KB: {t_big:.6f}s"


@pytest.mark.parametrize("kind", sorted(LONG_LINES))
def test_diagnosis_is_linear_in_a_long_line(kind):
    assert_linear(lambda text: diagnosis.classify([("logs/driver.log", text)]), LONG_LINES[kind])


def test_the_step_search_is_linear_in_a_long_line():
    assert_linear(vm.last_step_line, step_line)
    assert_linear(hang.last_step, step_line)
    assert_linear(lambda text: vm.fold(vm.new_state(), text), step_line)
    assert_linear(vm.parse_log, lambda n: "step:1 - " + " - ".join(["a:1"] * (n // 6)))


def test_a_long_line_still_shows_its_signature_at_either_end():
    middle = "x" * 100_000
    assert diagnosis.classify([("d", "CUDA out of memory " + middle)])["kind"] == "cuda_oom"
    found = diagnosis.classify([("d", middle + " NodeDiedError")])
    assert found["kind"] == "node_died" and len(found["evidence"]["line"]) == diagnosis.EVIDENCE_WIDTH
    # The split patterns match what the regex matched.
    assert diagnosis.classify([("d", "node 10.0.0.1 was dead")])["kind"] == "node_died"
    assert diagnosis.classify([("d", "node was dead")]) is None
    assert diagnosis.classify([("d", "Killed process 12 (python) total-vm oom")])["kind"] == "oom_kill"


def test_huge_numbers_in_a_step_line_are_no_error():
    assert vm.parse_line("step:" + "9" * 5000 + " - train/loss:1.0") is None
    assert vm.parse_line("step:1 - train/loss:" + "1" * 5000 + " - a:2") == (1, {"a": 2.0})


# An OSC 52 clipboard write, clear screen and cursor home (7- and 8-bit), BEL, backspace, a bidi override; then CR.
ESCAPES = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[H\x9b2J\x07\x08\u202e"
NASTY = ESCAPES + "\r"


def test_printable_removes_controls_and_escapes_but_keeps_text():
    assert conventions.printable(f"a{NASTY}b\tc\nd") == "ab\tc\nd"
    assert conventions.one_line(f"a{NASTY}b\tc\nd") == "a b c d"  # the CR is a space on one line
    assert conventions.printable("\x1b[36m(pid=1)\x1b[0m step:1") == "(pid=1) step:1"
    # An unterminated OSC ends at the line's end, never swallowing the next line.
    assert conventions.printable("a\x1b]0;title\nnext") == "a\nnext"
    assert conventions.printable("é ü → 日本") == "é ü → 日本"


class FakeJob:
    sid = "j-1"

    @staticmethod
    def redact(value):
        return value


def running_info():
    return {"status": "RUNNING", "start_time": 1, "submission_id": "j-1"}


@pytest.mark.parametrize("log", [f"step:3 - train/loss:1.0 - note:{NASTY}x\n",
                                 f"{NASTY}(Actor pid=1) step:3 - train/loss:1.0{NASTY}\n"])
def test_control_characters_never_reach_the_progress_line(log):
    status = JobStatus("j-1", state="RUNNING", timeouts={"pending_s": 600}, retries={"max": 0, "on": []})
    for text in (log, evidence._log_text(log, _parsed(log))):
        line = evidence.progress_line(FakeJob(), running_info(), status, text)
        assert "step:3 - train/loss:1.0" in line
        assert not any(c in line for c in "\x1b\x07\x9b\r\x08\u202e"), repr(line)
    status.state, status.reason, status.ended_short = "FAILED", f"X{NASTY}", None
    assert "\x1b" not in evidence.final_line(FakeJob(), status)


def _parsed(text):
    state = vm.new_state()
    vm.fold(state, text)
    return state


def test_the_diagnosis_evidence_and_the_logs_tail_are_printable():
    found = diagnosis.classify([("d", f"NodeDiedError {ESCAPES} here")])
    assert found["evidence"]["line"] == "NodeDiedError here"
    tail = evidence._log_text(f"a{NASTY}\nb\n", _parsed(""))
    assert tail == "a\nb\n" and tail.splitlines()[-1] == "b"
