#!/usr/bin/python
"""Ansible module: submit, wait for, inspect and stop Ray jobs, keeping each job's record."""

DOCUMENTATION = r"""
---
module: ray_job
short_description: Submit and follow Ray jobs through the Job Submission SDK, with a durable record
description:
  - Submits a resolved JobSpec (module_utils/jobspec/model.py) with an explicit submission id and the driver
    pinned to a worker through entrypoint resources, and writes the job's record under its output_dir
    (config/, logs/, checkpoints/, debug/, status.json) on the shared root.
  - Idempotent. When the id already exists (in Ray or on disk) nothing is submitted or overwritten
    and the job's state is reported with changed=false.
  - O(action=wait) follows a job for up to O(poll_s) seconds per call, enforcing the spec's pending
    timeout and maximum run time (the job is stopped and recorded as FAILED), refreshing logs/driver.log,
    and finalising status.json and the debug snapshots when the job ends.
  - A verl job's own loggers write its record's metrics.jsonl (verl's file logger, one line per step) and
    tensorboard/ (its event files); the module never writes them. Each look reads only what metrics.jsonl
    gained (module_utils/jobs/evidence/progress.py) for the job's progress line (step N of M, loss, reward, pace, time
    left), and the record's C(metrics_note) says when that file is missing or cut short.
  - A record that is not final for a job Ray no longer knows, submitted before the head's node started, is a
    job the head forgot when it restarted; O(action=wait), O(action=status) and O(action=logs) finalise it as
    FAILED (reason HEAD_RESTARTED), keeping all it holds. O(action=reconcile) does that for every record on the
    shared root (up.yml runs it after healing). When the head cannot be read, nothing is finalised.
  - A job whose spec sets C(retries) and that failed for one of C(retries.on)'s reasons (its record's diagnosis)
    is resubmitted as a linked attempt C(<id>-r1), C(-r2), ... up to C(retries.max), resuming verl from the newest
    whole checkpoint over the job's and its attempts' checkpoint dirs (module_utils/verl/checkpoints.py); the first
    job's status.json lists its C(attempts), each attempt's names C(attempt_of) and C(resumed_from). What comes after
    an attempt ends is one engine on the head (jobs/life/chain.py), called once per decision by the follower
    (O(action=next)), by a person (O(action=resume), which ignores the retry rule) and by the watcher's pass
    (O(action=watch)). It follows a newer attempt when there is one, else the retry rule decides, the workers the
    failed attempt's blame names are cordoned (so the attempt runs on healthy ones; too few left is one line and the
    job stays FAILED), and the next attempt's spec is built on the head from the record and submitted.
  - O(action=wait) and O(action=watch) track a running job's progress (the record's C(progress)); a job whose verl
    step has not moved for its C(timeouts.stall_s) (a job without steps, whose log has not grown; by default ten
    times its median step, at least 900 s) is hung. The stacks of its processes go into C(debug/stacks/), the record's
    C(stall) says what they show, and the spec's C(timeouts.on_stall) (or C(retries.on) hung) decides whether the
    job is stopped (FAILED, reason HUNG, diagnosis hung) or only reported.
  - O(action=watch) is one pass over every record that is not final (C(watch.yml), run by a timer); it does for each
    what a wait would, so no job needs a follower, and submits, without following, the next attempt of each job its
    spec retries, in the same call. A record that cannot be read is reported, never changed.
  - O(action=stacks) takes the Python stacks of a running job's processes (its driver and its actors, through the
    dashboard's C(/worker/traceback), which runs C(py-spy dump) on each process's node) into its record, redacted,
    one file per process under C(debug/stacks/<UTC time>/), and says in one line what each waits in
    (jobs/evidence/stacks.py). The head's Ray must run with C(RAY_DASHBOARD_ENABLE_PROFILING=1) (the project's
    C(ray_node_env) sets it), else it fails in one line naming that fix. A process that gives no stack in time (a
    stopped one) is noted as such; a job that is not running fails in one line; in check mode nothing is taken and
    the result says which processes would be.
  - Runs on the head with a Python that has Ray; clears RAY_ADDRESS and proxy variables first.
  - This file keeps the documentation and main(); the work is in C(module_utils/jobs/), one file per concern. The
    record's status.json is read and written only as the typed model in C(jobs/record/status.py), whose JSON
    Schema is C(job_status.schema.json); a status.json that cannot be trusted is rebuilt from the record (state
    C(UNKNOWN), field C(rebuilt) says why) and kept beside it as C(status.json.untrusted-<ms>), never a traceback.
  - Its action plugin (action_plugins/ray_job.py) runs on the control host first. It takes the spec by name
    (O(spec)), layers the site's C(jobspec_defaults), O(overrides) and, with O(extra_vars=true), this run's
    C(-e) values, validates, and calls this module with the resolved JobSpec. With O(wait=true) (or
    O(action=wait)) it follows the job with repeated O(action=wait) calls of O(poll_s) seconds each, printing
    one progress line per call, until the job's record is final. It also fills O(ray_config), O(token_path)
    and the interpreter (C(ray_python)) from the inventory when the task does not set them.
options:
  action:
    description:
      - What to do. C(next) is the module's only, the follower's one call after an attempt ended FAILED. C(resume)
        and C(next) submit the next attempt after cordoning the workers the failed job's blame names (its spec's
        C(retries.cordon), on by default; see the ray_cordon module), and fail in one line when too few healthy
        workers remain for the job's resources (the job then stays FAILED with its blame).
    type: str
    choices: [submit, wait, status, stop, logs, stacks, reconcile, watch, resume, next]
    default: submit
  spec:
    description:
      - To the action, the name of a spec file (C(jobspecs/<spec>.yaml)); with O(extra_vars=true) it defaults to
        C(-e spec=NAME). The module itself receives the resolved JobSpec. Required for submit.
    type: raw
  overrides:
    description: (action) JobSpec field values layered over the spec file and the site defaults, e.g. a suite entry's.
    type: dict
    default: {}
  extra_vars:
    description: (action) Layer this run's C(-e) field values over the spec (and take O(spec) from C(-e spec=NAME)).
    type: bool
    default: false
  wait:
    description: (action) After submitting, follow the job until its record is final.
    type: bool
    default: false
  specs_dir:
    description: (action) Where spec files are; default the project's C(jobspecs/).
    type: path
  suite:
    description:
      - (action) Take the spec and overrides from the entry O(entry) of C(suites/<suite>.yaml), read here on the
        control host, so that an entry's secret env values never pass through Ansible's variables.
    type: str
  entry:
    description: (action) The suite entry's name (with O(suite)).
    type: str
  suites_dir:
    description: (action) Where suite files are; default the project's C(suites/).
    type: path
  python:
    description: (action) Python with Ray on the head that runs the module; default C(ray_python).
    type: str
  submission_id:
    description: The job, for every action but submit (where it overrides the spec's submission_id).
    type: str
  stop_reason:
    description: For O(action=stop), the reason its record gives; C(SLURM_ALLOCATION_ENDING) is the Slurm batch entry
      point's.
    type: str
    choices: [STOPPED_BY_USER, SLURM_ALLOCATION_ENDING]
    default: STOPPED_BY_USER
  output_dir:
    description: The job's record directory; default C(<shared_root>/jobs/<submission_id>).
    type: path
  last_seen_ms:
    description:
      - For O(action=wait) after its head could not be reached, when the follower last saw the job (ms since
        the epoch). A job that lived through the outage gets it in its record's C(outages), from this moment to
        the start of the head that came back. The action plugin sets it.
    type: int
  secret_env:
    description:
      - For O(action=next), O(action=resume) and O(action=watch), the secret env values a next attempt needs that its
        record keeps redacted, passed down by the action plugin (never written or shown) - C(cli), this run's
        C(-e env.NAME) values; C(site), the site's C(jobspec_defaults) env by layer (C(all), C(trainers), a workload).
    type: dict
  submitter:
    description:
      - Who submits (O(action=submit)), the control host's login or C(-e submitter=NAME) of a login the site's
        C(ray_queue_act_for_others) lists. The action plugin sets it. Recorded in the record's C(queue) part; the
        queue's quotas and fair share count by it. A retry's attempt keeps its first job's.
    type: str
  queue_quotas:
    description:
      - The site's C(ray_queue_quotas) (C(default) and C(users) limits of jobs and GPUs at once; docs/queue.md),
        passed down by the action plugin; null is no limit.
    type: dict
  queue_preempting:
    description:
      - The site's C(ray_queue_preempting), the classes whose waiting jobs may preempt; null is C([high]).
    type: list
    elements: str
  poll_s:
    description:
      - Longest time one O(action=wait) module call follows the job before it returns its progress line;
        the action prints one line per call.
    type: int
    default: 20
  preflight:
    description:
      - Before submitting a verl workload, compose its hydra config with the job's code (C(--cfg job)) on
        this host, so a misspelled override fails with verl's message before the cluster allocates anything.
    type: bool
    default: true
extends_documentation_fragment:
  - ray_connection
  - ray_connection.ray_config
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: In check mode submit only renders the entrypoint, runtime_env and submit command.
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Submit | Submit the spec named by -e spec=NAME and follow it
  ray_job:
    extra_vars: true
    wait: true
  register: submitted

- name: Regression | Run a suite entry
  ray_job:
    suite: lab
    entry: sft
    submission_id: nightly-1-sft
    wait: true

- name: Job | Stop a job
  ray_job:
    action: stop
    submission_id: sft-20261122T120000Z-a1b2c3

- name: Job | Take the Python stacks of a running job's processes
  ray_job:
    action: stacks
    submission_id: sft-20261122T120000Z-a1b2c3

- name: Records | Finalise the records of jobs a restarted head forgot
  ray_job:
    action: reconcile
"""

RETURN = r"""
submission_id:
  description: The job's id.
  returned: for every action but reconcile and watch
  type: str
state:
  description: QUEUED (in the cluster's queue, not yet submitted to Ray), PENDING, RUNNING, SUCCEEDED, FAILED or
    STOPPED (a job stopped for a timeout is FAILED).
  returned: for every action but reconcile and watch
  type: str
done:
  description: The job has ended and its record is final.
  returned: for every action but reconcile and watch
  type: bool
queue:
  description: (submit) The record's queue part (submitter, priority, preemptible, since, position, reason, words).
  returned: when action=submit wrote a record
  type: dict
queue_lines:
  description: (submit, wait, watch) What the queue's admission did besides (others admitted, QUEUE_TIMEOUT ends).
  returned: when the queue was asked
  type: list
  elements: str
existed:
  description: (submit) The id existed already; nothing was submitted.
  returned: when action=submit
  type: bool
record:
  description: The job's record directory.
  returned: for every action but reconcile and watch
  type: str
progress:
  description: One line saying where the job is (state, time in that state, newest verl step line; secrets redacted).
  returned: always
  type: str
entrypoint:
  description: The entrypoint (secrets redacted).
  returned: when action=submit
  type: str
runtime_env:
  description: The runtime_env (secrets redacted).
  returned: when action=submit
  type: dict
entrypoint_options:
  description: The driver's resource options (entrypoint_num_cpus, entrypoint_resources, ...) that are not zero.
  returned: when action=submit
  type: dict
submit_cmd:
  description: The equivalent C(ray job submit) command (secrets redacted).
  returned: when action=submit
  type: str
status:
  description: The job's status.json (every field, as job_status.schema.json describes it).
  returned: for every action but reconcile and watch
  type: dict
log_tail:
  description: The end of the driver log (action=logs).
  returned: when action=logs
  type: str
stacks:
  description: (stacks) The stacks taken; in check mode, the processes whose stacks would be (nothing is written).
  returned: when action=stacks
  type: dict
  contains:
    dir:
      description: This dump's folder relative to the record, C(debug/stacks/<UTC time>); null when nothing was taken.
      type: str
    files:
      description: One file per process relative to the record, C(debug/stacks/<UTC time>/<node_ip>-<pid>-<name>.txt).
      type: list
      elements: str
    summary:
      description:
        - One line for every process, e.g. C(driver waits in ray.get; TrainingWorker pid 123 on 198.18.0.11 waits in
          all_reduce (gloo)); a process without a stack says why (it timed out, as a stopped one does).
      type: str
    lines:
      description: One line per process, what it waits in.
      type: list
      elements: str
    processes:
      description: The processes asked, each with C(role) (driver or actor), C(name), C(pid), C(node_ip), C(node_id),
        C(state).
      type: list
      elements: dict
finalized:
  description:
    - (reconcile) Ids whose records were finalised as FAILED (HEAD_RESTARTED); in check mode, would be.
    - (watch) Ids whose records this pass finalised (RV(ended) says how each ended).
  returned: when action=reconcile or action=watch
  type: list
  elements: str
open:
  description: (reconcile, watch) Ids of the records that are not final and that Ray still knows.
  returned: when action=reconcile or action=watch
  type: list
  elements: str
ended:
  description: (watch) For each id finalised, its state, reason and diagnosis kind.
  returned: when action=watch
  type: dict
hung:
  description: (watch) The open jobs found hung, each with C(submission_id), C(summary) (what the stacks show),
    C(since).
  returned: when action=watch
  type: list
  elements: dict
retry:
  description: (watch) Ids of the jobs whose retry the retry rule found due in this pass (submitted or not).
  returned: when action=watch
  type: list
  elements: str
attempts:
  description: (watch) The attempts it submitted.
  returned: when action=watch and attempts were submitted
  type: list
  elements: str
not_retried:
  description: (watch) Ids whose retry was due and not submitted (refused, or left for a later pass); RV(lines) says
    why.
  returned: when action=watch and a retry was not submitted
  type: list
  elements: str
outcomes:
  description: (watch) For each job whose next attempt was decided, what was (one of RV(outcome)'s values).
  returned: when action=watch
  type: dict
outcome:
  description:
    - (next, resume) What came after the attempt - C(follow) a newer attempt exists, C(submitted) the next one was
      (in check mode, would be), C(not_due) the retry rule does not retry it, C(refused) its retry is a person's call,
      C(pending) it could not be submitted now.
  returned: when action=next or action=resume
  type: str
follow:
  description: (next, resume) The attempt to follow next; null when none.
  returned: when action=next or action=resume
  type: str
lines:
  description: (next, resume, watch) What the action prints of the decisions made (secrets redacted).
  returned: when action=next, action=resume or action=watch
  type: list
  elements: str
unreadable:
  description: (watch) Records whose status.json could not be trusted, each with why; nothing was changed.
  returned: when action=watch
  type: list
  elements: str
errors:
  description: (watch) One line for each record the pass could not bring up to date.
  returned: when action=watch
  type: list
  elements: str
"""

from ansible.module_utils.base.ray_connection import argument_spec
from ansible.module_utils.base.redaction import is_secret_name, secret_names
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.jobs import options, runner


def main():
    module = AnsibleModule(argument_spec=argument_spec(ray_config=True, **options.argument_spec("module")),
                           required_if=[*options.required_if(), ("action", "submit", ("spec",))],
                           supports_check_mode=True)
    p = module.params
    if p["spec"] is not None and not isinstance(p["spec"], dict):
        module.fail_json(msg="spec: the module takes a resolved JobSpec (a dict); run it through its action plugin")
    # Secret env values must not come back in the module's own `invocation` output either.
    names = secret_names((p["ray_config"] or {}).get("secret_env_names"))
    for env in ((p["spec"] or {}).get("env") or {},
                ((p["ray_config"] or {}).get("runtime_env") or {}).get("env_vars") or {}):
        module.no_log_values.update(str(v) for k, v in env.items() if is_secret_name(k, names) and v)
    runner.main(module)


if __name__ == "__main__":
    main()
