"""The queue's decision core: plain data in, plain data out, over base/ only (no Ray, no records, no files): the
caller reads the queue's entries, Ray's free resources and the records, and acts on what admit.py decides.
See docs/queue.md.

  model.py   the models, each checked strictly with one-line errors naming the bad field: a queue entry (submitter,
             priority class, what its placement asks, max_run_s), a worker's free resources, a running job, quotas;
             the classes, verdicts and reasons as named constants
  fit.py     gang fit: the whole placement on distinct workers (deterministic best fit), and its words
  share.py   fair share: each submitter's GPU-seconds over a recent window, and the queue's order
  admit.py   one admission decision: ADMIT, WAIT with one reason, or PREEMPT victims, for every entry in order, with
             quotas and EASY backfill
"""
