"""Regression suites: gates, reports and their charts (over base/, verl/ and jobs/). A site's acceptance is
module_utils/acceptance/.

  gates.py               conditions on a job's per-step metrics that a suite entry must meet to pass
  chain.py               a suite entry's chain of attempts as its report shows it: goodput and blamed nodes
  report.py              one regression run's report: report.json, junit.xml, summary.md
  svg_charts.py          small SVG line charts, for a suite's trend across its runs
"""
