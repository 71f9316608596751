"""module_utils/verl/metrics.py: verl's file-logger lines (a verl job's metrics.jsonl) -> metrics rows; the console
lines of a job that is not verl -> its steps (fold). The drawing moved to module_utils/regression/svg_charts.py
(tests/unit/module_utils/test_svg_charts.py)."""

import json
import os

from ansible.module_utils.verl import metrics

# Shapes verl 0.9.1 prints (aggregate_logger.concat_dict_to_str: pprint of each number), trimmed.
GRPO_LOG = """\
(TaskRunnerV1 pid=1) INFO: Total training steps: 2
(TaskRunnerV1 pid=1) step:1 - global_seqlen/mean:412.0 - actor/pg_loss:-0.0587 - actor/kl_loss:0.0 \
- actor/entropy:5.98 - actor/grad_norm:0.375 - critic/score/mean:0.0775 - critic/score/max:0.22 \
- response_length/mean:31.5 - timing_s/step:21.1 - perf/throughput:93.2 - training/global_step:1 - actor/lr:0.001
(TaskRunnerV1 pid=1) step:2 - actor/pg_loss:np.float64(-0.00072) - actor/kl_loss:0.00282 - critic/score/mean:0.078 \
- actor/grad_norm:nan - timing_s/step:3.1 - response_length/mean:32.0 - perf/throughput:inf
(TaskRunnerV1 pid=1) Saving checkpoint to: /private/jobs/x/checkpoints/global_step_2
"""

SFT_LOG = """\
step:1 - perf/max_memory_allocated_gb:0.603 - train/loss:6.0 - train/grad_norm:3.30 - train/lr:0.001
Epoch 1/4:  12%|#         | 1/8 [00:01<00:09,  1.36s/it]step:2 - train/loss:5.75 - train/grad_norm:2.9
step:2 - val/loss:5.625
Final validation metrics: {'val/loss': 5.625}
"""


def test_parse_line_reads_every_number_and_skips_words():
    step, values = metrics.parse_line("(pid=3) step:7 - a/b:1.5 - c:np.float32(2.0) - d:abc - e:True - f:-1e-3")
    assert step == 7 and values == {"a/b": 1.5, "c": 2.0, "f": -0.001}
    assert metrics.parse_line("no step here - a:1") is None
    assert metrics.parse_line("training/global_step:3 - a:1") is None  # a key, not the line's step
    assert metrics.parse_line("step:3") is None


def test_console_lines_give_one_row_per_step_with_summary_names():
    rows = metrics.fold(metrics.new_state(), GRPO_LOG)
    assert [r["step"] for r in rows] == [1, 2]
    first, second = rows
    assert first["loss"] == -0.0587 and first["reward"] == 0.0775 and first["kl"] == 0.0
    assert first["entropy"] == 5.98 and first["grad_norm"] == 0.375 and first["response_length"] == 31.5
    assert first["step_time_s"] == 21.1 and first["throughput"] == 93.2
    assert first["metrics"]["critic/score/max"] == 0.22
    assert second["loss"] == -0.00072
    # nan and inf are not values: the summary leaves them out.
    assert "grad_norm" not in second and "throughput" not in second


def test_sft_console_validation_line_merges_into_its_step():
    rows = metrics.fold(metrics.new_state(), SFT_LOG)
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 6.0), (2, 5.75)]
    assert rows[1]["val_loss"] == 5.625 and rows[1]["metrics"]["train/grad_norm"] == 2.9


# What verl's file logger writes (verl/utils/tracking.py FileLogger: orjson, one line a log call; orjson writes a
# NaN as null, a numpy array as a list). The exact values, where the console rounds.
GRPO_FILE = """\
{"step":1,"data":{"global_seqlen/mean":412.0,"actor/pg_loss":-0.05871234567,"actor/kl_loss":0.0,"actor/entropy":5.98,"actor/grad_norm":0.375,"critic/score/mean":0.0775,"critic/score/max":0.22,"response_length/mean":31.5,"timing_s/step":21.1,"perf/throughput":93.2,"training/global_step":1,"actor/lr":0.001}}
{"step":2,"data":{"actor/pg_loss":-0.00072,"actor/kl_loss":0.00282,"critic/score/mean":0.078,"actor/grad_norm":null,"timing_s/step":3.1,"response_length/mean":32,"perf/throughput":Infinity,"response/hist":[1,2,3]}}
"""
SFT_FILE = """\
{"step":1,"data":{"perf/max_memory_allocated_gb":0.603,"train/loss":6.0,"train/grad_norm":3.3,"train/lr":0.001}}
{"step":2,"data":{"train/loss":5.75,"train/grad_norm":2.9}}
{"step":2,"data":{"val/loss":5.625}}
"""


def rows_of(text):
    steps = {}
    bad = metrics.fold_rows(steps, text.splitlines())
    return metrics.rows_of(steps), bad


def test_file_logger_lines_give_one_row_per_step_with_exact_values_and_summary_names():
    rows, bad = rows_of(GRPO_FILE)
    assert bad == 0 and [r["step"] for r in rows] == [1, 2]
    first, second = rows
    assert first["loss"] == -0.05871234567 and first["reward"] == 0.0775 and first["kl"] == 0.0
    assert first["entropy"] == 5.98 and first["grad_norm"] == 0.375 and first["response_length"] == 31.5
    assert first["step_time_s"] == 21.1 and first["throughput"] == 93.2
    assert first["metrics"]["critic/score/max"] == 0.22 and first["metrics"]["training/global_step"] == 1
    assert second["loss"] == -0.00072 and second["response_length"] == 32
    # null (orjson's NaN), inf and a list are not values: left out of the row and its summary.
    assert "grad_norm" not in second and "throughput" not in second
    assert not {"actor/grad_norm", "perf/throughput", "response/hist"} & set(second["metrics"])


def test_sft_file_validation_line_merges_into_its_step():
    rows, _ = rows_of(SFT_FILE)
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 6.0), (2, 5.75)]
    assert rows[1]["val_loss"] == 5.625 and rows[1]["metrics"]["train/grad_norm"] == 2.9


def test_a_repeated_step_takes_the_newest_values():
    rows, _ = rows_of('{"step":3,"data":{"train/loss":2.0,"a":1}}\n{"step":3,"data":{"train/loss":1.5}}\n')
    assert rows == [{"step": 3, "loss": 1.5, "metrics": {"a": 1, "train/loss": 1.5}}]


def test_file_row_keeps_only_finite_numbers_under_short_printable_keys():
    step, values = metrics.file_row(json.dumps({"step": 4, "data": {
        "ok": 1, "f": 0.5, "t": True, "s": "1.0", "n": None, "l": [1], "d": {"a": 1}, "": 1,
        "k" * (metrics.KEY_CAP + 1): 1, "k" * metrics.KEY_CAP: 2, "a\x1bb": 1, "tab\t": 1, "\u202e": 1, "é/ü": 3}}))
    assert step == 4 and values == {"ok": 1, "f": 0.5, "k" * metrics.KEY_CAP: 2, "é/ü": 3}
    assert type(values["ok"]) is int
    for line in ('{"step":4,"data":{"a":NaN,"b":-Infinity}}', '{"step":4,"data":{"a":1e999}}'):
        assert metrics.file_row(line) == (4, {})
    over_the_cap = '{"step":1,"data":{"a":' + " " * metrics.JSONL_LINE_CAP + "1}}"
    assert metrics.file_row(over_the_cap) is None  # unread


def test_file_row_refuses_what_is_no_row():
    for line in ("", "not json", "[1]", '"x"', "7", "null", '{"data":{}}', '{"step":"1","data":{}}',
                 '{"step":true,"data":{}}', '{"step":1.0,"data":{}}', '{"step":-1,"data":{}}',
                 '{"step":1,"data":[1]}', '{"step":1,"data":"a:1"}', '{"step":1}', "[" * 100_000):
        assert metrics.file_row(line) is None, line[:40]


def test_our_own_old_rows_are_read_too():
    """Records from before verl's file logger was used hold our rows: {"step", <summary names>, "metrics"}."""
    old = '{"loss": 6.0, "metrics": {"train/loss": 6.0, "train/lr": 0.001}, "step": 1}'
    assert metrics.file_row(old) == (1, {"train/loss": 6.0, "train/lr": 0.001})


def test_read_jsonl_reads_the_record_s_file_skipping_what_is_no_row(tmp_path):
    path = tmp_path / metrics.METRICS_FILE
    path.write_text(GRPO_FILE + "not json\n{\"no\": \"step\"}\n" + SFT_FILE.splitlines()[0] + "\n")
    rows = metrics.read_jsonl(str(path))
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["metrics"]["train/loss"] == 6.0  # step 1 logged twice
    assert metrics.read_jsonl(str(tmp_path / "missing")) == []
    assert metrics.series(rows, "reward") == [(1, 0.0775), (2, 0.078)]
    assert metrics.series(rows, "critic/score/max") == [(1, 0.22)]
    path.write_bytes(b"\xff\xfe" + GRPO_FILE.encode())  # undecodable bytes: that line is no row, the rest is read
    assert [r["step"] for r in metrics.read_jsonl(str(path))] == [2]


def test_read_jsonl_never_follows_a_symlink_and_caps_what_it_reads(tmp_path):
    (tmp_path / "head-only.jsonl").write_text(GRPO_FILE)
    os.symlink(tmp_path / "head-only.jsonl", tmp_path / metrics.METRICS_FILE)
    assert metrics.read_jsonl(str(tmp_path / metrics.METRICS_FILE)) == []
    first = GRPO_FILE.splitlines(keepends=True)[0]
    assert [r["step"] for r in metrics.read_jsonl(str(tmp_path / "head-only.jsonl"), limit=len(first))] == [1]
