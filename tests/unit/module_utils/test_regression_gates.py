"""module_utils/regression/gates.py: checking suite gates and evaluating them against metric rows."""

import pytest
from ansible.module_utils.regression import gates as rg
from ansible.module_utils.verl import metrics

ROWS = [
    {"step": 1, "loss": 0.5, "reward": 0.08, "metrics": {"critic/score/max": 0.22}},
    {"step": 2, "loss": 0.3, "reward": 0.10, "metrics": {"critic/score/max": 0.34}},
]


def one(gate):
    return rg.evaluate(rg.check_gates([gate])[0], ROWS)


@pytest.mark.parametrize("gate, ok", [
    ({"metric": "step", "min": 2}, True),
    ({"metric": "step", "min": 3}, False),
    ({"metric": "reward", "at": "last", "min": 0.09}, True),
    ({"metric": "reward", "at": "first", "min": 0.09}, False),
    ({"metric": "loss", "at": "change", "max": 0}, True),
    ({"metric": "reward", "at": "change", "max": 0}, False),
    ({"metric": "loss", "at": "mean", "min": 0.39, "max": 0.41}, True),
    ({"metric": "critic/score/max", "at": "max", "golden": 0.3, "tolerance": 0.2}, True),
    ({"metric": "critic/score/max", "at": "max", "golden": 0.3, "tolerance": 0.1}, False),
    ({"metric": "reward", "at": "min", "golden": 0.1, "abs_tolerance": 0.01}, False),
])
def test_gate_outcomes(gate, ok):
    assert one(gate)["ok"] is ok


def test_failed_gate_names_metric_value_and_bound():
    res = one({"metric": "reward", "at": "last", "min": 0.5})
    assert res["value"] == 0.10 and res["metric"] == "reward"
    assert res["message"] == "gate reward last ≥ 0.5: reward last = 0.1, below 0.5"


def test_missing_metric_fails_its_gate():
    res = one({"metric": "critic_loss", "max": 1})
    assert not res["ok"] and res["value"] is None and "has no value" in res["message"]
    assert rg.evaluate_all(rg.check_gates([{"metric": "loss", "max": 1}]), [])[0]["ok"] is False


def test_describe():
    assert rg.describe({"metric": "reward", "at": "first", "golden": 0.0775, "tolerance": 0.5}) == \
        "reward first = 0.0775 ± 50 %"
    assert rg.describe({"metric": "step_time_s", "at": "max", "min": 0, "max": 120}) == \
        "step_time_s max ≥ 0 and ≤ 120"


@pytest.mark.parametrize("gates, message", [
    ("reward", "must be a list"),
    (["reward"], "must be a mapping"),
    ([{"min": 1}], "needs metric"),
    ([{"metric": "loss", "at": "median", "max": 1}], "at must be one of"),
    ([{"metric": "loss", "max": "1"}], "max must be a number"),
    ([{"metric": "loss", "max": True}], "max must be a number"),
    ([{"metric": "loss"}], "needs min, max or golden"),
    ([{"metric": "loss", "max": 1, "tolerance": 0.1}], "tolerance needs golden"),
    ([{"metric": "loss", "golden": 1, "tolerance": -0.1}], "must not be negative"),
    ([{"metric": "loss", "min": 2, "max": 1}], "is above max"),
    ([{"metric": "loss", "max": 1, "maximum": 2}], "unknown key(s) maximum"),
])
def test_check_gates_rejects_malformed_gates(gates, message):
    with pytest.raises(rg.GateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rg.check_gates(gates, "suite 'lab' entry 1 gates")


def test_check_gates_fills_in_last():
    assert rg.check_gates(None) == []
    assert rg.check_gates([{"metric": "loss", "max": 1}]) == [{"metric": "loss", "max": 1, "at": "last"}]


def test_the_stats_read_metrics_keeps_give_the_verdicts_the_rows_give(tmp_path):
    """The report reduces each metric over every row as it streams metrics.jsonl (verl.metrics.read_metrics' stats,
    issue 31), keeping only a sample of rows: every gate comes out as it does over all the rows."""
    path = tmp_path / metrics.METRICS_FILE
    path.write_text("".join(
        f'{{"step":{r["step"]},"data":{{"actor/pg_loss":{r["loss"]},"critic/score/mean":{r["reward"]},'
        f'"critic/score/max":{r["metrics"]["critic/score/max"]}}}}}\n' for r in ROWS))
    stats = metrics.read_metrics(str(path))["stats"]
    for gate in [{"metric": m, "at": at, "min": -1} for m in ("step", "loss", "reward", "critic/score/max", "kl")
                 for at in rg.REDUCERS]:
        gate = rg.check_gates([gate])[0]
        assert rg.evaluate(gate, [], stats)["value"] == pytest.approx(rg.evaluate(gate, ROWS)["value"]), gate
