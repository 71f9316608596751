"""module_utils/jobs/record/retry.py: the one retry rule the follower, the watcher and the regression runner ask."""

import pytest
from ansible.module_utils.jobs.record import retry
from ansible.module_utils.jobs.record.status import StatusFile


def failed(reason=None, kind="hung", on=("hung",), max_=1, state="FAILED", final=True, workload="sft"):
    return StatusFile.from_dict({"submission_id": "j", "state": state, "final": final, "reason": reason,
                                "workload": workload,
                                "retries": {"max": max_, "on": list(on)},
                                "diagnosis": {"kind": kind} if kind else None}, where="test")


@pytest.mark.parametrize("status, made, due, why", [
    (failed("HUNG"), 0, True, "attempt 1 of 1"),
    (failed("HUNG"), None, True, "attempt 1 of 1"),
    (failed("HUNG"), 1, False, "its 1 retries are spent"),
    (failed("HUNG", workload="command"), 0, False,
     "a command job does not resume from a checkpoint (only ppo, grpo, sft do)"),
    (failed("HUNG", workload=None), 0, False,
     "a job whose workload is not recorded does not resume from a checkpoint (only ppo, grpo, sft do)"),
    (failed(None, kind="nccl_gloo", on=("nccl_gloo",), max_=2), 1, True, "attempt 2 of 2"),
    (failed("DEADLINE_EXCEEDED", kind="nccl_gloo", on=("nccl_gloo",)), 0, False, "it was stopped (DEADLINE_EXCEEDED)"),
    (failed("PENDING_TIMEOUT", kind="hung"), 0, False, "it was stopped (PENDING_TIMEOUT)"),
    (failed("HUNG", on=()), 0, False, "its spec does not retry hung"),
    (failed(None, kind=None, on=("hung",)), 0, False, "its spec does not retry an unknown failure"),
    (failed(None, state="SUCCEEDED"), 0, False, "it is SUCCEEDED"),
    (failed(None, state="RUNNING", final=False), 0, False, "it is RUNNING"),
])
def test_the_rule(status, made, due, why):
    assert retry.due(status, made) == (due, why)
