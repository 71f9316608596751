"""Regression gates: conditions on a job's per-step metrics that a suite entry must meet to pass.

A suite entry (suites/<name>.yaml) may list gates:

    gates:
      - {metric: step, at: last, min: 2}                    # trained at least 2 steps
      - {metric: reward, at: last, min: 0.02}               # a threshold
      - {metric: loss, at: change, max: 0}                  # the loss fell (last - first <= 0)
      - {metric: step_time_s, at: max, max: 120}            # no step slower than 2 minutes
      - {metric: reward, at: first, golden: 0.0775, tolerance: 0.5}   # within 50 % of an earlier passing run

`metric` is a metrics.jsonl name (verl.metrics.SUMMARY_KEYS: loss, reward, kl, ...; `step` is the step number)
or any key verl printed (critic/score/max). `at` reduces the per-step values to one: first, last (default),
min, max, mean or change (last - first). `min`/`max` bound it; `golden` with `tolerance` (a fraction of
|golden|, default 0.1) or `abs_tolerance` compares it with a known value. A metric with no value fails its gate.
The report reduces a metric over every row of its file as it streams it (verl.metrics.read_metrics' stats), so a
gate holds over the whole run while the rows kept are a sample; rows alone (a test, a small file) reduce the same.

Standard library and base.files only: imported by the report module (ansible.module_utils.regression.gates), the
suite loader on the control host, and scripts.
"""

import re

from ansible.module_utils.base import files

REDUCERS = ("first", "last", "min", "max", "mean", "change")
_KEYS = {"metric", "at", "min", "max", "golden", "tolerance", "abs_tolerance"}
DEFAULT_TOLERANCE = 0.1
# A metric name as verl prints one (verl.metrics' key pattern: critic/score/max, val-core/x/reward/mean@1): one line,
# no markup characters, so it is safe in every report (summary.md, junit.xml) it is named in.
METRIC_RULE = (r"^(?!\d)[\w/().@-]{1,200}$",
               "a metric name as verl prints it (letters, digits and _/().@-, at most 200)")


class GateError(ValueError):
    """A gate in a suite file is malformed."""


def _is_number(value):
    """A number within ±files.VALUE_MAX (a 400-digit integer in a suite file is none, and raises nothing)."""
    return files.bounded_number(value) is not None


def check_gates(gates, where="gates"):
    """Validate a suite entry's gates; returns them as a list of plain dicts (at filled in)."""
    if gates is None:
        return []
    if not isinstance(gates, list):
        raise GateError(f"{where}: must be a list of gates")
    out = []
    for i, gate in enumerate(gates):
        here = f"{where}[{i}]"
        if not isinstance(gate, dict):
            raise GateError(f"{here}: must be a mapping of metric, at, min, max, golden, tolerance")
        unknown = set(gate) - _KEYS
        if unknown:
            # Key names only (each on one line, cut short): a gate's values are never repeated.
            names = ", ".join(sorted(" ".join(str(k).split())[:60] for k in unknown))
            raise GateError(f"{here}: unknown key(s) {names} (allowed: {', '.join(sorted(_KEYS))})")
        if not isinstance(gate.get("metric"), str) or not gate["metric"]:
            raise GateError(f"{here}: needs metric, a metric name")
        if re.fullmatch(METRIC_RULE[0], gate["metric"]) is None:
            raise GateError(f"{here}: metric must be {METRIC_RULE[1]}")
        at = gate.get("at", "last")
        if at not in REDUCERS:
            raise GateError(f"{here}: at must be one of {', '.join(REDUCERS)}")
        for key in ("min", "max", "golden", "tolerance", "abs_tolerance"):
            if key in gate and not _is_number(gate[key]):
                raise GateError(f"{here}: {key} must be a number")
        if not any(key in gate for key in ("min", "max", "golden")):
            raise GateError(f"{here}: needs min, max or golden")
        if ("tolerance" in gate or "abs_tolerance" in gate) and "golden" not in gate:
            raise GateError(f"{here}: tolerance needs golden")
        if any(gate.get(key, 0) < 0 for key in ("tolerance", "abs_tolerance")):
            raise GateError(f"{here}: tolerances must not be negative")
        if "min" in gate and "max" in gate and gate["min"] > gate["max"]:
            raise GateError(f"{here}: min is above max")
        out.append({**gate, "at": at})
    return out


def reduce_values(values, at):
    """One number from a metric's per-step values, or None when there are none."""
    if not values:
        return None
    if at == "first":
        return values[0]
    if at == "last":
        return values[-1]
    if at == "min":
        return min(values)
    if at == "max":
        return max(values)
    if at == "mean":
        return sum(values) / len(values)
    return values[-1] - values[0]  # change


def reduce_stat(stat, at):
    """One number from what read_metrics kept of a metric over every row (verl.metrics.new_stat's form), or None."""
    if not isinstance(stat, dict) or not stat.get("count"):
        return None
    if at == "mean":
        return stat["sum"] / stat["count"]
    if at == "change":
        return stat["last"] - stat["first"]
    return stat[at]


def _values(rows, metric):
    out = []
    for row in rows:
        value = row.get(metric, (row.get("metrics") or {}).get(metric))
        if _is_number(value):
            out.append(float(value))
    return out


def describe(gate):
    """`reward last ≥ 0.02`, `reward first = 0.0775 ± 50 %`: the gate in words."""
    name = f"{gate['metric']} {gate['at']}"
    parts = []
    if "min" in gate:
        parts.append(f"≥ {gate['min']:g}")
    if "max" in gate:
        parts.append(f"≤ {gate['max']:g}")
    if "golden" in gate:
        if "abs_tolerance" in gate:
            parts.append(f"= {gate['golden']:g} ± {gate['abs_tolerance']:g}")
        else:
            parts.append(f"= {gate['golden']:g} ± {gate.get('tolerance', DEFAULT_TOLERANCE) * 100:g} %")
    return f"{name} " + " and ".join(parts)


def evaluate(gate, rows, stats=None):
    """{gate, metric, at, value, ok, message} for one checked gate against a job's metric rows, or, given, the stats
    read_metrics kept over every row ({name: verl.metrics.new_stat's form})."""
    if stats is not None:
        value = reduce_stat(stats.get(gate["metric"]), gate["at"])
    else:
        value = reduce_values(_values(rows, gate["metric"]), gate["at"])
    text = describe(gate)
    result = {"gate": text, "metric": gate["metric"], "at": gate["at"], "value": value}
    if value is None:
        return {**result, "ok": False, "message": f"gate {text}: metric {gate['metric']} has no value"}
    problems = []
    if "min" in gate and value < gate["min"]:
        problems.append(f"below {gate['min']:g}")
    if "max" in gate and value > gate["max"]:
        problems.append(f"above {gate['max']:g}")
    if "golden" in gate:
        allowed = gate.get("abs_tolerance")
        if allowed is None:
            allowed = gate.get("tolerance", DEFAULT_TOLERANCE) * abs(gate["golden"])
        if abs(value - gate["golden"]) > allowed:
            problems.append(f"off golden {gate['golden']:g} by {abs(value - gate['golden']):.4g} "
                            f"(allowed {allowed:.4g})")
    if problems:
        return {**result, "ok": False, "message": f"gate {text}: {gate['metric']} {gate['at']} = {value:.6g}, "
                                                  + ", ".join(problems)}
    return {**result, "ok": True, "message": f"gate {text}: {value:.6g}"}


def evaluate_all(gates, rows, stats=None):
    return [evaluate(gate, rows, stats) for gate in gates or []]
