"""The one retry rule: whether a job's next attempt is due. The follower (action plugin, after a wait), the watcher's
pass and the regression runner all ask it, so a job followed and one nobody follows are retried alike."""

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.record.status import FAILED
from ansible.module_utils.jobspec.fields import TRAINERS


def due(status, attempts_made=None):
    """(due, why): whether the next attempt of this final record should be submitted, and a short reason.

    A FAILED job whose diagnosis kind its spec's retries name is retried, while attempts remain (attempts_made: the
    attempts linked to its first job; None when the caller counts them later). A job stopped for its own time limits,
    by a person or by Slurm is not (each attempt would get a fresh max_run_s); one stopped as hung is: a hang is a
    failure of the run, not a limit of it."""
    policy, kind = status.retries, status.diagnosis.kind
    if status.state != FAILED or not status.final:
        return False, f"it is {status.state}"
    if kind not in (policy.on or ()):
        return False, f"its spec does not retry {kind or 'an unknown failure'}"
    if status.workload not in TRAINERS:
        # The next attempt resumes this one (its spec's resume_from), which only verl's trainers can: the spec would
        # be refused at every try, a retry pending for good.
        what = f"a {status.workload} job" if status.workload else "a job whose workload is not recorded"
        return False, f"{what} does not resume from a checkpoint (only {', '.join(TRAINERS)} do)"
    if status.reason in conventions.OWN_STOP_REASONS and status.reason != conventions.HUNG_REASON:
        return False, f"it was stopped ({status.reason})"
    if attempts_made is not None and attempts_made >= (policy.max or 0):
        return False, f"its {policy.max or 0} retries are spent"
    return True, f"attempt {(attempts_made or 0) + 1} of {policy.max}"
