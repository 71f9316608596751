"""The chain of a job's attempts after one ended: the one engine that decides what comes next, on the head.

The follower (submit.yml -e wait=true, job.yml -e do=wait: action=next), a person's do=resume (action=resume) and the
watcher's pass (watch.py, for each record it finds FAILED or whose retry is pending) all call next_step, once per
decision: a newer attempt exists → follow it; else the retry rule (retry.py, asked here only) decides; a retry goes
around the blamed workers (around.py: a refusal is one line and the job stays FAILED); the next attempt's spec is
built here (attempts.spec_of_next) and submitted (submit.py, preflight off). What only the control host has (the
secret env values the record keeps redacted, or the spec the follower resolved) comes down once, in the module's
arguments (`secret_env`, no_log; `spec`, whose secret values the module hides as for a submit): nothing of it is
written (the attempt's record is redacted as any submit's) or shown.
"""

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.life import around
from ansible.module_utils.jobs.life.follow import refresh
from ansible.module_utils.jobs.record import retry
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.record.record import now_ms, status_of
from ansible.module_utils.jobs.record.status import SUCCEEDED, ResumedFrom
from ansible.module_utils.jobs.submission import attempts, submit
from ansible.module_utils.jobspec import model as js

# What next_step decided (its result's `outcome`): a newer attempt exists, follow it; the next attempt was submitted
# (in check mode: would be); the retry rule does not retry the job; the retry was due and refused (around.py's bounds,
# too few healthy workers, pending too long): a person decides; the retry was due and could not be submitted now (a
# secret not given, a submission that failed): a later run or pass tries again.
FOLLOW, SUBMITTED, NOT_DUE, REFUSED, PENDING = "follow", "submitted", "not_due", "refused", "pending"


def next_action(module, job):
    """action=next: the follower's one call after an attempt ended."""
    return next_step(module, job, module.params["spec"], module.params["secret_env"])


def resume_action(module, job):
    """action=resume: a person's do=resume: the next attempt whatever the retry rule says (a job a person stopped)."""
    return next_step(module, job, module.params["spec"], module.params["secret_env"], by_hand=True)


def next_step(module, job, known=None, secret_env=None, by_hand=False, stale_after_s=None):
    """What comes after job's attempt ended; returns the module result (the job's record, plus `outcome`, `follow`:
    the attempt to follow next or None, `lines`: what to print) or raises Failed (one line, with `outcome`).

    known: the chain's spec as the follower resolved it, or None; secret_env: the secret env values the control host
    passed down; by_hand: a person resumes it (no retry rule); stale_after_s: a due retry whose attempt ended longer
    ago than this is left to a person (the watcher's pending retries)."""
    status = job.status()
    if by_hand and not status.final:
        status = refresh(module, job)[0]  # a job Ray ended meanwhile is finalised first
    root, linked = attempts.chain(job.config, job.sid)
    decide = not module.check_mode
    if linked[-1] != job.sid:
        newest = linked[-1]
        if not by_hand:
            if decide:
                job.record.retry_decided()  # its next attempt exists: nothing pending
            return decided(job, status, FOLLOW, f"{job.sid}: {status.state}; following its newest attempt, {newest}",
                           follow=newest)
        theirs = status_of(job.config.shared_root, newest)
        if theirs is None or not theirs.final or theirs.state == SUCCEEDED:
            raise Failed(f"{job.sid}: its attempt {newest} is {theirs.state if theirs else None}: follow that one "
                         f"(job.yml -e id={newest} -e do=wait)", **job.result(status, ""), outcome=NOT_DUE)
    elif by_hand and (not status.final or status.state == SUCCEEDED):
        why = ("its " + status.rebuilt if status.rebuilt and not status.final else "it succeeded"
               if status.state == SUCCEEDED else "it has not ended (stop it first)")
        raise Failed(f"{job.sid}: {status.state}: nothing to resume, {why}", **job.result(status, ""), outcome=NOT_DUE)
    lines = []
    if not by_hand:
        due, why = retry.due(status, len(linked) - 1)
        if not due:
            if decide:
                job.record.retry_decided()
            return decided(job, status, NOT_DUE, f"{job.sid}: {status.state}, not retried: {why}")
        ended = status.updated_at or status.end_time or now_ms()
        if stale_after_s is not None and now_ms() - ended > stale_after_s * 1000:
            if decide:
                job.record.retry_decided()
            raise Failed(f"{job.sid}: its retry was due but not submitted for {stale_after_s // 3600} h: left to a "
                         f"person (job.yml -e id={job.sid} -e do=resume)", **job.result(status, ""), outcome=REFUSED)
        lines.append(f"{job.sid}: failed ({status.diagnosis.kind}): {why}, resuming from the newest whole checkpoint")
    return submit_next(module, job, status, root, linked, known, secret_env, lines)


def submit_next(module, job, status, root, linked, known, secret_env, lines):
    """Build the next attempt's spec, go around the blamed workers, submit it (the retry is due, or asked by hand)."""
    attempt_id = attempts.next_id(job, root, linked)
    try:
        spec = attempts.spec_of_next(job, attempt_id, root, known, secret_env, module.params["ray_config"])
    except js.JobSpecError as exc:
        raise Failed(str(exc), **job.result(status, ""), outcome=PENDING, lines=lines) from None
    try:
        went = around.go_around(module, job, status)
    except Failed as exc:
        if not module.check_mode:
            job.record.retry_decided()  # a person decides (cordon.yml, then do=resume): no pass takes it up again
        raise Failed(str(exc), **{**exc.result, "outcome": REFUSED, "lines": lines}) from None
    if went.get("progress"):
        lines.append(went["progress"])
    try:
        # the attempt is its first job's submitter's, in the queue as any submission
        submitted = submit.submit_spec(module, job.config, spec.to_dict(), False, status.queue.submitter)
    except Failed as exc:
        raise Failed(str(exc), **job.result(status, ""), outcome=PENDING, lines=lines) from None
    changed = bool(job.changed or went.get("changed") or submitted.get("changed"))
    if module.check_mode:  # what would be submitted: the submission's rendering, nothing to follow
        shown = {k: submitted[k] for k in ("entrypoint", "runtime_env", "entrypoint_options", "submit_cmd")
                 if k in submitted}
        return dict(decided(job, status, SUBMITTED, [*lines, submitted.get("progress", "")]), changed=changed,
                    **shown)
    if submitted.get("existed"):
        if attempts.chain(job.config, job.sid)[1][-1] != attempt_id:
            raise Failed(f"{attempt_id} exists already: its record was not linked to {root}; look at it with "
                         f"job.yml -e id={attempt_id}", **job.result(status, ""), outcome=PENDING, lines=lines)
        lines.append(f"{attempt_id}: submitted by another run; following it")  # the watcher, meanwhile
        return dict(decided(job, status, FOLLOW, lines, follow=attempt_id), changed=changed)
    resumed = ResumedFrom.of(submitted.get("resumed_from"))  # submit's own result: a mapping or absent
    where = (f"{resumed.path} (step {resumed.step})" if resumed.path
             else "step 0 (save_freq -1: checkpoints are off)" if js.checkpoints_off(spec)
             else "the start (it saved no checkpoint)")
    verb = "queued" if submitted.get("state") == "QUEUED" else "submitted"
    lines.append(f"{attempt_id}: {verb}, resuming {job.sid} from {where}")
    return dict(decided(job, status, SUBMITTED, lines, follow=attempt_id), changed=changed,
                resumed_from=submitted.get("resumed_from"), output_dir=spec.output_dir)


def decided(job, status, outcome, said, follow=None):
    """The result of a decision: the job's record, what was decided, the attempt to follow, the lines to print."""
    lines = [job.redact(conventions.one_line(line, 400)) for line in ([said] if isinstance(said, str) else said)]
    return dict(job.result(status, lines[-1] if lines else ""), outcome=outcome, follow=follow, lines=lines)
