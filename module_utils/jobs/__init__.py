"""The ray_job module's work, split by concern (library/ray_job.py keeps its documentation and main()). Over base/,
verl/ and jobspec/ (tests/unit/module_utils/test_layers.py holds every package to its layer).

  options.py    the module's and its action plugin's options, one table
  status.py     the typed model of a record's status.json (JobStatus) and its states
  record.py     the record directory: layout, locks, atomic writes, reading and saving status.json
  client.py     Ray's job API and state API as this package needs them
  job.py        one job: its client, its record and how to redact what is written or shown
  submit.py     the submit pipeline: checks, preflight, record, submit
  preflight.py  the preflight: verl's config composed in the job's own Python (module_utils/verl/probe.py), on the
                head, else on a worker through a Ray task, and its checks run
  preflight_checks.py  what the preflight decides: overrides verl's config lacks (with where the setting lives
                now), verl's start-up checks, flash attention without flash_attn, GPU bundles no node can hold
  verdicts.py   the preflight's answers that passed, kept on the share per code, trainer, overrides and env
  step.py       one step of a job's life (finalise, deadlines, outage, progress, hang), taken by every follower
                and by the watcher, so a job followed and one nobody follows end alike
  retry.py      the one retry rule (whether a failed job's next attempt is due), asked by chain.py only
  chain.py      what comes after an attempt ends, one engine for the follower (action=next), do=resume and the
                watcher's pass: follow a newer attempt, or decide the retry, go around the blamed, submit the next
  around.py     a retry goes around the workers its failed attempt blames: cordoned and held first, bounded
  follow.py     wait, stop, status and logs: each a step (step.py) and what it returns
  driver_log.py the driver's log in the record, refreshed with only the bytes Ray's log gained since the last look
  progress.py   verl's own metrics.jsonl read as it grows: steps, loss, reward, pace, the readable progress line
  hang.py       a job's progress (its steps and their times) and when it is hung
  stacks.py     the Python stacks of a job's processes on every node (py-spy through Ray's dashboard)
  watch.py      one pass over every open record (watch.yml): what a follower would do, for every job
  evidence.py   the final record: logs, cluster snapshots, diagnosis (module_utils/verl/diagnosis.py)
  blame.py      which node a failed or hung attempt's evidence points at (status.json's blame), or none
  around.py     a retry goes around the workers its failed attempt blames: cordoned and held by Ray first, and
                submitted only when enough healthy workers remain
  worker_logs.py  the job's own Ray workers' logs copied into logs/workers/<node_ip>/ (bounded, redacted) when its
                stacks are taken and when it is finalised, so the blame outlives the cluster
  goodput.py    a chain of attempts' wall time: productive, and lost by cause (the first job's goodput)
  attempts.py   linked attempts, the next one's id and spec (built on the head), the checkpoint it starts from
  reconcile.py  records of jobs a restarted head forgot
  open_index.py the index of records that are not final (jobs/.open/), so no reader walks every record
  runner.py     dispatch of an action and the one-line message of a failure outside it
"""
