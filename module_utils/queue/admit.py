"""One admission decision: the queue's entries in order (share.py), each ADMIT, WAIT with one reason, or PREEMPT
victims, over the free resources of the uncordoned workers, the running jobs, the quotas and the time now.

The rules (docs/queue.md says them for people):
- In order, each entry's submitter's quota is asked first (jobs at once; GPUs at once, counted as placements' ranks,
  running and admitted in this decision alike): over it, the entry waits and blocks nobody.
- Until one entry waits for resources, each that fits is admitted, and the next sees the free resources less what it
  takes (the gang, fit.py). One that does not fit, of a class that may preempt (high, unless the site says), may
  preempt running jobs of strictly lower classes that allow it (choose_victims); else it is the first waiting job,
  and its earliest start (the shadow time) is worked out from the running jobs' max_run_s ends (a job without one
  never ends for this), with what its placement takes then.
- EASY backfill: a later entry starts ahead of it only if it fits now and either its own max_run_s ends by the shadow
  time, or it fits in what the first job will leave at that time as well as in what is free now. The first waiting
  job is never delayed; when its start cannot be known, nothing passes it.
- A placement that would not fit even with every running job gone waits without holding the queue up.
"""

import dataclasses
import itertools

from ansible.module_utils.queue import fit, share
from ansible.module_utils.queue import model as m

EXACT_VICTIMS = 3  # victim sets up to this size are searched exhaustively (the fewest), over...
EXACT_CANDIDATES = 12  # ...the first this many candidates; beyond, greedily then pruned
NO_QUOTAS = m.Quotas(m.Limit(None, None), {})


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the decision says of one entry: its position in the queue (1 first), its verdict, the reason's name and
    words, the victims a PREEMPT stops (ids), and where its placement goes ({worker: resources}) when admitted."""

    id: str
    position: int
    verdict: str
    reason: str
    words: str
    victims: tuple = ()
    where: dict = dataclasses.field(default_factory=dict)

    def to_dict(self):
        return {"id": self.id, "position": self.position, "verdict": self.verdict, "reason": self.reason,
                "words": self.words, "victims": list(self.victims), "where": self.where}


def words(reason, **values):
    return m.REASON_WORDS[reason].format(**values)


def _shape(placement):
    return placement.nodes, tuple(sorted(placement.per_node.items())), tuple(sorted(placement.driver.items()))


class _Pool:
    """Free resources per uncordoned worker, and a cache of the placement shapes that did not fit them and of their
    words (cleared on every change), so a long queue of alike jobs costs one fit check per shape."""

    def __init__(self, free):
        self.free, self._misses, self._fits = free, {}, {}

    def place(self, placement):
        key = _shape(placement)
        if key in self._misses:
            return None
        where = fit.place(placement, self.free)
        if where is None:
            self._misses[key] = None
        return where

    def fits(self, placement):
        key = _shape(placement)
        if key not in self._fits:
            self._fits[key] = fit.fits(placement, self.free)
        return self._fits[key]

    def no_fit(self, placement):
        """The words of why placement does not fit (NO_FIT's), once per shape; asked after place found no room."""
        key = _shape(placement)
        if self._misses.get(key) is None:
            self._misses[key] = words(m.NO_FIT, needs=fit.needs_words(placement),
                                      fit=fit.fit_words(placement, self.free))
        return self._misses[key]

    def take(self, where):
        self.free, self._misses, self._fits = fit.take(self.free, where), {}, {}

    def give(self, holds):
        self.free = {w: fit.plus(res, holds[w]) if w in holds else res for w, res in self.free.items()}
        self._misses, self._fits = {}, {}


class _Decider:
    def __init__(self, running, workers, quotas, now, preempting=m.PREEMPTING_BY_DEFAULT):
        self.now, self.quotas, self.preempting = now, quotas or NO_QUOTAS, preempting
        self.pool = _Pool({w.id: dict(w.free) for w in workers if not w.cordoned})
        self.busy = list(running)  # running now, less victims, plus what this decision admits
        # What each worker would have with every running job gone: all it offers, when Ray said; else its free
        # resources and what the running jobs are known to hold there (a hold nobody attributes is missed).
        capacity = dict(self.pool.free)
        for job in running:
            capacity = _give(capacity, job.holds)
        capacity.update({w.id: dict(w.total) for w in workers if not w.cordoned and w.total is not None})
        self.capacity = _Pool(capacity)
        self.jobs, self.ranks = {}, {}
        for job in running:
            self._count(job.submitter, 1, job.ranks)
        self.admitted = set()  # ids this decision admitted: never victims
        self.first = None  # the first waiting job: (entry, shadow time or None, spare _Pool or None)
        self.ahead = {}  # class -> entries waiting for resources so far
        self.out = []

    def _count(self, submitter, jobs, ranks):
        self.jobs[submitter] = self.jobs.get(submitter, 0) + jobs
        self.ranks[submitter] = self.ranks.get(submitter, 0) + ranks

    def quota(self, entry):
        limit, who = self.quotas.of(entry.submitter), entry.submitter
        if limit.jobs is not None and self.jobs.get(who, 0) + 1 > limit.jobs:
            return m.QUOTA_JOBS, words(m.QUOTA_JOBS, who=who, quota=limit.jobs)
        used, asks = self.ranks.get(who, 0), entry.placement.ranks
        if limit.gpus is not None and used + asks > limit.gpus:
            return m.QUOTA_GPUS, words(m.QUOTA_GPUS, who=who, quota=limit.gpus, used=used, asks=asks)
        return None

    def say(self, entry, verdict, reason, text, victims=(), where=None):
        self.out.append(Decision(entry.id, len(self.out) + 1, verdict, reason, text, tuple(victims), where or {}))

    def admit(self, entry, where, reason, text, victims=()):
        self.pool.take(where)
        self.admitted.add(entry.id)
        self.busy.append(m.Running(entry.id, entry.submitter, entry.priority, entry.preemptible, self.now,
                                   entry.max_run_s, where, entry.placement.ranks))
        self._count(entry.submitter, 1, entry.placement.ranks)
        self.say(entry, m.PREEMPT if victims else m.ADMIT, reason, text, victims, where)

    def no_fit(self, entry):
        return self.pool.no_fit(entry.placement)

    def never_fits(self, entry):
        return m.NEVER_FITS, words(m.NEVER_FITS, needs=fit.needs_words(entry.placement),
                                   fit=fit.fit_words(entry.placement, self.pool.free))

    def one(self, entry):
        blocked = self.quota(entry)
        if blocked:
            return self.say(entry, m.WAIT, *blocked)
        where = self.pool.place(entry.placement)
        if self.first is None:
            if where is not None:
                return self.admit(entry, where, m.FITS, words(m.FITS, workers=fit.listed(where)))
            if entry.priority in self.preempting and self.preempt(entry):
                return None
            if not self.capacity.fits(entry.placement):  # it holds nobody up
                return self.say(entry, m.WAIT, *self.never_fits(entry))
            self.first = (entry, *self.shadow(entry))  # it could run one day: it holds the line
            self.ahead[entry.priority] = 1
            return self.say(entry, m.WAIT, m.NO_FIT, self.no_fit(entry))
        if where is None:
            if not self.capacity.fits(entry.placement):
                return self.say(entry, m.WAIT, *self.never_fits(entry))
            self.ahead[entry.priority] = self.ahead.get(entry.priority, 0) + 1
            return self.say(entry, m.WAIT, m.NO_FIT, self.no_fit(entry))
        first, shadow, spare = self.first
        if shadow is None:
            return self.say(entry, m.WAIT, m.BEHIND, words(m.BEHIND, ahead=self.ahead_words()))
        if entry.max_run_s is not None and self.now + entry.max_run_s <= shadow:
            why = f"its max_run_s ends before {first.id} could start"
            return self.admit(entry, where, m.BACKFILL, words(m.BACKFILL, first=first.id, why=why))
        both = _Pool({w: _least(res, spare.free.get(w, {})) for w, res in self.pool.free.items()})
        where = both.place(entry.placement)
        if where is None:
            return self.say(entry, m.WAIT, m.DELAYS, words(m.DELAYS, first=first.id))
        spare.take({w: res for w, res in where.items() if w in spare.free})
        why = f"it takes only what {first.id} leaves when it starts"
        return self.admit(entry, where, m.BACKFILL, words(m.BACKFILL, first=first.id, why=why))

    def ahead_words(self):
        parts = [(n, c) for c in reversed(m.CLASSES) if (n := self.ahead.get(c))]
        first = f"{parts[0][0]} job{'s' if parts[0][0] != 1 else ''} of class {parts[0][1]}"
        return ", ".join([first, *(f"{n} of class {c}" for n, c in parts[1:])])

    def shadow(self, entry):
        """(the earliest time entry could start, a _Pool of what it leaves then), from the busy jobs' ends; (None,
        None) when no end makes room for it (a job without max_run_s never ends for this)."""
        ends = sorted((job.end_s, job.id, job) for job in self.busy if job.end_s is not None)
        free = dict(self.pool.free)
        for index, (end, _, job) in enumerate(ends):
            free = _give(free, job.holds)
            if index + 1 < len(ends) and ends[index + 1][0] == end:
                continue  # jobs ending at once free their resources together
            where = fit.place(entry.placement, free)
            if where is not None:
                return max(end, self.now), _Pool(fit.take(free, where))
        return None, None

    def preempt(self, entry):
        victims = choose_victims(entry, [job for job in self.busy if job.id not in self.admitted], self.pool.free)
        if not victims:
            return False
        for job in victims:
            self.pool.give(job.holds)
            self._count(job.submitter, -1, -job.ranks)
        gone = {job.id for job in victims}
        self.busy = [job for job in self.busy if job.id not in gone]
        where = self.pool.place(entry.placement)
        named = ", ".join(f"{job.id} ({job.priority}, {job.submitter})" for job in victims)
        self.admit(entry, where, m.PREEMPTS, words(m.PREEMPTS, victims=named, needs=fit.needs_words(entry.placement)),
                   [job.id for job in victims])
        return True


def _give(free, holds):
    """free plus what a job holds, on the workers free lists (a cordoned worker's stays out)."""
    return {w: fit.plus(res, holds[w]) if w in holds else res for w, res in free.items()}


def _least(a, b):
    return {name: min(a.get(name, 0), b.get(name, 0)) for name in {*a, *b}}


def choose_victims(entry, running, free):
    """The running jobs whose release makes entry's placement fit: only preemptible ones of a strictly lower class;
    the fewest, then the lowest classes, then the youngest. () when none, or when releasing every candidate would
    still not make it fit."""
    rank = m.RANK[entry.priority]
    candidates = sorted((job for job in running
                         if job.preemptible and m.RANK[job.priority] < rank and job.holds),
                        key=lambda job: (m.RANK[job.priority], -job.started_s, job.id))
    if not candidates:
        return ()

    def fits(jobs):
        out = free
        for job in jobs:
            out = _give(out, job.holds)
        return fit.place(entry.placement, out) is not None

    if not fits(candidates):
        return ()
    for size in range(1, EXACT_VICTIMS + 1):
        for combo in itertools.combinations(candidates[:EXACT_CANDIDATES], size):
            if fits(combo):
                return combo
    chosen = []
    for job in candidates:
        chosen.append(job)
        if fits(chosen):
            break
    for job in reversed(list(chosen)):  # spare each victim the gang does not need after all
        if fits([j for j in chosen if j is not job]):
            chosen.remove(job)
    return tuple(chosen)


def decide(entries, running, workers, now, quotas=None, used=None, preempting=m.PREEMPTING_BY_DEFAULT):
    """Decision of every entry, in the queue's order. entries: Entry values; running: Running; workers: Worker;
    quotas: Quotas (None: no limits); used: {submitter: GPU-seconds} (share.gpu_seconds; None: nobody used any);
    preempting: the classes whose entries may preempt (model.preempting_of)."""
    decider = _Decider(running, workers, quotas, now, preempting)
    seen = {job.id for job in running}
    for entry in share.order(entries, used or {}):
        if entry.id in seen:
            decider.say(entry, m.WAIT, m.DUPLICATE, words(m.DUPLICATE, id=entry.id))
            continue
        seen.add(entry.id)
        decider.one(entry)
    return decider.out


def decide_data(entries, running, workers, now, quotas=None, usage=None, window_s=share.WINDOW_S, preempting=None):
    """decide over plain data (each item as model.py's readers take it), returning plain data: a list of
    Decision.to_dict(). A bad item raises QueueError naming it; usage: the records' uses for fair share; quotas and
    preempting: the site's ray_queue_quotas and ray_queue_preempting."""
    used = share.gpu_seconds([m.usage_of(u) for u in usage or ()], now, window_s)
    return [d.to_dict() for d in decide([m.entry_of(e) for e in entries], [m.running_of(r) for r in running],
                                        [m.worker_of(w) for w in workers], now, m.quotas_of(quotas), used,
                                        m.preempting_of(preempting))]
