"""The queue's models as field tables (module_utils/base/model.py's language), each read by one function that returns
a typed value or raises QueueError, one line naming the bad field: queue entries come from files on the shared root
(data of any shape), workers from Ray's state, quotas from the site's inventory.

Times are seconds since the epoch and durations seconds (numbers); resources are Ray's names and amounts ("GPU",
"CPU", the cluster's custom "worker_node"). A placement's "ranks" are what quotas and fair share count as GPUs: the
trainer's ranks (nnodes x n_gpus_per_node), each a GPU, or a CPU-device rank on a CPU platform such as the lab's.
"""

from __future__ import annotations

import dataclasses
import math

from ansible.module_utils.base import conventions
from ansible.module_utils.base.model import Field, FieldError, check, check_fields

# The priority classes, lowest first: a class's rank is its index. The default class, and the one class whose jobs
# are preemptible unless they say otherwise.
CLASSES = ("low", "normal", "high")
RANK = {name: index for index, name in enumerate(CLASSES)}
DEFAULT_CLASS = "normal"
PREEMPTIBLE_BY_DEFAULT = ("low",)
# The classes whose waiting jobs may preempt, unless the site says otherwise (ray_queue_preempting): only high, so a
# normal job waits for a low one to end (issue 41's lab: the normal job stays QUEUED, the high one preempts).
PREEMPTING_BY_DEFAULT = ("high",)

# What the decision says of an entry (Decision.verdict).
ADMIT, WAIT, PREEMPT = "admit", "wait", "preempt"
VERDICTS = (ADMIT, WAIT, PREEMPT)

# Why (Decision.reason): each a name and its words (Decision.words, from REASON_WORDS; admit.py fills them in).
FITS = "fits"  # admitted: it fits now, nobody waits ahead of it
BACKFILL = "backfill"  # admitted ahead of the first waiting job, which it does not delay
PREEMPTS = "preempts"  # admitted once its victims are stopped
NO_FIT = "no_fit"  # its placement does not fit the free resources now
NEVER_FITS = "never_fits"  # it would not fit the uncordoned workers even with nothing running
QUOTA_JOBS = "quota_jobs"  # its submitter has their quota of jobs running
QUOTA_GPUS = "quota_gpus"  # it would take its submitter past their quota of GPUs
BEHIND = "behind"  # it fits, but jobs wait ahead whose start cannot be known, so nothing may pass them
DELAYS = "delays"  # it fits, but starting it would delay the first waiting job
DUPLICATE = "duplicate"  # its id already runs, or came earlier in the same queue: never admitted twice
HELD = "held"  # it cannot be submitted as its record stands (a secret only its submitter has): left out, not deciding
REASON_WORDS = {
    FITS: "fits now on {workers}",
    BACKFILL: "starts ahead of {first}, which it does not delay ({why})",
    PREEMPTS: "preempts {victims}: their release makes {needs} fit",
    NO_FIT: "needs {needs}; {fit}",
    NEVER_FITS: "needs {needs}; {fit}, even with nothing running",
    QUOTA_JOBS: "{who} is at their quota of {quota} jobs",
    QUOTA_GPUS: "{who} is at their quota of {quota} GPUs ({used} in use, this job asks {asks})",
    BEHIND: "behind {ahead}",
    DELAYS: "backfill would delay {first}",
    DUPLICATE: "{id} is already running or queued ahead",
    HELD: "held out of the queue until its submitter's run gives what it lacks: {why}",
}

MAX_RESOURCES = 32  # resource names in one mapping, at most
MAX_NODES = 4096  # nodes one placement asks, at most
AMOUNT_MAX = 10 ** 9  # one resource's amount, at most
TIME_MAX = 10 ** 10  # seconds since the epoch (the year 2286), at most
RESOURCE_RULE = (r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$", ("a resource name (a letter or _, then up to 63 of "
                 "letters, digits and _.:/-)"))

# A worker's name: its address as Ray's state gives it (an IPv6 one too), or a node id.
WORKER_RULE = (r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", "a worker's address or node id (letters, digits and ._:-)")

_AMOUNT = Field("", "number", minimum=0, maximum=AMOUNT_MAX)
_RESOURCES = Field("", "map", pattern=RESOURCE_RULE, item=_AMOUNT)
_TIME = Field("", "number", minimum=0, maximum=TIME_MAX)
_CLASS = Field("priority", "str", "The priority class.", default=DEFAULT_CLASS, choices=CLASSES, nullable=True)
_PREEMPTIBLE = Field("preemptible", "bool", "Whether a higher class may preempt it; default: true for low only.",
                     nullable=True)
_MAX_RUN = Field("max_run_s", "int", "Seconds it may run (timeouts.max_run_s); null: no limit.", minimum=1,
                 maximum=TIME_MAX, nullable=True)
_ID = Field("id", "str", "The submission id.", pattern=conventions.ID_RULE, required=True)
_SUBMITTER = Field("submitter", "str", "Who submitted it.", pattern=conventions.NAME_RULE, required=True)

PLACEMENT_FIELDS = (
    Field("nodes", "int", "Distinct workers the gang needs (resources.nnodes).", default=1, minimum=1,
          maximum=MAX_NODES, nullable=True),
    Field("per_node", "map", "What each of them must hold for it (its bundles on one node, summed).",
          pattern=RESOURCE_RULE, item=_AMOUNT, nullable=True),
    Field("ranks_per_node", "int", "The trainer's ranks on each node (n_gpus_per_node), which quotas count as GPUs; "
          "default: per_node's GPU, rounded up.", minimum=0, maximum=AMOUNT_MAX, nullable=True),
    Field("driver", "map", "What the job's driver holds on one worker, any of them (the entrypoint's resources).",
          pattern=RESOURCE_RULE, item=_AMOUNT, nullable=True),
)
ENTRY_FIELDS = (
    _ID, _SUBMITTER, _CLASS, _PREEMPTIBLE,
    Field("enqueued_s", "number", "When it entered the queue.", minimum=0, maximum=TIME_MAX, required=True),
    Field("placement", "object", "What its placement asks.", fields=PLACEMENT_FIELDS, required=True),
    _MAX_RUN,
)
WORKER_FIELDS = (
    Field("id", "str", "The worker (its address, as Ray's state names it).", pattern=WORKER_RULE, required=True),
    Field("free", "map", "Its available resources now.", pattern=RESOURCE_RULE, item=_AMOUNT, required=True),
    Field("cordoned", "bool", "Cordoned: no new work lands on it.", default=False, nullable=True),
    Field("total", "map", "All it offers (what an idle cluster would have free): whether a job could ever fit is "
          "judged on it; without it, on its free resources and what the running jobs hold there.",
          pattern=RESOURCE_RULE, item=_AMOUNT, nullable=True),
)
RUNNING_FIELDS = (
    _ID, _SUBMITTER, _CLASS, _PREEMPTIBLE,
    Field("started_s", "number", "When it started running.", minimum=0, maximum=TIME_MAX, required=True),
    _MAX_RUN,
    Field("holds", "map", "What it holds on each worker, by worker id.", pattern=WORKER_RULE, item=_RESOURCES,
          nullable=True),
    Field("ranks", "int", "Its ranks (quotas' GPUs); default: the GPUs it holds, rounded up.", minimum=0,
          maximum=AMOUNT_MAX, nullable=True),
)
_LIMIT = Field("", "object", fields=(
    Field("jobs", "int", "Jobs at once (running and admitted); null: no limit.", minimum=0, maximum=AMOUNT_MAX,
          nullable=True),
    Field("gpus", "int", "GPUs at once: the ranks of their placements (a CPU platform's ranks count); null: no limit.",
          minimum=0, maximum=AMOUNT_MAX, nullable=True),
), nullable=True)
QUOTA_FIELDS = (
    dataclasses.replace(_LIMIT, name="default", doc="Each submitter's limits, unless named under users."),
    Field("users", "map", "Named submitters' own limits.", pattern=conventions.NAME_RULE, item=_LIMIT,
          nullable=True),
)
USAGE_FIELDS = (
    _SUBMITTER,
    Field("ranks", "int", "Its ranks (GPUs).", minimum=0, maximum=AMOUNT_MAX, required=True),
    Field("start_s", "number", "When it started running; null: it never ran.", minimum=0, maximum=TIME_MAX,
          nullable=True),
    Field("end_s", "number", "When it ended; null: it still runs.", minimum=0, maximum=TIME_MAX, nullable=True),
)


class QueueError(ValueError):
    """A value the queue cannot take: one line naming what and the field."""


@dataclasses.dataclass(frozen=True)
class Placement:
    nodes: int
    per_node: dict
    ranks_per_node: int
    driver: dict

    @property
    def ranks(self):
        return self.nodes * self.ranks_per_node


@dataclasses.dataclass(frozen=True)
class Entry:
    """A queued job."""

    id: str
    submitter: str
    priority: str
    preemptible: bool
    enqueued_s: float
    placement: Placement
    max_run_s: int | None


@dataclasses.dataclass(frozen=True)
class Worker:
    id: str
    free: dict
    cordoned: bool
    total: dict = None


@dataclasses.dataclass(frozen=True)
class Running:
    """A job Ray runs (a queued one once admitted, or one submitted around the queue)."""

    id: str
    submitter: str
    priority: str
    preemptible: bool
    started_s: float
    max_run_s: int | None
    holds: dict
    ranks: int

    @property
    def end_s(self):
        """When its max_run_s ends it; None: it has none, and never ends for the queue's estimates."""
        return None if self.max_run_s is None else self.started_s + self.max_run_s


@dataclasses.dataclass(frozen=True)
class Limit:
    jobs: int | None
    gpus: int | None


@dataclasses.dataclass(frozen=True)
class Quotas:
    default: Limit
    users: dict

    def of(self, submitter):
        return self.users.get(submitter, self.default)


@dataclasses.dataclass(frozen=True)
class Usage:
    """One job's use of the cluster, from its record's own times, for fair share."""

    submitter: str
    ranks: int
    start_s: float | None
    end_s: float | None


def _checked(what, fields, value):
    try:
        out = check_fields(fields, value, complete=True)
        _bounded_maps(out)
        return out
    except FieldError as e:
        raise QueueError(f"{what} {e}") from None


def _bounded_maps(value, path=""):
    """No mapping of resources larger than MAX_RESOURCES names, of workers (holds) or users than MAX_NODES (the
    model's maps are unbounded: a file may hold millions)."""
    if isinstance(value, dict):
        limit = MAX_NODES if path in ("holds", "users") else MAX_RESOURCES
        if len(value) > limit and path:
            raise FieldError(path.split("."), f"must hold at most {limit} names", value)
        for key, item in value.items():
            _bounded_maps(item, f"{path}.{key}" if path else str(key))


def _class_and_preemptible(values):
    priority = values["priority"] or DEFAULT_CLASS
    preemptible = values["preemptible"]
    return priority, priority in PREEMPTIBLE_BY_DEFAULT if preemptible is None else preemptible


def _gpus(resources):
    return math.ceil(resources.get("GPU", 0))


def entry_of(value):
    """A queue entry (Entry) from its data; QueueError names the bad field."""
    values = _checked("queue entry", ENTRY_FIELDS, value)
    priority, preemptible = _class_and_preemptible(values)
    p = values["placement"]
    per_node = p["per_node"] or {}
    if not any(per_node.values()) and not any((p["driver"] or {}).values()):
        raise QueueError("queue entry field 'placement': must ask for something (per_node or driver)")
    ranks = _gpus(per_node) if p["ranks_per_node"] is None else p["ranks_per_node"]
    placement = Placement(p["nodes"] or 1, per_node, ranks, p["driver"] or {})
    return Entry(values["id"], values["submitter"], priority, preemptible, values["enqueued_s"], placement,
                 values["max_run_s"])


def worker_of(value):
    """A worker's free resources (Worker) from Ray's state as plain data."""
    values = _checked("worker", WORKER_FIELDS, value)
    return Worker(values["id"], values["free"], bool(values["cordoned"]), values["total"])


def running_of(value):
    """A running job (Running) from its data."""
    values = _checked("running job", RUNNING_FIELDS, value)
    priority, preemptible = _class_and_preemptible(values)
    holds = values["holds"] or {}
    ranks = values["ranks"]
    if ranks is None:
        ranks = math.ceil(sum(held.get("GPU", 0) for held in holds.values()))
    return Running(values["id"], values["submitter"], priority, preemptible, values["started_s"],
                   values["max_run_s"], holds, ranks)


def quotas_of(value):
    """The site's ray_queue_quotas (Quotas); None or {} is no limit at all."""
    values = _checked("ray_queue_quotas", QUOTA_FIELDS, {} if value is None else value)

    def limit(part):
        part = part or {}
        return Limit(part.get("jobs"), part.get("gpus"))

    return Quotas(limit(values["default"]), {name: limit(part) for name, part in (values["users"] or {}).items()})


PREEMPTING_FIELD = Field("ray_queue_preempting", "list", "The classes whose waiting jobs may preempt.",
                         item=Field("", "str", choices=CLASSES), nullable=True)


def preempting_of(value):
    """The site's ray_queue_preempting: a list of classes; None is the default (PREEMPTING_BY_DEFAULT)."""
    try:
        out = check(PREEMPTING_FIELD, value, ("ray_queue_preempting",))
    except FieldError as e:
        raise QueueError(str(e)) from None
    return PREEMPTING_BY_DEFAULT if out is None else tuple(out)


def usage_of(value):
    """One record's use (Usage) for fair share."""
    values = _checked("usage", USAGE_FIELDS, value)
    if values["start_s"] is not None and values["end_s"] is not None and values["end_s"] < values["start_s"]:
        raise QueueError("usage field 'end_s': must not be before start_s")
    return Usage(values["submitter"], values["ranks"], values["start_s"], values["end_s"])
