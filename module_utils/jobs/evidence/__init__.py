"""What a job leaves behind and what is read from it. Over jobs/record/.

  driver_log.py the driver's log in the record, refreshed with only the bytes Ray's log gained since the last look
  progress.py   verl's own metrics.jsonl read as it grows: steps, loss, reward, pace, the readable progress line
  hang.py       a job's progress (its steps and their times) and when it is hung
  stacks.py     the Python stacks of a job's processes on every node (py-spy through Ray's dashboard)
  worker_logs.py  the job's own Ray workers' logs copied into logs/workers/<node_ip>/ (bounded, redacted) when its
                stacks are taken and when it is finalised, so the blame outlives the cluster
  blame.py      which node a failed or hung attempt's evidence points at (status.json's blame), or none
  goodput.py    a chain of attempts' wall time: productive, and lost by cause (the first job's goodput)
  evidence.py   the final record: logs, cluster snapshots, diagnosis (module_utils/verl/diagnosis.py)
"""
