"""The chain's life: what a job's follower and the watcher do. Over jobs/record/, jobs/evidence/, jobs/submission/.

  step.py       one step of a job's life (finalise, deadlines, outage, progress, hang), taken by every follower
                and by the watcher, so a job followed and one nobody follows end alike
  chain.py      what comes after an attempt ends, one engine for the follower (action=next), do=resume and the
                watcher's pass: follow a newer attempt, or decide the retry, go around the blamed, submit the next
  around.py     a retry goes around the workers its failed attempt blames: cordoned and held by Ray first, and
                submitted only when enough healthy workers remain
  follow.py     wait, stop, status and logs: each a step (step.py) and what it returns
  watch.py      one pass over every open record (watch.yml): what a follower would do, for every job
  reconcile.py  records of jobs a restarted head forgot
"""
