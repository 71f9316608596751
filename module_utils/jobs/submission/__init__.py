"""The submit pipeline. Over jobs/record/ and jobs/evidence/.

  submit.py     checks, preflight, record, submit: at once when the queue admits the job, else QUEUED; admit(), the
                queue's admission under its lock (a submit, a follower's wait, the watcher's pass)
  admission.py  what the queue's decision (module_utils/queue/) is asked with, read from the share and Ray (the
                queued records, the running jobs, the workers' free resources, the use), and what it answers written
                back (a place and reason, a preemption asked, a queue_s ended); the queue's lock
  preflight.py  the preflight: verl's config composed in the job's own Python (module_utils/verl/probe.py), on the
                head, else on a worker through a Ray task, and what it decides: overrides verl's config lacks (with
                where the setting lives now), verl's start-up checks, flash attention without flash_attn, GPU
                bundles no node can hold
  verdicts.py   the preflight's answers that passed, kept on the share per code, trainer, overrides and env
  attempts.py   linked attempts, the next one's id and spec (built on the head), the checkpoint it starts from
"""
