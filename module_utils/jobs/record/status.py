"""The one model of a job record's status.json: its fields, their types, the states, and how two runs' views merge.

Every reader and writer goes through StatusFile (the module on the head, the action plugin, the regression report):
any file content becomes a StatusFile or a RecordError whose one line names the file and the field (never its
value: a record is data anyone who can write the share may have shaped). Like Ray's own JobInfo
(dashboard/modules/job/common.py), the states say which are terminal, and a final record is never written over.
FIELDS is a table in the project's one model language (module_utils/base/model.py, the JobSpec's too): it checks
every status read and published, and the JSON Schema beside jobspec.schema.json (job_status.schema.json) is derived
from it. Its objects are typed from the same table (model.part_class: Timeouts, Retries, Progress, Stall, Outage,
Blame, Goodput, ...): readers write status.timeouts.stall_s; a part status.json lacks (or holds null) reads as an
empty part, falsy, and is written as null again. Steps and times in ms are bounded by base/files.py's STEP_MAX and
MS_MAX, as every reader of a job's files bounds them. Standard library only: the module on the head imports it.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools

from ansible.module_utils.base import conventions, files, model
from ansible.module_utils.base.files import RecordError  # its home is files.py; status.RecordError stays
from ansible.module_utils.base.ray_cluster import TERMINAL_JOB_STATES
from ansible.module_utils.queue import model as queue

# The states a record can be in, and what each means. Ray's five first; the others are ours.
STATES = {
    "QUEUED": ("in the cluster's queue, not yet submitted to Ray: its record is complete but for Ray's part, and its "
               "`queue` says its place and why it waits (docs/queue.md)"),
    "PENDING": "Ray accepted the job; its driver waits for resources or for its runtime_env",
    "RUNNING": "the driver runs",
    "SUCCEEDED": "the driver exited 0",
    "FAILED": ("the driver failed, Ray lost it (a dead node, a restarted head), its submission failed, or ray_job "
               "stopped it for one of its timeouts (reason PENDING_TIMEOUT or DEADLINE_EXCEEDED)"),
    "STOPPED": "stopped on request: a person (STOPPED_BY_USER) or a Slurm allocation ending",
    "UNKNOWN": ("status.json was lost or could not be trusted: rebuilt from config/job_spec.json (field `rebuilt` says "
                "why); such a record is never finalised from a guess"),
}
QUEUED = "QUEUED"
RAY_STATES = ("PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED")
SUCCEEDED, FAILED = "SUCCEEDED", "FAILED"  # the final states the chain of attempts (chain.py) decides on
TERMINAL = TERMINAL_JOB_STATES
# States that appear in results and reports only, never in a status.json.
NEW = "NEW"  # check mode: the job would be submitted
MISSING = "MISSING"  # a regression entry whose job left no record


class Merge(enum.Enum):
    """What saving a status did, seeing what another run wrote meanwhile (StatusFile.merge)."""

    WRITE = "write"  # write this status (it may have taken a reason another run gave)
    ALREADY_FINAL = "already_final"  # another run finalised the record: its status stands, nothing is written
    REASON_GIVEN = "reason_given"  # a final status lacked the reason another run gave: work the state out again


# A field of status.json may be null (not known yet, or not this job's) unless it says otherwise, and an object keeps
# the keys it does not know (a newer version's).
F = functools.partial(model.Field, nullable=True, open=True)
_TEXT = model.Field("", "str")
# The bounds of a step and of a time in ms (ms since the epoch), as base/files.py's bounded_* read them.
STEP = {"minimum": 0, "maximum": files.STEP_MAX}
MS = {"minimum": 0, "maximum": files.MS_MAX}
SECONDS = {"minimum": 0, "maximum": files.MS_MAX // 1000}


_DIAGNOSIS = (F("kind", "str", "The failure's kind (module_utils/verl/diagnosis.py KINDS, or unknown).", nullable=False,
                required=True),
              F("evidence", "object", "Where in the record the signature was found.", fields=(
                  F("file", "str", "The record's file (or status.json)."), F("line", "str", "The line found."))),
              F("hint", "str", "What to do about it."))

# Why a node is blamed (jobs/evidence/blame.py), each a short phrase as status.json and the final line say it.
BLAME_WHY = {
    "unreadable": "unreadable rank while others wait in a collective",
    "elsewhere": "rank outside the collective the others wait in",
    "unanswered": "unreadable rank the driver waits on while its peers are read",
    "node_died": "node died",
    "oom": "out of memory kill",
    "gloo": "peer named by gloo",
    "nccl": "peer named by NCCL",
}
ADDRESS = (r"^[0-9A-Fa-f.:]{2,45}$", "an IPv4 or IPv6 address")
_BLAME = (model.Field("node_ip", "str", "The node's address.", required=True, pattern=ADDRESS),
          model.Field("host", "str", "Its name (Ray's node_name, when it is not the address), null if unknown.",
                      nullable=True),
          model.Field("why", "str", "What points at it.", required=True, choices=tuple(BLAME_WHY.values())),
          model.Field("evidence", "object", "The excerpt that does, and the record's file it is in.", required=True,
                      open=True, fields=(model.Field("file", "str", "The record's file.", required=True),
                                         model.Field("line", "str", "One line, bounded and redacted.",
                                                     required=True))))

FIELDS = (
    F("submission_id", "str", "The job's Ray submission id and record directory name.", nullable=False, required=True,
      pattern=conventions.ID_RULE),
    F("state", "str", "The record's state: " + "; ".join(f"{k}: {v}" for k, v in STATES.items()) + ".",
      nullable=False, required=True, choices=tuple(STATES)),
    F("final", "bool", "The job has ended and the record is complete; it is never written over.", nullable=False,
      default=False),
    F("reason", "str", "Why ray_job or a person ended the job (STOPPED_BY_USER, PENDING_TIMEOUT, HEAD_RESTARTED, "
      "...)."),
    F("spec", "str", "The spec file's name."),
    F("workload", "str", "ppo, grpo, sft, smoke or command."),
    F("record", "str", "The record directory."),
    F("code_path", "str", "The code first on the job's PYTHONPATH."),
    F("code_id", "str", "The code snapshot's id."),
    F("rebuilt", "str", "Why this status was rebuilt from the record (status.json lost or untrusted)."),
    F("resumed", "str", "Set when the record of an interrupted submit was completed."),
    F("timeouts", "object", "The spec's timeouts.", fields=(
        F("pending_s", "int", "Seconds the job may wait for resources."),
        F("max_run_s", "int", "Seconds the job may run; null: no limit."),
        F("stall_s", "int", "Seconds without a new step (or log line) that make the job hung; null: from its steps."),
        F("on_stall", "str", "What a hang does: report, or stop (retries.on hung stops too).",
          choices=conventions.STALL_CHOICES),
        F("queue_s", "int", "Seconds it may wait QUEUED; null: no limit."))),
    F("queue", "object", "Its place in the cluster's queue: who submitted it, its class, since when it waits, where "
      "and why (jobs/submission/admission.py; docs/queue.md).", fields=(
          F("submitter", "str", "Who submitted it: the control host's login, or -e submitter of a login the site "
            "lets act for others.", pattern=conventions.NAME_RULE),
          F("priority", "str", "Its class.", choices=queue.CLASSES),
          F("preemptible", "bool", "Whether a waiting job of a higher class may take its place."),
          F("since", "int", "When it entered the queue (ms).", **MS),
          F("ranks", "int", "Its ranks (nodes x n_gpus_per_node): what quotas and fair share count as GPUs.",
            minimum=0, maximum=files.COUNT_MAX),
          F("position", "int", "Its place in the queue's order when last asked (1: first); null once admitted.",
            minimum=1, maximum=files.COUNT_MAX),
          F("reason", "str", "Why it waits, or why it was admitted.", choices=tuple(queue.REASON_WORDS)),
          F("words", "str", "The reason in words."),
          F("admitted_at", "int", "When the queue admitted it and submitted it to Ray (ms).", **MS))),
    F("preempt", "object", ("A waiting job of a higher class asked for this one's place (recorded; the job runs "
                            "on: stopping it at a whole checkpoint is to come)."),
      fields=(F("by", "str", "The waiting job that asked.", pattern=conventions.ID_RULE),
              F("at", "int", "When (ms).", **MS))),
    F("retries", "object", "The spec's retry policy.", fields=(
        F("max", "int", "Attempts after the first."),
        F("on", "list", "Diagnosis kinds that are retried.", item=_TEXT),
        F("cordon", "bool", "Cordon the blamed workers before the next attempt (null: a record from before: yes)."))),
    F("submitted_at", "int", "When ray_job submitted the job (ms since the epoch).", **MS),
    F("updated_at", "int", "When status.json was last written (ms).", **MS),
    F("phases", "object", "Seconds spent in each phase.", fields=(
        F("submit_s", "number", "Submitting."), F("pending_s", "number", "Waiting for resources."),
        F("running_s", "number", "Running."), F("total_s", "number", "From submit to end."))),
    F("ray_status", "str", "What Ray said at the end.", choices=RAY_STATES),
    F("message", "str", "Ray's message (secrets redacted)."),
    F("error_type", "str", "Ray's error type."),
    F("driver_exit_code", "int", "The driver's exit code."),
    F("driver_node_id", "str", "The node the driver ran on."),
    F("driver_node_ip", "str", "Its address."),
    F("driver_on_worker", "bool", "The driver ran on a worker, not the head."),
    F("start_time", "int", "When Ray started the job (ms).", **MS),
    F("end_time", "int", "When it ended (ms).", **MS),
    F("last_step", "str", ("The newest step as a person reads it: step N of M, loss, reward, pace and time left, from "
                           "verl's metrics.jsonl (a job that is not verl: its last console step line).")),
    F("steps", "int", "The last step with a loss.", **STEP),
    F("first_loss", "number", "The first step's loss."),
    F("last_loss", "number", "The last step's loss."),
    F("ended_short", "str", ("Why a job that SUCCEEDED may not be done: it stopped before the step its spec asked for "
                             "(total_training_steps).")),
    F("metrics_note", "str", ("Why verl's metrics (metrics.jsonl, its file logger's) are missing or cut short; null "
                              "when whole, or for a job that is not verl.")),
    F("preflight", "object", "What the job's preflight found (its known fields of preflight.json, redacted).", fields=(
        F("code_path", "str", "The code path the job asked for."), F("verl_file", "str", "The verl it imported."),
        F("verl_version", "str", "Its version."), F("code_id", "str", "The snapshot's id (its marker)."),
        F("code_digest", "str", "The snapshot's digest."), F("marker_file", "str", "The marker's file."),
        F("ok", "bool", "verl came from the chosen code path."))),
    F("diagnosis", "object", "Why the job failed (module_utils/verl/diagnosis.py).", fields=_DIAGNOSIS),
    F("blame", "list", ("The nodes a failed or hung attempt's evidence points at (jobs/evidence/blame.py), "
                        "strongest first; empty when it points at none (a bad config, a user's error)."),
      nullable=False, default=[], item=model.Field("blame", "object", open=True, fields=_BLAME)),
    F("cordoned", "list", ("The blamed workers a retry of this attempt cordoned (jobs/life/around.py): each is "
                           "cordoned once, so a worker a person gave back stays so."), nullable=False, default=[],
      item=model.Field("", "str", pattern=ADDRESS)),
    F("last_state", "str", "The state before a restarted head forgot the job.", choices=tuple(STATES)),
    F("head_started_at", "int", "When the restarted head started (ms).", **MS),
    F("attempts", "list", "The first job's resuming attempts' ids, oldest first.", nullable=False, default=[],
      item=_TEXT),
    F("attempt_of", "str", "An attempt's first job."),
    F("attempt", "int", "An attempt's number (1 for <first>-r1)."),
    F("resumed_from", "object", "The checkpoint an attempt resumed from.", fields=(
        F("root", "str", "The first job."), F("submission_id", "str", "The job resumed."),
        F("path", "str", "The checkpoint (null: none, started over)."), F("step", "int", "Its step.", **STEP),
        F("skipped", "list", "Each newer checkpoint skipped, and why.", item=_TEXT))),
    F("progress", "object", "The last step seen and when it moved, the log's size and when it grew (hang detection).",
      fields=(F("step", "int", "The newest verl step.", **STEP), F("step_at", "int", "When it moved (ms).", **MS),
              F("log_bytes", "int", "The driver log's size.", minimum=0, maximum=files.COUNT_MAX),
              F("log_at", "int", "When it grew (ms).", **MS),
              F("step_s", "list", "Recent seconds per step.", item=model.Field("", "number")))),
    F("stall", "object", "The hang found, the stacks taken (debug/stacks/...) and what they show.", fields=(
        F("since", "int", "Since when nothing moved (ms).", **MS),
        F("detected_at", "int", "When the hang was found (ms).", **MS),
        F("limit_s", "int", "The stall limit."), F("step", "int", "The step it hung at.", **STEP),
        F("idle_s", "int", "Seconds without progress."), F("what", "str", "What did not move (step, log line)."),
        F("action", "str", "report or stop."), F("stacks", "str", "Where the stacks are."),
        F("summary", "str", "What they show."))),
    F("outages", "list", "Each time the job lived through its head going away (a head with a GCS store).",
      nullable=False, default=[], item=model.Field("outage", "object", open=True, fields=(
          model.Field("from", "int", "The last time the job was seen through the old head (ms): the head died after "
                      "it.", required=True, **MS),
          model.Field("to", "int", "When the head that came back started (ms).", required=True, **MS),
          model.Field("seconds", "number", "to - from: the longest the head can have been away.", required=True),
          model.Field("seen_by", "str", "Who saw it: wait (a follower), reconcile (up.yml) or finalize.",
                      required=True)))),
    F("goodput", "object", ("How a chain of attempts spent its wall time (jobs/evidence/goodput.py), in the first "
                            "job's record: productive and lost by cause, whole seconds that add up to wall_s."),
      fields=(F("wall_s", "int", "From the first submission to the last attempt's end (or `at`, while it runs).",
                **SECONDS),
              F("productive_s", "int", "What the causes below leave of wall_s.", **SECONDS),
              F("detection_s", "int", "Each failed attempt's last progress to its verdict (hang found, or end).",
                **SECONDS),
              F("restart_s", "int", "An attempt's end to the next one's first step (its pending time aside).",
                **SECONDS),
              F("recomputed_s", "int", ("Steps redone from the resume checkpoint to where the failed attempt had "
                                        "got, at its median step time."), **SECONDS),
              F("outages_s", "int", "Head outages lived through (each record's outages).", **SECONDS),
              F("pending_s", "int", "Waiting for resources (each record's phases.pending_s).", **SECONDS),
              F("attempts", "int", "The records counted (the first job and its attempts).", minimum=0,
                maximum=files.COUNT_MAX),
              F("at", "int", "When it was worked out (ms).", **MS),
              F("note", "str", "What was not counted, and why."))),
)
_BY_NAME = {f.name: f for f in FIELDS}
# What even a hand-made status.json must hold (submission_id, state); the other fields default (final false, attempts
# []) or are null.
REQUIRED = tuple(f.name for f in FIELDS if f.required)
# The typed parts (model.part_class), made from FIELDS: attributes are the sub-fields (an outage's `from` is from_).
Timeouts = model.part_class(_BY_NAME["timeouts"])
Retries = model.part_class(_BY_NAME["retries"])
Phases = model.part_class(_BY_NAME["phases"])
Preflight = model.part_class(_BY_NAME["preflight"])
Diagnosis = model.part_class(_BY_NAME["diagnosis"])
ResumedFrom = model.part_class(_BY_NAME["resumed_from"])
Progress = model.part_class(_BY_NAME["progress"])
Stall = model.part_class(_BY_NAME["stall"])
Outage = model.part_class(_BY_NAME["outages"].item)
Blame = model.part_class(_BY_NAME["blame"].item)
Goodput = model.part_class(_BY_NAME["goodput"])
Queue = model.part_class(_BY_NAME["queue"])
Preempt = model.part_class(_BY_NAME["preempt"])


def _named(path):
    """Where in status.json a field is, as a RecordError says it: field 'timeouts': field 'pending_s', item 1."""
    return ": ".join(f"item {part}" if isinstance(part, int) else f"field '{conventions.one_line(part, 100)}'"
                     for part in path)


@dataclasses.dataclass
class StatusFile(model.Typed):
    """A job record's status.json. Field meanings: FIELDS; `extra` keeps keys this version does not know. Its objects
    are always typed parts: model.Typed makes its part of a mapping given or assigned, and of None (so of each
    object's default below) an empty one."""

    TYPING = model.typed_fields(FIELDS)

    submission_id: str
    state: str = "PENDING"
    final: bool = False
    reason: str | None = None
    spec: str | None = None
    workload: str | None = None
    record: str | None = None
    code_path: str | None = None
    code_id: str | None = None
    rebuilt: str | None = None
    resumed: str | None = None
    timeouts: Timeouts = None
    queue: Queue = None
    preempt: Preempt = None
    retries: Retries = None
    submitted_at: int | None = None
    updated_at: int | None = None
    phases: Phases = None
    ray_status: str | None = None
    message: str | None = None
    error_type: str | None = None
    driver_exit_code: int | None = None
    driver_node_id: str | None = None
    driver_node_ip: str | None = None
    driver_on_worker: bool | None = None
    start_time: int | None = None
    end_time: int | None = None
    last_step: str | None = None
    steps: int | None = None
    first_loss: float | None = None
    last_loss: float | None = None
    ended_short: str | None = None
    metrics_note: str | None = None
    preflight: Preflight = None
    diagnosis: Diagnosis = None
    blame: list[Blame] = dataclasses.field(default_factory=list)
    cordoned: list = dataclasses.field(default_factory=list)
    last_state: str | None = None
    head_started_at: int | None = None
    attempts: list = dataclasses.field(default_factory=list)
    attempt_of: str | None = None
    attempt: int | None = None
    resumed_from: ResumedFrom = None
    progress: Progress = None
    stall: Stall = None
    outages: list[Outage] = dataclasses.field(default_factory=list)
    goodput: Goodput = None
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, data, where="status.json"):
        """The status a parsed status.json holds; RecordError (one line naming where and the field) if untrusted."""
        if not isinstance(data, dict):
            raise RecordError(f"{where}: must be a JSON object")
        try:
            # Absent fields keep the class's defaults; keys of a newer version are kept (open), and strings as Ray
            # and the job wrote them (NUL included: a JSON string may hold it, and the record keeps what was said).
            model.check_fields(FIELDS, data, complete=False, open=True, allow_nul=True)
        except model.FieldError as err:
            raise RecordError(f"{where}: {_named(err.path)} {err.problem}{err.got}") from None
        known = {k: v for k, v in data.items() if k in _BY_NAME}
        return cls(**known, extra={k: v for k, v in data.items() if k not in _BY_NAME})

    def to_dict(self):
        """What status.json holds: every field (null when unset; an empty part too) and the keys kept in extra."""
        out = {f.name: model.plain(getattr(self, f.name)) for f in FIELDS}
        return {**self.extra, **out}

    def copy(self):
        return copy.deepcopy(self)

    def same_as(self, other):
        """Equal but for updated_at (so a poll that learned nothing writes nothing)."""
        mine, theirs = self.to_dict(), other.to_dict()
        mine.pop("updated_at")
        theirs.pop("updated_at")
        return mine == theirs

    def is_terminal(self):
        return self.state in TERMINAL

    def merge(self, recorded, stop_request=None):
        """Fold what another run recorded (`recorded`, the status.json read under the status lock) into this one.

        A final record is never written over: this status becomes the recorded one (ALREADY_FINAL). A reason
        another run gave is never dropped: from its status.json, or, for a job Ray STOPPED, from the stop request
        of a run that has not written status.json yet (`stop_request`). A final status that takes such a reason
        returns REASON_GIVEN: the caller works its state and diagnosis out again and saves once more."""
        if recorded is not None and recorded.final:
            self.__dict__.update(recorded.copy().__dict__)
            return Merge.ALREADY_FINAL
        # An outage another run noted meanwhile is kept (one entry per head that came back).
        for outage in recorded.outages if recorded is not None else []:
            if all(mine.to != outage.to for mine in self.outages):
                self.outages.append(copy.deepcopy(outage))
        given = not self.reason and ((recorded.reason if recorded is not None else None)
                                     or (self.final and self.ray_status == "STOPPED" and stop_request))
        if given:
            self.reason = given
            if self.final:
                return Merge.REASON_GIVEN
        return Merge.WRITE


def final_state(ray_status, reason):
    """The state we record for a job that ended: one we stopped for a timeout failed, whatever Ray calls it."""
    return "FAILED" if reason in conventions.FAILING_STOP_REASONS else ray_status


def json_schema():
    """JSON Schema (draft 2020-12) of status.json, derived from FIELDS (job_status.schema.json)."""
    return model.json_schema(
        FIELDS, open=True, title="ray-verl job record status.json",
        description=("<shared_root>/jobs/<submission_id>/status.json, written by the ray_job module. Generated from "
                     "jobs/record/status.py FIELDS (python -m plugin_utils.schemas); do not edit. Keys not "
                     "listed here may appear (written by a newer version)."))
