"""Small line charts as SVG, for a regression suite's trend across its runs (trend.svg).

A job's own curves are TensorBoard's (verl's tensorboard logger writes every run's event files into its record, and
roles/ray_tensorboard serves them). The trend is a few values per regression run, one point per run, read on the control
host, where no plotting library is installed: a few plain shapes are enough, and every text is escaped.

Imported as ansible.module_utils.regression.svg_charts: standard library only.
"""

import math
from xml.sax.saxutils import escape

PANEL_W, PANEL_H, PAD_L, PAD_R, PAD_T, PAD_B = 320, 170, 56, 12, 26, 28
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _fmt(value):
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.2e}"
    return f"{value:.3g}"


def _panel(x0, y0, title, points, colour, x_label):
    """One chart: a framed plot area, min/max labels on both axes, the line and its points."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    if y_hi == y_lo:
        pad = abs(y_lo) * 0.1 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    left, top = x0 + PAD_L, y0 + PAD_T
    width, height = PANEL_W - PAD_L - PAD_R, PANEL_H - PAD_T - PAD_B

    def at(x, y):
        return (left + (x - x_lo) / (x_hi - x_lo) * width, top + (y_hi - y) / (y_hi - y_lo) * height)

    coords = [at(x, y) for x, y in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    parts = [
        f'<text x="{left}" y="{y0 + 16}" font-size="12" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>',
        f'<text x="{left - 4}" y="{top + 9}" font-size="10" text-anchor="end">{_fmt(y_hi)}</text>',
        f'<text x="{left - 4}" y="{top + height}" font-size="10" text-anchor="end">{_fmt(y_lo)}</text>',
        f'<text x="{left}" y="{top + height + 13}" font-size="10">{_fmt(x_lo)}</text>',
        f'<text x="{left + width}" y="{top + height + 13}" font-size="10" text-anchor="end">{_fmt(x_hi)}</text>',
        (f'<text x="{left + width / 2}" y="{top + height + 13}" font-size="10" text-anchor="middle">'
         f'{escape(x_label)}</text>'),
    ]
    if len(coords) > 1:
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
    parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in coords]
    return parts


def svg_charts(title, charts, x_label="step", columns=2):
    """An SVG of small line charts, `charts` = [(name, [(x, y), ...])]; charts without points are left out."""
    charts = [(name, points) for name, points in charts if points]
    rows = max(1, math.ceil(len(charts) / columns))
    width, height = PANEL_W * columns, PANEL_H * rows + 30
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
              f'viewBox="0 0 {width} {height}" font-family="sans-serif">'),
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="8" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    if not charts:
        parts.append('<text x="8" y="50" font-size="12">no values yet</text>')
    for i, (name, points) in enumerate(charts):
        x0, y0 = (i % columns) * PANEL_W, 30 + (i // columns) * PANEL_H
        parts += _panel(x0, y0, name, points, COLOURS[i % len(COLOURS)], x_label)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
