"""Action for ray_job: the job path's control-host half.

It resolves a JobSpec once, here (spec file < site defaults < overrides < -e, validated), runs the
ray_job module on the head to submit it, and follows the job with short module calls, printing one
progress line per poll for as long as the job's own timeouts allow (the module enforces pending_s
and max_run_s): there is no cap of its own, so a three-day run is followed for three days.
What comes after an attempt ends (follow a newer attempt, or retry, cordon around the blamed and submit the next
one) is the module's: one `next` call per decision (module_utils/jobs/life/chain.py), and the watcher's retries happen
inside its `watch` call. This side only passes down what the head lacks (the secret env values of -e and the
site's jobspec_defaults, no_log) and prints.
The module's documentation is in library/ray_job.py.
"""

import getpass
import json
import os
import sys
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import load_extra_vars

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT, jobspec_input, ray_action

from ansible.module_utils.base import conventions  # isort: skip
from ansible.module_utils.base import redaction  # isort: skip
from ansible.module_utils.jobs import options  # isort: skip
from ansible.module_utils.jobs.record import client as jc  # isort: skip
from ansible.module_utils.jobs.record.status import FAILED  # isort: skip
from ansible.module_utils.jobspec.fields import ENV_NAME_RULE  # isort: skip

display = Display()

# The inventory's queue settings, passed down to the module (docs/queue.md): who may act for others here, the quotas
# and the classes that preempt (the module checks the last two, naming the field).
ACT_FOR_OTHERS = "ray_queue_act_for_others"
QUEUE_SETTINGS = {"queue_quotas": "ray_queue_quotas", "queue_preempting": "ray_queue_preempting"}
# A poll that cannot reach the head is retried this many times in a row before the run fails.
CONNECTION_RETRIES = 3
ARGUMENT_SPEC = {**options.argument_spec("action"), "ray_config": {"type": "dict"},
                 "token_path": {"type": "path", "no_log": False}}


def poll_until_final(poll, show):
    """Poll a job until its record is final, showing each poll's progress line.

    poll() runs one short module `wait` call and returns its result; show(line) prints a line.
    Returns (last result, number of polls). Only the job ending (or a failed poll) ends the loop.
    """
    polls = 0
    changed = False
    while True:
        result = poll()
        polls += 1
        changed = changed or bool(result.get("changed"))
        if result.get("failed"):
            return dict(result, changed=changed), polls
        show(result.get("progress") or "")
        if result.get("done"):
            return dict(result, changed=changed), polls


class HeadOutage:
    """A follower's view of a head it cannot reach. With a GCS store (ray_config head_outage_s > 0) the head comes
    back and its jobs go on: the follower says so on its progress line and keeps polling for up to that long,
    never finalising the record meanwhile; without one a failed poll fails the run, as before."""

    def __init__(self, window_s, clock=None):
        self.window_s, self.clock = window_s, clock or (lambda: time.time())
        self.since = None  # when the first poll failed to reach the head
        self.last_seen_ms = None  # the last poll that saw the job before that

    def seen(self):
        """A poll saw the job: the module's last_seen_ms argument for this poll (once, after an outage)."""
        noted, self.since = (self.last_seen_ms if self.since is not None else None), None
        self.last_seen_ms = int(self.clock() * 1000)
        return noted

    def unreachable(self, result):
        """The progress line to show while waiting for the head, or None: the failure stands."""
        if not self.window_s or not jc.head_down(result.get("msg")):
            return None
        now = self.clock()
        self.since = self.since if self.since is not None else now
        if now - self.since > self.window_s:
            return None
        return (f"the head cannot be reached for {now - self.since:.0f}s; the cluster has a GCS store, so it may "
                f"come back: waiting up to {self.window_s}s")


def submitter(login, asked, act_for_others):
    """Who submits: the control host's login, or -e submitter=NAME when the site lets that login act for others
    (ray_queue_act_for_others); ValueError, one line naming the field, otherwise."""
    if not isinstance(act_for_others, list) or not all(
            isinstance(n, str) and conventions.matches(conventions.NAME_RULE, n) for n in act_for_others):
        raise ValueError(f"{ACT_FOR_OTHERS}: must be a list of logins ({conventions.NAME_RULE[1]})")
    if asked is None:
        name = login
    elif login not in act_for_others:
        raise ValueError(f"submitter: -e submitter is for the logins {ACT_FOR_OTHERS} lists; {login!r} is not one "
                         "of them (submit as yourself, without -e submitter)")
    else:
        name = asked
    if not isinstance(name, str) or not conventions.matches(conventions.NAME_RULE, name):
        raise ValueError(f"submitter: must be {conventions.NAME_RULE[1]}")
    return name


def queue_line(result):
    """The one line a QUEUED job's submit or status prints: its place and why it waits."""
    queue = (result.get("status") or {}).get("queue") or {}
    where = f"position {queue.get('position')}" if queue.get("position") else "in the queue"
    return (f"{result.get('submission_id')}: QUEUED ({where}, {queue.get('priority')}, {queue.get('submitter')}): "
            f"{queue.get('words') or 'not asked yet'}")


def rendered_lines(result):
    """What --check shows: the module's rendering of the submission (secrets redacted)."""
    lines = [f"{result.get('submission_id')}: {result.get('progress', '')}"]
    for key in ("entrypoint", "runtime_env", "entrypoint_options", "submit_cmd"):
        if key in result:
            value = result[key]
            lines.append(f"{key}: {value if isinstance(value, str) else json.dumps(value, sort_keys=True)}")
    return lines


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_if=options.required_if(),
                                              required_together=[("suite", "entry")],
                                              mutually_exclusive=[("suite", "spec")])
        connection, python = ray_action.connection(self._templar, args, address="ray_config")
        try:
            connection["ray_config"] = self._with_site_secret_names(connection["ray_config"])
        except jobspec_input.JobSpecError as exc:
            return {**result, "failed": True, "msg": str(exc)}
        rc = connection["ray_config"]
        names = self._names = redaction.secret_names(rc.get("secret_env_names") if isinstance(rc, dict) else None)
        # The module runs with the nodes' Ray Python (ray_python), not the host's default one.
        module_vars = dict(task_vars, ansible_python_interpreter=python)
        self._host = task_vars.get("inventory_hostname", "")
        outage_s = rc.get("head_outage_s") if isinstance(rc, dict) else 0
        self._outage_s = outage_s if isinstance(outage_s, int) and not isinstance(outage_s, bool) else 0

        settings = {option: ray_action.inventory_value(self._templar, name, None)
                    for option, name in QUEUE_SETTINGS.items()}
        settings = {k: v for k, v in settings.items() if v is not None}

        def module(**module_args):
            out = self._execute_module(module_name="ray_job", module_args={**connection, **settings, **module_args},
                                       task_vars=module_vars)
            if "invocation" in out:
                # -vvv shows the module's arguments (the resolved spec and its env): only a redacted copy.
                out["invocation"] = redaction.redact(out["invocation"], names)
            return out

        if args["submission_id"] is not None:
            try:
                conventions.check_id("submission_id", args["submission_id"])
            except ValueError as exc:
                return {**result, "failed": True, "msg": str(exc)}
        if args["action"] == "submit":
            return {**result, **self._submit(module, args, connection["ray_config"])}
        if args["action"] == "wait" and not self._task.check_mode:
            last = self._follow(module, args["submission_id"], None, args["poll_s"])
            return {**result, **self._chain(module, last, None, args["poll_s"])}
        if args["action"] == "resume":
            return {**result, **self._resume(module, args["submission_id"], args["poll_s"])}
        if args["action"] == "reconcile":
            reconciled = module(action="reconcile")
            if reconciled.get("finalized"):
                self._show(reconciled.get("msg", ""))
            return {**result, **reconciled}
        if args["action"] == "watch":
            return {**result, **self._watch(module)}
        return {**result, **module(action=args["action"], submission_id=args["submission_id"],
                                   stop_reason=args["stop_reason"])}

    def _submit(self, module, args, ray_config):
        """Resolve and submit; in check mode show the rendering; with wait follow the job to its end."""
        try:
            spec = self._resolve(args, ray_config)
        except (jobspec_input.JobSpecError, jobspec_input.SuiteError) as exc:
            return {"failed": True, "msg": str(exc)}
        extra = json.loads(json.dumps(dict(load_extra_vars(self._loader))))
        try:
            who = submitter(getpass.getuser(), extra.get("submitter"),
                            ray_action.inventory_value(self._templar, ACT_FOR_OTHERS, []) or [])
        except ValueError as exc:
            return {"failed": True, "msg": str(exc)}
        submitted = module(action="submit", spec=spec.to_dict(), preflight=args["preflight"], submitter=who)
        if submitted.get("failed"):
            return submitted
        for line in submitted.get("queue_lines") or []:
            self._show(line)
        if submitted.get("state") == "QUEUED" and not self._task.check_mode:
            self._show(queue_line(submitted))
        if self._task.check_mode:
            for line in rendered_lines(submitted):
                self._show(line)
            return submitted
        if not args["wait"]:
            return submitted
        self._show(submitted.get("progress", ""))
        last = self._follow(module, spec.submission_id, spec.output_dir, args["poll_s"], spec.to_dict())
        last = self._chain(module, last, spec.to_dict(), args["poll_s"])
        shown = {k: submitted[k] for k in ("existed", "entrypoint", "runtime_env", "entrypoint_options", "submit_cmd")
                 if k in submitted}
        return {**last, **shown, "changed": bool(submitted.get("changed") or last.get("changed"))}

    def _resolve(self, args, ray_config):
        """The JobSpec: spec file < site defaults (jobspec_defaults) < overrides < -e."""
        extra = {}
        if args["extra_vars"]:
            # -e values are data: a JSON round trip keeps their values and drops any template trust.
            extra = json.loads(json.dumps(dict(load_extra_vars(self._loader))))
        name = args["spec"] or extra.get("spec")
        overrides = dict(args["overrides"])
        if args["suite"]:
            # A suite entry is read here, not passed in as a variable: its overrides may hold secrets, and
            # Ansible shows and keeps variables (-v output, ansible-runner's job_events).
            entry = jobspec_input.suite_entry(args["suite"], args["entry"],
                                              args["suites_dir"] or os.path.join(PROJECT_ROOT, "suites"))
            name, overrides = entry["spec"], {**entry["overrides"], **overrides}
        if not name:
            raise jobspec_input.JobSpecError("spec", "name a spec with -e spec=NAME (one of jobspecs/*.yaml)", name)
        if args["submission_id"]:
            overrides["submission_id"] = args["submission_id"]
        site_defaults = ray_action.inventory_value(self._templar, "jobspec_defaults", {}) or {}
        return jobspec_input.resolve_job(
            name, ray_config=ray_config, specs_dir=args["specs_dir"] or os.path.join(PROJECT_ROOT, "jobspecs"),
            site_defaults=site_defaults, overrides=overrides, extra_vars=extra)

    def _chain(self, module, last, spec, poll_s):
        """Follow the chain of attempts: while the attempt followed ended FAILED, one `next` call says what comes next
        (a newer attempt to follow, or the next one submitted; chain.py decides), and that one is followed.

        spec: the job's spec as this run resolved it (secrets included; the module hides them), or None."""
        followed = {last.get("submission_id")}
        while not last.get("failed") and last.get("state") == FAILED:
            went = module(action="next", submission_id=last["submission_id"], secret_env=self._secret_env(),
                          **({"spec": spec} if spec is not None else {}))
            for line in went.get("lines") or []:
                self._show(line)
            newest = went.get("follow")
            if went.get("failed") or not newest:
                return went if went.get("failed") else last
            if newest in followed:  # links on the share that lead back: never a loop
                return {**last, "failed": True, "msg": f"{last['submission_id']}: its attempts' links lead back to "
                        f"{newest}: not followed again; look at both with job.yml -e id=ID"}
            followed.add(newest)
            last = self._follow(module, newest, went.get("output_dir"), poll_s)
        return last

    def _watch(self, module):
        """One watcher pass: the module's, its retries included (one call to the head); this side prints."""
        watched = module(action="watch", secret_env=self._secret_env())
        if watched.get("failed"):
            return watched
        for sid, ended in (watched.get("ended") or {}).items():
            self._show(f"{sid}: {ended}")
        for hung in watched.get("hung", []):
            self._show(f"{hung['submission_id']}: hung: {hung.get('summary') or 'no stacks'}")
        for line in watched.get("lines") or []:
            self._show(line)
        self._show(watched.get("msg", ""))
        return watched

    def _resume(self, module, submission_id, poll_s):
        """do=resume: the next attempt, submitted by the module whatever the retry rule says, then followed."""
        went = module(action="resume", submission_id=submission_id, secret_env=self._secret_env())
        for line in went.get("lines") or []:
            self._show(line)
        if went.get("failed") or self._task.check_mode or not went.get("follow"):
            return went
        last = self._follow(module, went["follow"], went.get("output_dir"), poll_s)
        return self._chain(module, last, None, poll_s)

    def _secret_env(self):
        """The secret env values a next attempt may need that its record keeps redacted, for the module (no_log):
        this run's -e env.NAME (`cli`) and the site's jobspec_defaults env by layer (`site`: all, trainers, a
        workload). Only secret names: a no_log value is hidden wherever it appears in the module's output."""
        extra = json.loads(json.dumps(dict(load_extra_vars(self._loader))))
        site = ray_action.inventory_value(self._templar, "jobspec_defaults", {}) or {}

        def secret(env):
            env = env if isinstance(env, dict) else {}
            return {str(k): str(v) for k, v in env.items() if redaction.is_secret_name(str(k), self._names)}

        cli = secret({str(k)[4:]: v for k, v in extra.items() if str(k).startswith("env.")})
        layers = {str(k): secret(v.get("env")) for k, v in site.items() if isinstance(v, dict)} \
            if isinstance(site, dict) else {}
        return {"cli": cli, "site": {k: v for k, v in layers.items() if v}}

    def _with_site_secret_names(self, ray_config):
        """ray_config with the site's extra secret names (inventory jobspec_secret_env_names) added."""
        extra = ray_action.inventory_value(self._templar, "jobspec_secret_env_names", []) or []
        if not isinstance(extra, list) or not all(
                isinstance(n, str) and conventions.matches(ENV_NAME_RULE, n) for n in extra):
            raise jobspec_input.JobSpecError("jobspec_secret_env_names", "must be a list of environment variable names",
                                             extra)
        if not extra or not isinstance(ray_config, dict):
            return ray_config
        names = redaction.secret_names(ray_config.get("secret_env_names"), extra)
        return {**ray_config, "secret_env_names": list(names)}

    def _show(self, line):
        # Every line shown carries job text (steps, stack summaries, messages): no terminal escape gets through.
        display.display(f"{self._host} | {conventions.printable(str(line), keep_newlines=False)}")

    def _follow(self, module, submission_id, output_dir, poll_s, spec=None):
        """Follow one job with `wait` calls. A QUEUED job's calls ask the queue, and carry what only this host has
        for its submission (the spec this run resolved, the secret env values; no_log): its record keeps them
        redacted."""
        args = {"action": "wait", "submission_id": submission_id, "poll_s": poll_s, "secret_env": self._secret_env()}
        if spec is not None:
            args["spec"] = spec
        if output_dir:
            args["output_dir"] = output_dir
        failures = []
        outage = HeadOutage(self._outage_s)

        def poll():
            while True:
                try:
                    result = module(**args)
                    failures.clear()
                except AnsibleConnectionFailure as exc:
                    failures.append(exc)
                    if len(failures) > CONNECTION_RETRIES:
                        raise
                    display.warning(f"{self._host}: polling {submission_id} failed ({exc}); trying again")
                    continue
                waiting = outage.unreachable(result) if result.get("failed") else None
                if waiting:
                    self._show(f"{submission_id}: {waiting}")
                    time.sleep(min(poll_s, 10))
                    continue
                if not result.get("failed"):
                    args["last_seen_ms"] = outage.seen()
                    if args["last_seen_ms"] is None:
                        del args["last_seen_ms"]
                return result

        last, _ = poll_until_final(poll, self._show)
        return last
