"""What the project knows of verl itself (over base/): its metrics lines, its checkpoints' layout, how its failures
read, and the probe run in a job's own Python.

  metrics.py      verl's per-step metrics, read from its file logger (and, for a job that is not verl, its console)
  checkpoints.py  which checkpoint a job may resume from: the newest whole one
  diagnosis.py    why a job failed: known signatures in its logs, matched in order, each with a hint
  probe.py        the preflight's probe: verl's config composed in the job's own Python before it is submitted
"""
