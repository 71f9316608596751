"""The one model of a job record's status.json: its fields, their types, the states, and how two runs' views merge.

Every reader and writer goes through JobStatus (the module on the head, the action plugin, the regression report):
any file content becomes a JobStatus or a RecordError whose one line names the file and the field (never its
value: a record is data anyone who can write the share may have shaped). Like Ray's own JobInfo
(dashboard/modules/job/common.py), the states say which are terminal, and a final record is never written over.
The JSON Schema beside jobspec.schema.json (job_status.schema.json) is derived from FIELDS.
Standard library only: the module on the head imports it.
"""

from __future__ import annotations

import copy
import dataclasses
import enum

from ansible.module_utils.base import conventions
from ansible.module_utils.base.files import RecordError  # its home is files.py; status.RecordError stays
from ansible.module_utils.base.ray_cluster import TERMINAL_JOB_STATES

# The states a record can be in, and what each means. Ray's five first; the others are ours.
STATES = {
    "PENDING": "Ray accepted the job; its driver waits for resources or for its runtime_env",
    "RUNNING": "the driver runs",
    "SUCCEEDED": "the driver exited 0",
    "FAILED": ("the driver failed, Ray lost it (a dead node, a restarted head), its submission failed, or ray_job "
               "stopped it for one of its timeouts (reason PENDING_TIMEOUT or DEADLINE_EXCEEDED)"),
    "STOPPED": "stopped on request: a person (STOPPED_BY_USER) or a Slurm allocation ending",
    "UNKNOWN": ("status.json was lost or could not be trusted: rebuilt from config/job_spec.json (field `rebuilt` says "
                "why); such a record is never finalised from a guess"),
}
RAY_STATES = ("PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED")
TERMINAL = TERMINAL_JOB_STATES
# States that appear in results and reports only, never in a status.json.
NEW = "NEW"  # check mode: the job would be submitted
MISSING = "MISSING"  # a regression entry whose job left no record


class Merge(enum.Enum):
    """What saving a status did, seeing what another run wrote meanwhile (JobStatus.merge)."""

    WRITE = "write"  # write this status (it may have taken a reason another run gave)
    ALREADY_FINAL = "already_final"  # another run finalised the record: its status stands, nothing is written
    REASON_GIVEN = "reason_given"  # a final status lacked the reason another run gave: work the state out again


@dataclasses.dataclass(frozen=True)
class F:
    """One field of status.json: kinds str, int, number, bool, list (of str), numbers (a list of numbers), object
    (sub-fields, each checked; other keys kept), objects (a list of objects with the sub-fields), mapping."""

    name: str
    kind: str
    doc: str
    nullable: bool = True
    fields: tuple = ()
    choices: tuple = ()


_DIAGNOSIS = (F("kind", "str", "The failure's kind (module_utils/verl/diagnosis.py KINDS, or unknown).", nullable=False),
              F("evidence", "object", "Where in the record the signature was found.", fields=(
                  F("file", "str", "The record's file (or status.json)."), F("line", "str", "The line found."))),
              F("hint", "str", "What to do about it."))

FIELDS = (
    F("submission_id", "str", "The job's Ray submission id and record directory name.", nullable=False),
    F("state", "str", "The record's state (see STATES).", nullable=False, choices=tuple(STATES)),
    F("final", "bool", "The job has ended and the record is complete; it is never written over.", nullable=False),
    F("reason", "str", "Why ray_job or a person ended the job (STOPPED_BY_USER, PENDING_TIMEOUT, HEAD_RESTARTED, ...)."),
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
          choices=conventions.STALL_CHOICES))),
    F("retries", "object", "The spec's retry policy.", fields=(
        F("max", "int", "Attempts after the first."),
        F("on", "list", "Diagnosis kinds that are retried."))),
    F("submitted_at", "int", "When ray_job submitted the job (ms since the epoch)."),
    F("updated_at", "int", "When status.json was last written (ms)."),
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
    F("start_time", "int", "When Ray started the job (ms)."),
    F("end_time", "int", "When it ended (ms)."),
    F("last_step", "str", ("The newest step as a person reads it: step N of M, loss, reward, pace and time left, from "
                           "verl's metrics.jsonl (a job that is not verl: its last console step line).")),
    F("steps", "int", "The last step with a loss."),
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
    F("last_state", "str", "The state before a restarted head forgot the job.", choices=tuple(STATES)),
    F("head_started_at", "int", "When the restarted head started (ms)."),
    F("attempts", "list", "The first job's resuming attempts' ids, oldest first.", nullable=False),
    F("attempt_of", "str", "An attempt's first job."),
    F("attempt", "int", "An attempt's number (1 for <first>-r1)."),
    F("resumed_from", "object", "The checkpoint an attempt resumed from.", fields=(
        F("root", "str", "The first job."), F("submission_id", "str", "The job resumed."),
        F("path", "str", "The checkpoint (null: none, started over)."), F("step", "int", "Its step."),
        F("skipped", "list", "Each newer checkpoint skipped, and why."))),
    F("progress", "object", "The last step seen and when it moved, the log's size and when it grew (hang detection).",
      fields=(F("step", "int", "The newest verl step."), F("step_at", "int", "When it moved (ms)."),
              F("log_bytes", "int", "The driver log's size."), F("log_at", "int", "When it grew (ms)."),
              F("step_s", "numbers", "Recent seconds per step."))),
    F("stall", "object", "The hang found, the stacks taken (debug/stacks/...) and what they show.", fields=(
        F("since", "int", "Since when nothing moved (ms)."), F("detected_at", "int", "When the hang was found (ms)."),
        F("limit_s", "int", "The stall limit."), F("step", "int", "The step it hung at."),
        F("idle_s", "int", "Seconds without progress."), F("what", "str", "What did not move (step, log line)."),
        F("action", "str", "report or stop."), F("stacks", "str", "Where the stacks are."),
        F("summary", "str", "What they show."))),
    F("outages", "objects", "Each time the job lived through its head going away (a head with a GCS store).",
      nullable=False, fields=(
          F("from", "int", "The last time the job was seen through the old head (ms): the head died after it.",
            nullable=False),
          F("to", "int", "When the head that came back started (ms).", nullable=False),
          F("seconds", "number", "to - from: the longest the head can have been away.", nullable=False),
          F("seen_by", "str", "Who saw it: wait (a follower), reconcile (up.yml) or finalize.", nullable=False))),
)
_BY_NAME = {f.name: f for f in FIELDS}
# What even a hand-made status.json must hold; the other fields default (final false, attempts []).
REQUIRED = ("submission_id", "state")
_TYPES = {"str": (str,), "int": (int,), "number": (int, float), "bool": (bool,), "list": (list,), "numbers": (list,),
          "object": (dict,), "objects": (list,), "mapping": (dict,)}
# The largest number status.json may hold (about 9.2e18: ms since the epoch, steps, sizes all fit).
NUMBER_LIMIT = 2 ** 63 - 1
_WHAT = {"str": "a string", "int": "an integer", "number": "a number", "bool": "true or false",
         "list": "a list of strings", "numbers": "a list of numbers", "object": "an object",
         "objects": "a list of objects", "mapping": "an object"}


def _number(value, kind="number"):
    """A number of status.json: an int (or, for kind number, a float) within ±NUMBER_LIMIT; never a bool, NaN or
    infinity (json.loads reads NaN and Infinity), never a number the module's arithmetic would overflow on."""
    # NaN compares false with everything: the range check refuses it too.
    return isinstance(value, _TYPES[kind]) and not isinstance(value, bool) and -NUMBER_LIMIT <= value <= NUMBER_LIMIT


def _check(field, value, where):
    """value checked against field: a RecordError naming where and the field, never the value."""
    if value is None and field.nullable:
        return
    if field.kind in ("int", "number"):
        ok = _number(value, field.kind)
    else:
        ok = isinstance(value, _TYPES[field.kind])
    if ok and field.kind == "list":
        ok = all(isinstance(item, str) for item in value)
    if ok and field.kind == "numbers":
        ok = all(_number(item) for item in value)
    if ok and field.kind == "objects":
        ok = all(isinstance(item, dict) for item in value)
    if ok and field.choices:
        ok = value in field.choices
    if not ok:
        what = "one of " + ", ".join(field.choices) if field.choices else _WHAT[field.kind]
        raise RecordError(f"{where}: field '{field.name}' must be {what}" + (" or null" if field.nullable else ""))
    for item in value if field.kind == "objects" else [value]:
        for sub in field.fields:
            _check(sub, item.get(sub.name), f"{where}: field '{field.name}'")


@dataclasses.dataclass
class JobStatus:
    """A job record's status.json. Field meanings: FIELDS; `extra` keeps keys this version does not know."""

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
    timeouts: dict | None = None
    retries: dict | None = None
    submitted_at: int | None = None
    updated_at: int | None = None
    phases: dict | None = None
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
    preflight: dict | None = None
    diagnosis: dict | None = None
    last_state: str | None = None
    head_started_at: int | None = None
    attempts: list = dataclasses.field(default_factory=list)
    attempt_of: str | None = None
    attempt: int | None = None
    resumed_from: dict | None = None
    progress: dict | None = None
    stall: dict | None = None
    outages: list = dataclasses.field(default_factory=list)
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, data, where="status.json"):
        """The status a parsed status.json holds; RecordError (one line naming where and the field) if untrusted."""
        if not isinstance(data, dict):
            raise RecordError(f"{where}: must be a JSON object")
        for name in REQUIRED:
            if name not in data:
                raise RecordError(f"{where}: field '{name}' is missing")
        for field in FIELDS:
            if field.name in data:
                _check(field, data[field.name], where)
        if not conventions.matches(conventions.ID_RULE, data["submission_id"]):
            raise RecordError(f"{where}: field 'submission_id' must be {conventions.ID_RULE[1]}")
        known = {k: v for k, v in data.items() if k in _BY_NAME}
        return cls(**known, extra={k: v for k, v in data.items() if k not in _BY_NAME})

    def to_dict(self):
        """What status.json holds: every field (null when unset) and the keys kept in extra."""
        out = {f.name: getattr(self, f.name) for f in FIELDS}
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
            if all(mine.get("to") != outage.get("to") for mine in self.outages):
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


def _schema(field):
    if field.kind == "object":
        schema = {"type": "object", "properties": {s.name: _schema(s) for s in field.fields}}
        required = [s.name for s in field.fields if not s.nullable]
        if required:
            schema["required"] = required
    elif field.kind == "list":
        schema = {"type": "array", "items": {"type": "string"}}
    elif field.kind == "numbers":
        schema = {"type": "array", "items": {"type": "number"}}
    elif field.kind == "objects":
        item = _schema(F("", "object", "", nullable=False, fields=field.fields))
        item.pop("description")
        schema = {"type": "array", "items": item}
    else:
        schema = {"type": {"str": "string", "int": "integer", "number": "number", "bool": "boolean",
                           "mapping": "object"}[field.kind]}
    if field.choices:
        schema["enum"] = list(field.choices)
    if field.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    return {"description": field.doc, **schema}


def json_schema():
    """JSON Schema (draft 2020-12) of status.json, derived from FIELDS (job_status.schema.json)."""
    root = _schema(F("", "object", "", nullable=False, fields=FIELDS))
    root.pop("description")
    root["required"] = list(REQUIRED)
    root["properties"]["submission_id"]["pattern"] = conventions.ID_RULE[0]
    root["properties"]["state"]["description"] += " " + "; ".join(f"{k}: {v}" for k, v in STATES.items())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "ray-verl job record status.json",
            "description": ("<shared_root>/jobs/<submission_id>/status.json, written by the ray_job module. Generated "
                            "from module_utils/jobs/status.py FIELDS (python -m plugin_utils.schemas); do not edit. "
                            "Keys not listed here may appear (written by a newer version)."),
            **root}
