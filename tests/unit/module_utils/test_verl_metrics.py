"""module_utils/verl_metrics.py: verl console lines -> metrics rows, metrics.jsonl, the SVG plot."""

import json
import xml.etree.ElementTree as ET

from ansible.module_utils import verl_metrics as vm

# Shapes verl 0.9.1 prints (aggregate_logger.concat_dict_to_str: pprint of each number), trimmed.
GRPO_LOG = """\
(TaskRunnerV1 pid=1) INFO: Total training steps: 2
(TaskRunnerV1 pid=1) step:1 - global_seqlen/mean:412.0 - actor/pg_loss:-0.0587 - actor/kl_loss:0.0 - actor/entropy:5.98 \
- actor/grad_norm:0.375 - critic/score/mean:0.0775 - critic/score/max:0.22 - response_length/mean:31.5 \
- timing_s/step:21.1 - perf/throughput:93.2 - training/global_step:1 - actor/lr:0.001
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
    step, values = vm.parse_line("(pid=3) step:7 - a/b:1.5 - c:np.float32(2.0) - d:abc - e:True - f:-1e-3")
    assert step == 7 and values == {"a/b": 1.5, "c": 2.0, "f": -0.001}
    assert vm.parse_line("no step here - a:1") is None
    assert vm.parse_line("training/global_step:3 - a:1") is None  # a key, not the line's step
    assert vm.parse_line("step:3") is None


def test_parse_log_gives_one_row_per_step_with_summary_names():
    rows = vm.parse_log(GRPO_LOG)
    assert [r["step"] for r in rows] == [1, 2]
    first, second = rows
    assert first["loss"] == -0.0587 and first["reward"] == 0.0775 and first["kl"] == 0.0
    assert first["entropy"] == 5.98 and first["grad_norm"] == 0.375 and first["response_length"] == 31.5
    assert first["step_time_s"] == 21.1 and first["throughput"] == 93.2
    assert first["metrics"]["critic/score/max"] == 0.22
    assert second["loss"] == -0.00072
    # nan and inf are not values: the summary leaves them out rather than writing invalid JSON.
    assert "grad_norm" not in second and "throughput" not in second
    json.loads(vm.jsonl(rows).splitlines()[1])


def test_sft_validation_line_merges_into_its_step():
    rows = vm.parse_log(SFT_LOG)
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 6.0), (2, 5.75)]
    assert rows[1]["val_loss"] == 5.625 and rows[1]["metrics"]["train/grad_norm"] == 2.9


def test_jsonl_round_trip(tmp_path):
    rows = vm.parse_log(GRPO_LOG)
    path = tmp_path / vm.METRICS_FILE
    path.write_text(vm.jsonl(rows) + "not json\n{\"no\": \"step\"}\n")
    assert vm.read_jsonl(str(path)) == rows
    assert vm.read_jsonl(str(tmp_path / "missing")) == []
    assert vm.series(rows, "reward") == [(1, 0.0775), (2, 0.078)]
    assert vm.series(rows, "critic/score/max") == [(1, 0.22)]


def test_plot_is_valid_svg_with_a_panel_per_present_series():
    svg = vm.plot_svg(vm.parse_log(GRPO_LOG), "grpo <job>")
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts[0] == "grpo <job>"
    for name in ("loss", "reward", "kl", "entropy", "response_length", "step_time_s"):
        assert name in texts
    assert "critic_loss" not in texts
    assert len(list(root.iter("{http://www.w3.org/2000/svg}polyline"))) == 5  # entropy and grad_norm have one point each


def test_plot_without_rows_says_so():
    root = ET.fromstring(vm.plot_svg([], "empty"))
    assert "no values yet" in [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_flat_series_still_draws_inside_its_frame():
    svg = vm.svg_charts("t", [("flat", [(1, 2.0), (2, 2.0)])])
    points = ET.fromstring(svg).find("{http://www.w3.org/2000/svg}polyline").get("points").split()
    ys = {float(p.split(",")[1]) for p in points}
    assert len(ys) == 1 and 30 < ys.pop() < 30 + vm.PANEL_H
