#!/usr/bin/env python3
#SBATCH --job-name=verl-ray
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --signal=B:USR1@300
# The Slurm batch entry point (sbatch it from the repository root; see docs/slurm.md):
#
#   sbatch --nodes=3 --gres=gpu:8 scripts/slurm_batch.py -i inventory/<site> --spec sft [-e KEY=VALUE ...]
#
# Inside the allocation it runs the runbook as a person would: up.yml on the allocation's nodes (the first
# is the Ray head), submit.yml with wait=true, then down.yml. When Slurm ends the allocation early (USR1
# 300 s before the time limit, from the --signal line above; TERM from scancel or at the limit) it stops
# the job with reason SLURM_ALLOCATION_ENDING, so its record is final, and still takes Ray down.
"""Run one JobSpec on the Ray cluster of a Slurm allocation, from up.yml to down.yml."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

# Slurm runs a copy of this file from its spool, with the compute node's python3: main() finds the project from
# the submit directory and runs this file again with the project's venv Python, the one beside the
# ansible-playbook it runs, which has the Ansible the project's helpers import through. Standard library only
# up to there.
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
EXIT_ENDED_BY_SLURM = 3
# A -e key names a JobSpec field (dotted for nested ones): never '@file', which ansible-playbook would read as vars.
EXTRA_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
# This script's own: a -e must not change what it submits, whether it waits, or how Ansible connects.
RESERVED_KEYS = ("spec", "submission_id", "wait", "id", "do", "stop_reason")


def check_extra(value, redaction, index=1):
    """One -e value as ansible-playbook reads it: words (quotes kept together), each KEY=VALUE for a JobSpec field.

    Errors name a key at most, never a value: sbatch's arguments stay in Slurm's job record (scontrol show job:
    Command=) and in ps, and a value may be a secret given in the wrong place.
    """
    for name in secret_names_in(value, redaction):
        raise BatchError(f"-e: {name} is a secret, and sbatch's arguments are kept in Slurm's job record; "
                         "set it in the site's jobspec_defaults instead (nothing was submitted)")
    try:
        words = shlex.split(value)
    except ValueError:
        raise BatchError(f"-e #{index}: unbalanced quotes; each word must be KEY=VALUE for a JobSpec field") from None
    if not words or value.lstrip()[:1] in "@{[":
        raise BatchError(f"-e #{index}: must be KEY=VALUE words for JobSpec fields (not @file, JSON or YAML)")
    for word in words:
        key = word.split("=", 1)[0] if "=" in word else None
        if key is None or not EXTRA_KEY.match(key):
            raise BatchError(f"-e #{index}: each word must be KEY=VALUE, KEY a JobSpec field (dotted for a nested "
                             "one); quote a value with spaces")
        if key.split(".")[0] in RESERVED_KEYS or key.startswith("ansible_"):
            raise BatchError(f"-e {key}: is not a JobSpec field this script passes on ({', '.join(RESERVED_KEYS)} "
                             "and ansible_* are its own)")


# Where a JSON mapping or list starts in a -e value: the whole value, or KEY= (the text may be quoted).
_JSON_START = re.compile(r"""(?:^|\s)(?:([A-Za-z_][\w.]*)\s*=\s*["']?)?(?=[{\[])""")
# A key in JSON or YAML flow text that is not JSON: a name, maybe quoted, then a colon.
_LOOSE_KEY = re.compile(r"""([A-Za-z_][A-Za-z0-9_]*)["']?\s*:""")


def secret_names_in(value, redaction):
    """The secret names one -e value would set, in every form it can take: env.NAME=... (or any dotted key whose last
    part is a secret name), env={"NAME": ...} (JSON text, as the ray_job action reads a mapping), a whole JSON -e
    ({"env": {"NAME": ...}}), and, where that text is not JSON, every NAME: inside it; also any env.NAME in text
    shlex cannot split. Names only, shown as a name or not at all."""
    names = [f"env.{n}" for n in re.findall(r"\benv\.([A-Za-z_][A-Za-z0-9_]*)", value, re.IGNORECASE)]
    try:
        names += [w.split("=", 1)[0] for w in shlex.split(value) if "=" in w]
    except ValueError:
        pass
    for match in _JSON_START.finditer(value):
        key = match.group(1) or ""
        try:
            names += _json_names(json.JSONDecoder().raw_decode(value, match.end())[0], key)
        except ValueError:
            names += [f"{key}.{n}" if key else n for n in _LOOSE_KEY.findall(value, match.end())]
    secret = [n for n in names if redaction.is_secret_name(n.split(".")[-1])]
    return list(dict.fromkeys(n if re.fullmatch(r"[A-Za-z_][\w.]*", n, re.ASCII) else "one of its keys"
                              for n in secret))


def _json_names(node, path):
    """The dotted names of every mapping key in parsed JSON (a mapping's keys are names, never values)."""
    out = []
    if isinstance(node, dict):
        for key, item in node.items():
            name = f"{path}.{key}" if path else str(key)
            out += [name, *_json_names(item, name)]
    elif isinstance(node, list):
        for item in node:
            out += _json_names(item, path)
    return out


class BatchError(Exception):
    """A bad argument or environment, said in one line before anything runs."""


@dataclasses.dataclass(frozen=True)
class Plan:
    repo: Path
    inventory: str
    spec: str
    submission_id: str
    slurm_job_id: str
    extra: tuple  # -e KEY=VALUE for submit.yml, as given
    pinned: dict  # the allocation as read at the start, in the environment of every playbook run
    summary: str = ""

    def playbook(self, name, *extra_vars):
        argv = [str(self.repo / ".venv" / "bin" / "ansible-playbook"), "-i", self.inventory, name]
        for value in extra_vars:
            argv += ["-e", value]
        return argv

    def up(self):
        return self.playbook("up.yml")

    def submit(self):
        return self.playbook("submit.yml", f"spec={self.spec}", f"submission_id={self.submission_id}",
                             "wait=true", f"metadata.slurm_job_id={self.slurm_job_id}", *self.extra)

    def stop(self):
        return self.playbook("job.yml", f"id={self.submission_id}", "do=stop",
                             "stop_reason=SLURM_ALLOCATION_ENDING")

    def status(self):
        return self.playbook("job.yml", f"id={self.submission_id}", "do=status")

    def down(self):
        return self.playbook("down.yml")


def _project(repo):
    """The project's naming rules, secret names and Slurm reader, from the repository sbatch ran in."""
    # The bootstrap (plugin_utils/__init__.py), with the project root found from the submit directory: the spool
    # copy's __file__ says nothing about where the project is.
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    from plugin_utils import slurm

    from ansible.module_utils.base import conventions  # isort: skip
    from ansible.module_utils.base import redaction  # isort: skip

    return conventions, redaction, slurm


def reexec_argv(repo, argv, script, prefix=sys.prefix):
    """The command that runs this script again with the project's venv Python; None when this is that Python."""
    venv = repo / ".venv"
    if os.path.realpath(prefix) == os.path.realpath(venv):
        return None
    return [str(venv / "bin" / "python"), script, *argv]


def read_allocation(slurm, job_id):
    return slurm.allocation(job_id, slurm.scontrol_runner())


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="slurm_batch.py", description=__doc__)
    parser.add_argument("-i", "--inventory", required=True,
                        help="the site's inventory folder, holding a slurm.yml (plugin: slurm_allocation)")
    parser.add_argument("--spec", required=True, help="the JobSpec to run (jobspecs/<spec>.yaml)")
    parser.add_argument("--id", dest="submission_id", help="the submission id (default slurm-<job id>-<spec>)")
    parser.add_argument("-e", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="a JobSpec field for submit.yml, as with ansible-playbook -e")
    parser.add_argument("--repo", help="the project's folder (default: where sbatch ran, SLURM_SUBMIT_DIR)")
    return parser.parse_args(argv)


def find_repo(args, env):
    """The project's folder, with the venv that runs its playbooks (standard library only)."""
    if not env.get("SLURM_JOB_ID", ""):
        raise BatchError("SLURM_JOB_ID is not set: run this through sbatch (it brings a Ray cluster up on the "
                         "allocation's nodes)")
    repo = Path(args.repo or env.get("SLURM_SUBMIT_DIR") or os.getcwd()).resolve()
    if not (repo / "ansible.cfg").is_file() or not (repo / "up.yml").is_file():
        raise BatchError(f"--repo: {repo} is not this project's folder (no ansible.cfg and up.yml): sbatch from "
                         "the repository root or give --repo")
    if not (repo / ".venv" / "bin" / "ansible-playbook").is_file():
        raise BatchError(f"--repo: {repo}/.venv has no ansible-playbook: run `make venv` there first")
    return repo


def make_plan(argv, env, read=read_allocation):
    """Check the arguments and the allocation; return what will run."""
    args = parse_args(argv)
    repo = find_repo(args, env)
    job_id = env["SLURM_JOB_ID"]
    conventions, redaction, slurm = _project(repo)
    try:
        slurm.checked_job_id(job_id, "SLURM_JOB_ID")
    except slurm.SlurmError as exc:
        raise BatchError(str(exc)) from None
    inventory = (repo / args.inventory).resolve()
    configs = [inventory / n for n in ("slurm.yml", "slurm.yaml")] if inventory.is_dir() else [inventory]
    if not any(c.is_file() and "slurm_allocation" in c.read_text(errors="replace") for c in configs):
        raise BatchError(f"--inventory: {args.inventory} is not a Slurm inventory (a folder with a slurm.yml "
                         "saying `plugin: slurm_allocation`, like inventory/example-slurm)")
    if not conventions.matches(conventions.NAME_RULE, args.spec):
        raise BatchError("--spec: must be a spec name (letters, digits, '.', '_', '-')")
    if not (repo / "jobspecs" / f"{args.spec}.yaml").is_file():
        raise BatchError(f"--spec: there is no jobspecs/{args.spec}.yaml")
    sid = args.submission_id or f"slurm-{job_id}-{args.spec}"
    try:
        conventions.check_id("--id", sid)
    except ValueError as exc:
        raise BatchError(str(exc)) from None
    for index, value in enumerate(args.extra, 1):
        check_extra(value, redaction, index)
    try:
        alloc = read(slurm, job_id)
    except slurm.SlurmError as exc:
        raise BatchError(str(exc)) from None
    workers = ", ".join(f"{n} ({alloc.gpus[n]} GPUs)" for n in alloc.workers)
    return Plan(repo=repo, inventory=str(inventory), spec=args.spec, submission_id=sid, slurm_job_id=job_id,
                extra=tuple(args.extra), pinned={slurm.PINNED_ENV: alloc.to_json()},
                summary=f"Slurm job {job_id}: Ray head on {alloc.head}, workers {workers}")


class Batch:
    """up, submit and wait, down; a stop signal ends the step under way and stops the job first."""

    def __init__(self, plan, spawn=subprocess.Popen, say=None):
        self.plan = plan
        self.spawn = spawn
        self.say = say or (lambda line: print(f"slurm_batch: {time.strftime('%H:%M:%S')} {line}", flush=True))
        self.ending = None  # the signal's name once Slurm asked us to end
        self.child = None
        self.interruptible = False  # only up and submit are cut short; stop and down must finish

    def on_signal(self, signum, _frame=None):
        """Only flags and signals: the main flow says what happened (print is not safe in a handler)."""
        if self.ending:
            return
        self.ending = signal.Signals(signum).name
        self.interrupt()

    def interrupt(self):
        child = self.child
        if self.interruptible and child is not None and child.poll() is None:
            child.send_signal(signal.SIGINT)  # Ansible ends a run cleanly on SIGINT

    def step(self, what, argv, interruptible=False):
        """Run one playbook; returns its exit code (None when a signal came first and it never started)."""
        # interruptible is set before the child exists and checked again after: a signal in between is not lost.
        self.interruptible = interruptible
        if interruptible and self.ending:
            self.interruptible = False
            return None
        self.say(what)
        env = {**os.environ, **self.plan.pinned}
        try:
            self.child = self.spawn(argv, cwd=str(self.plan.repo), env=env)
            if self.ending:
                self.interrupt()
            rc = self.child.wait()
            if rc is not None and -rc in STOP_SIGNALS and not self.ending:
                # Slurm signals every process of the job, in no set order: the playbook may end by the signal before
                # this process's own handler has run. Its end by a stop signal is Slurm asking us to end.
                self.ending = signal.Signals(-rc).name
            return rc
        finally:
            self.child, self.interruptible = None, False

    def run(self):
        p = self.plan
        rc, submitted, cut_short, stopped = 1, False, False, None
        self.say(p.summary)
        try:
            rc = self.step("up.yml: the Ray cluster on this allocation's nodes", p.up(), interruptible=True)
            cut_short = self.ending is not None
            if not cut_short and rc == 0:
                submitted = True
                rc = self.step(f"submit.yml: {p.spec} as {p.submission_id}, waiting for it to end", p.submit(),
                               interruptible=True)
                cut_short = self.ending is not None
        finally:
            cut_short = cut_short or (self.ending is not None and submitted and rc is None)
            if self.ending:
                self.say(f"{self.ending}: the allocation is ending")
            # The job's record becomes final (STOPPED, SLURM_ALLOCATION_ENDING) before Ray goes away.
            if cut_short and submitted:
                stopped = self.step(f"job.yml: stopping {p.submission_id}", p.stop())
                if stopped != 0:
                    self.step(f"job.yml: the record of {p.submission_id} as it stands", p.status())
            self.step("down.yml: Ray stopped on this allocation's nodes", p.down())
        if cut_short:
            what = ("nothing was submitted" if not submitted else
                    f"{p.submission_id} stopped, its record says SLURM_ALLOCATION_ENDING" if stopped == 0 else
                    f"stopping {p.submission_id} failed (rc={stopped}): see job.yml's output above")
            self.say(f"ended by Slurm ({self.ending}): {what}")
            return EXIT_ENDED_BY_SLURM
        self.say(f"{p.submission_id}: {'SUCCEEDED' if rc == 0 else f'did not succeed (rc={rc})'}")
        return 0 if rc == 0 else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        again = reexec_argv(find_repo(parse_args(argv), os.environ), argv, os.path.abspath(sys.argv[0]))
        if again:
            sys.stdout.flush()
            os.execv(again[0], again)  # the same process (Slurm's signals still reach it), in the venv
        plan = make_plan(argv, os.environ)
    except BatchError as exc:
        print(f"slurm_batch.py: {exc}", file=sys.stderr)
        return 2
    batch = Batch(plan)
    for signum in STOP_SIGNALS:
        signal.signal(signum, batch.on_signal)
    return batch.run()


if __name__ == "__main__":
    sys.exit(main())
