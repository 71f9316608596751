"""module_utils/regression/svg_charts.py: small line charts as SVG (a regression suite's trend.svg), every text
escaped."""

import xml.etree.ElementTree as ET

from ansible.module_utils.regression import svg_charts

SVG = "{http://www.w3.org/2000/svg}"
# A job's values, as the trend charts them (x: a run or a step, y: its value).
CHARTS = [("loss", [(1, -0.0587), (2, -0.00072)]), ("reward", [(1, 0.0775), (2, 0.078)]),
          ("kl", [(1, 0.0), (2, 0.003)]), ("entropy", [(1, 5.98)]), ("grad_norm", [(1, 0.375)]), ("critic_loss", []),
          ("response_length", [(1, 31.5), (2, 32.0)]), ("step_time_s", [(1, 21.1), (2, 3.1)])]


def texts(root):
    return [t.text for t in root.iter(f"{SVG}text")]


def test_a_chart_per_named_series_with_points():
    root = ET.fromstring(svg_charts.svg_charts("grpo <job> & co", CHARTS))
    found = texts(root)
    assert found[0] == "grpo <job> & co"  # escaped in the file, itself once parsed
    for name in ("loss", "reward", "kl", "entropy", "grad_norm", "response_length", "step_time_s"):
        assert name in found
    assert "critic_loss" not in found  # no points: left out
    # A line for each chart of two points or more; a point for every value.
    assert len(list(root.iter(f"{SVG}polyline"))) == 5
    assert len(list(root.iter(f"{SVG}circle"))) == 12


def test_the_layout_grows_a_row_a_pair_of_charts():
    root = ET.fromstring(svg_charts.svg_charts("t", CHARTS))  # seven charts with points, two a row: four rows
    assert (int(root.get("width")), int(root.get("height"))) == (2 * svg_charts.PANEL_W, 4 * svg_charts.PANEL_H + 30)
    one = ET.fromstring(svg_charts.svg_charts("t", CHARTS[:1], columns=1))
    assert (int(one.get("width")), int(one.get("height"))) == (svg_charts.PANEL_W, svg_charts.PANEL_H + 30)


def test_no_charts_say_so():
    for charts in ([], [("empty", [])]):
        root = ET.fromstring(svg_charts.svg_charts("empty", charts))
        assert "no values yet" in texts(root) and root.find(f"{SVG}polyline") is None


def test_flat_series_still_draws_inside_its_frame():
    svg = svg_charts.svg_charts("t", [("flat", [(1, 2.0), (2, 2.0)])])
    points = ET.fromstring(svg).find(f"{SVG}polyline").get("points").split()
    ys = {float(p.split(",")[1]) for p in points}
    assert len(ys) == 1 and 30 < ys.pop() < 30 + svg_charts.PANEL_H


def test_one_point_draws_no_line_and_stays_inside_its_frame():
    root = ET.fromstring(svg_charts.svg_charts("t", [("one", [(3, 0.0)])]))
    assert root.find(f"{SVG}polyline") is None
    circle = root.find(f"{SVG}circle")
    assert 0 < float(circle.get("cx")) < svg_charts.PANEL_W and 30 < float(circle.get("cy")) < 30 + svg_charts.PANEL_H


def test_names_and_the_axis_label_are_text_never_markup():
    evil = '</text><script>alert(1)</script><text x="1">'
    svg = svg_charts.svg_charts(evil, [(evil, [(1, 1.0), (2, 2.0)])], x_label=evil)
    root = ET.fromstring(svg)
    assert "<script" not in svg and root.find(f".//{SVG}script") is None
    assert texts(root).count(evil) == 3


def test_axis_labels_are_short_numbers():
    root = ET.fromstring(svg_charts.svg_charts("t", [("big", [(1, 12345.0), (2, 0.001)])], x_label="run"))
    found = texts(root)
    assert "1.23e+04" in found and "1.00e-03" in found and "run" in found
    assert svg_charts._fmt(0) == "0" and svg_charts._fmt(0.5) == "0.5" and svg_charts._fmt(-2.25) == "-2.25"
