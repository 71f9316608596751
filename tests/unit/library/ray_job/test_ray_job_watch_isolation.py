"""Issue 31: whatever one record holds costs that record only. An error in one job's step is one line in the pass's
`errors`; the pass exits 0 and the other jobs are judged and finalised as ever."""

import json
import os

from ansible.module_utils.jobs.evidence import driver_log
from ray_job_harness import SID, make_spec, record, run

OTHER = SID + "-other"


def start(capsys, ray, ray_config, sid):
    code, _ = run(capsys, spec=make_spec(ray_config, submission_id=sid), ray_config=ray_config)
    assert code == 0
    ray.set(sid, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))


def test_one_records_error_is_a_line_and_the_others_are_finalised(ray, ray_config, capsys, monkeypatch):
    start(capsys, ray, ray_config, SID)
    start(capsys, ray, ray_config, OTHER)
    ray.set(OTHER, "SUCCEEDED", driver_exit_code=0, end_time=int(ray.clock.now * 1000) + 5000)
    real = driver_log.refresh_log

    def refresh_log(job, *args, **kwargs):
        if job.sid == SID:  # what no reader foresaw in this one record
            raise OverflowError("int too large to convert to float")
        return real(job, *args, **kwargs)

    monkeypatch.setattr(driver_log, "refresh_log", refresh_log)
    code, out = run(capsys, action="watch", ray_config=ray_config)
    assert code == 0 and out["finalized"] == [OTHER] and out["ended"][OTHER] == "SUCCEEDED", out
    assert out["errors"] == [f"{SID}: OverflowError: int too large to convert to float"], out
    with open(os.path.join(record(ray_config, OTHER), "status.json"), encoding="utf-8") as handle:
        assert json.load(handle)["final"]
    with open(os.path.join(record(ray_config, SID), "status.json"), encoding="utf-8") as handle:
        assert not json.load(handle)["final"]  # unchanged: the next pass tries it again
