"""One admission decision: order, gang fit, quotas, EASY backfill, preemption, and every reason's words; then
property checks over random small clusters (no worker over-committed, no job admitted twice, the first waiting job
never delayed, the same answer whatever order the data came in)."""

import random

import pytest
from ansible.module_utils.queue import admit, fit, model
from ansible.module_utils.queue.model import (
    ADMIT,
    BACKFILL,
    BEHIND,
    DELAYS,
    DUPLICATE,
    FITS,
    NEVER_FITS,
    NO_FIT,
    PREEMPT,
    PREEMPTS,
    QUOTA_GPUS,
    QUOTA_JOBS,
    WAIT,
)
from queue_helpers import entry, running, worker, workers

NOW = 1000


def decide(entries, run=(), nodes=None, quotas=None, used=None, preempting=model.PREEMPTING_BY_DEFAULT):
    nodes = workers(2) if nodes is None else nodes
    return {d.id: d for d in admit.decide(entries, list(run), nodes, NOW, quotas, used, preempting)}


def test_admitting_one_leaves_less_for_the_next_and_the_words_name_what_fits():
    got = decide([entry("a", enqueued=1), entry("b", enqueued=2), entry("c", nodes=2, enqueued=3)])
    assert (got["a"].verdict, got["a"].reason, got["a"].words) == (ADMIT, FITS, "fits now on 198.18.0.11")
    assert got["b"].where == {"198.18.0.12": {"GPU": 1}}
    assert (got["c"].verdict, got["c"].reason, got["c"].words) == (WAIT, NO_FIT, "needs 2 nodes of 1 GPU; none fits")
    assert [d.position for d in got.values()] == [1, 2, 3]


def test_the_gang_waits_whole_and_says_where_part_of_it_fits():
    nodes = [worker("198.18.0.11"), worker("198.18.0.12", gpus=0)]
    got = decide([entry("a", nodes=2)], nodes=nodes)
    assert got["a"].words == "needs 2 nodes of 1 GPU; 1 fits on 198.18.0.11, even with nothing running"
    assert got["a"].reason == NEVER_FITS


def test_a_cordoned_worker_takes_nothing():
    nodes = [worker("198.18.0.11", cordoned=True), worker("198.18.0.12")]
    got = decide([entry("a"), entry("b", enqueued=1)], nodes=nodes)
    assert got["a"].where == {"198.18.0.12": {"GPU": 1}} and got["b"].verdict == WAIT


def test_higher_class_first_then_fair_share():
    got = decide([entry("n", who="alice"), entry("h", who="bob", priority="high", enqueued=5),
                  entry("n2", who="carol", enqueued=3)], nodes=workers(1), used={"alice": 10.0})
    assert [d.id for d in sorted(got.values(), key=lambda d: d.position)] == ["h", "n2", "n"]
    assert got["h"].verdict == ADMIT and got["n2"].verdict == WAIT


def test_a_submitter_at_their_job_quota_waits_and_another_who_fits_starts():
    quotas = model.quotas_of({"default": {"jobs": 1}})
    got = decide([entry("a1", who="alice"), entry("a2", who="alice", enqueued=1), entry("b1", who="bob", enqueued=2)],
                 quotas=quotas)
    assert got["a1"].verdict == ADMIT and got["b1"].verdict == ADMIT
    assert (got["a2"].verdict, got["a2"].reason, got["a2"].words) == (WAIT, QUOTA_JOBS,
                                                                        "alice is at their quota of 1 jobs")


def test_gpu_quota_counts_running_jobs_ranks_and_a_users_own_limit():
    quotas = model.quotas_of({"default": {"gpus": 2}, "users": {"alice": {"gpus": 16}}})
    run = [running("r", {"198.18.0.11": {"GPU": 12}}, who="alice", priority="normal")]
    nodes = [worker("198.18.0.11", gpus=0), worker("198.18.0.12", gpus=8), worker("198.18.0.13", gpus=8)]
    got = decide([entry("a", who="alice", gpus=8), entry("b", who="bob", gpus=2, enqueued=1),
                  entry("c", who="carol", gpus=4, enqueued=2)], run=run, nodes=nodes, quotas=quotas)
    assert (got["a"].reason, got["a"].words) == (
        QUOTA_GPUS, "alice is at their quota of 16 GPUs (12 in use, this job asks 8)")
    assert got["b"].verdict == ADMIT
    assert got["c"].words == "carol is at their quota of 2 GPUs (0 in use, this job asks 4)"


def test_the_lab_counts_cpu_ranks_against_the_gpu_quota():
    quotas = model.quotas_of({"default": {"gpus": 1}})
    nodes = workers(2, gpus=0)
    lab = entry("a", nodes=2, gpus=0, per_node={"CPU": 2}, ranks_per_node=1)
    assert decide([lab], nodes=nodes, quotas=quotas)["a"].reason == QUOTA_GPUS


# ---------------------------------------------------------------- EASY backfill


def backfill_cluster():
    """w1 held until 2000 (max_run_s), w2 half held for ever, w3 free: a 2-node job of 2 GPUs can start at 2000, on
    w1 and w3, and leaves w2's free GPU unneeded."""
    nodes = [worker("w1", gpus=0), worker("w2", gpus=1), worker("w3", gpus=2)]
    run = [running("r1", {"w1": {"GPU": 2}}, priority="normal", started=0, max_run=2000),
           running("r2", {"w2": {"GPU": 1}}, priority="normal", started=0)]
    return nodes, run


def test_a_short_job_starts_ahead_only_when_its_max_run_s_ends_before_the_first_could_start():
    nodes, run = backfill_cluster()
    got = decide([entry("big", nodes=2, gpus=2), entry("short", gpus=2, enqueued=1, max_run=1000),
                  entry("long", gpus=2, enqueued=2, max_run=1001)], run=run, nodes=nodes)
    assert got["big"].reason == NO_FIT
    assert (got["short"].verdict, got["short"].reason, got["short"].words) == (
        ADMIT, BACKFILL, "starts ahead of big, which it does not delay (its max_run_s ends before big could start)")
    assert got["short"].where == {"w3": {"GPU": 2}}


def test_backfill_never_delays_the_first_waiting_job():
    nodes, run = backfill_cluster()
    got = decide([entry("big", nodes=2, gpus=2), entry("long", gpus=2, enqueued=1, max_run=1001),
                  entry("forever", gpus=2, enqueued=2)], run=run, nodes=nodes)
    assert (got["long"].verdict, got["long"].reason, got["long"].words) == (WAIT, DELAYS, "backfill would delay big")
    assert got["forever"].reason == DELAYS


def test_a_long_job_may_take_what_the_first_will_not_need_once():
    nodes, run = backfill_cluster()
    got = decide([entry("big", nodes=2, gpus=2), entry("spare", enqueued=1), entry("spare2", enqueued=2)],
                 run=run, nodes=nodes)
    assert (got["spare"].verdict, got["spare"].where) == (ADMIT, {"w2": {"GPU": 1}})
    assert "takes only what big leaves" in got["spare"].words
    # w3 is free now, but big needs it at 2000
    assert (got["spare2"].verdict, got["spare2"].reason) == (WAIT, DELAYS)


def test_when_the_first_jobs_start_cannot_be_known_nothing_passes_it():
    nodes = [worker("198.18.0.11", gpus=0), worker("198.18.0.12", gpus=2)]
    run = [running("r", {"198.18.0.11": {"GPU": 1}}, priority="normal")]  # no max_run_s: never ends
    got = decide([entry("h", nodes=2, priority="high"), entry("n", nodes=2, enqueued=1),
                  entry("n2", nodes=2, enqueued=2), entry("fits", enqueued=3, max_run=10)], run=run, nodes=nodes)
    assert (got["fits"].verdict, got["fits"].reason, got["fits"].words) == (
        WAIT, BEHIND, "behind 1 job of class high, 2 of class normal")


def test_a_job_that_could_never_fit_holds_nobody_up():
    got = decide([entry("huge", nodes=3), entry("small", enqueued=1, max_run=None)])
    assert got["huge"].words == "needs 3 nodes of 1 GPU; 2 fit on 198.18.0.11, 198.18.0.12, even with nothing running"
    assert got["huge"].reason == NEVER_FITS and got["small"].reason == FITS


# ---------------------------------------------------------------- preemption


def preemption_cluster():
    nodes = [worker("w1", gpus=0), worker("w2", gpus=0), worker("w3", gpus=0)]
    run = [running("old-low", {"w1": {"GPU": 1}}, started=100),
           running("young-low", {"w2": {"GPU": 1}}, started=500),
           running("normal-pre", {"w3": {"GPU": 1}}, priority="normal", preemptible=True, started=900)]
    return nodes, run


def test_a_higher_class_preempts_the_youngest_of_the_lowest_class_and_says_why():
    nodes, run = preemption_cluster()
    got = decide([entry("h", who="carol", priority="high")], run=run, nodes=nodes)
    assert (got["h"].verdict, got["h"].reason, got["h"].victims, got["h"].where) == (
        PREEMPT, PREEMPTS, ("young-low",), {"w2": {"GPU": 1}})
    assert got["h"].words == "preempts young-low (low, bob): their release makes 1 node of 1 GPU fit"


def test_fewest_victims_first():
    nodes = [worker("w1", gpus=0), worker("w2", gpus=0)]
    run = [running("a", {"w1": {"GPU": 1}}, started=900), running("b", {"w1": {"GPU": 1}}, started=800),
           running("big", {"w2": {"GPU": 2}}, started=100)]
    got = decide([entry("h", gpus=2, priority="high")], run=run, nodes=nodes)
    assert got["h"].victims == ("big",)


def test_a_normal_job_preempts_only_a_lower_class_and_only_the_preemptible():
    nodes, run = preemption_cluster()
    run = [running("n", {"w1": {"GPU": 1}}, priority="normal", preemptible=True, started=1),
           running("kept", {"w2": {"GPU": 1}}, priority="low", preemptible=False, started=1),
           running("l", {"w3": {"GPU": 1}}, priority="low", started=1)]
    both = ("normal", "high")  # a site that lets normal jobs preempt too
    got = decide([entry("x", nodes=1)], run=run, nodes=nodes, preempting=both)
    assert got["x"].victims == ("l",)
    got = decide([entry("x", nodes=2)], run=run, nodes=nodes, preempting=both)
    assert (got["x"].verdict, got["x"].victims) == (WAIT, ())  # freeing l alone cannot make 2 nodes


def test_by_default_a_normal_job_waits_for_a_low_one_and_a_high_one_preempts_it():
    """Issue 41's lab: a two-node low job runs; a one-node normal job waits with a reason naming the resources; a
    one-node high job preempts the low one, and the normal one runs beside it."""
    nodes = [worker("198.18.0.11", gpus=0), worker("198.18.0.12", gpus=0)]
    run = [running("low2", {"198.18.0.11": {"GPU": 1}, "198.18.0.12": {"GPU": 1}}, who="alice", started=10)]
    got = decide([entry("n", who="bob", enqueued=20)], run=run, nodes=nodes)
    assert (got["n"].verdict, got["n"].words) == (WAIT, "needs 1 node of 1 GPU; none fits")
    got = decide([entry("n", who="bob", enqueued=20), entry("h", who="carol", priority="high", enqueued=30)],
                 run=run, nodes=nodes)
    assert (got["h"].verdict, got["h"].victims, got["h"].position) == (PREEMPT, ("low2",), 1)
    assert (got["n"].verdict, got["n"].reason) == (ADMIT, FITS)
    assert set(got["n"].where) | set(got["h"].where) == {"198.18.0.11", "198.18.0.12"}


def test_whether_a_job_could_ever_fit_is_judged_on_what_the_workers_offer_when_ray_says():
    # Ray holds the whole worker for something no running job is known to hold (a driver whose node Ray has not
    # named yet): free and the known holds say "never", all it offers says "not now".
    busy = model.worker_of({"id": "w1", "free": {"GPU": 0, "CPU": 8}, "total": {"GPU": 1, "CPU": 8}})
    got = decide([entry("a")], nodes=[busy])
    assert (got["a"].verdict, got["a"].reason) == (WAIT, NO_FIT)
    unknown = model.worker_of({"id": "w1", "free": {"GPU": 0, "CPU": 8}})
    assert decide([entry("a")], nodes=[unknown])["a"].reason == NEVER_FITS
    small = model.worker_of({"id": "w1", "free": {"GPU": 0, "CPU": 8}, "total": {"GPU": 1, "CPU": 8}})
    assert decide([entry("a", gpus=2)], nodes=[small])["a"].reason == NEVER_FITS


def test_never_preempt_when_freeing_would_still_not_fit():
    nodes, run = preemption_cluster()
    got = decide([entry("h", nodes=3, gpus=2, priority="high")], run=run, nodes=nodes)
    assert (got["h"].verdict, got["h"].reason, got["h"].victims) == (WAIT, NEVER_FITS, ())


def test_victims_free_their_submitters_quota_and_jobs_after_see_the_rest():
    nodes = [worker("w1", gpus=0), worker("w2", gpus=1)]
    run = [running("v", {"w1": {"GPU": 1}}, who="alice", started=1)]
    quotas = model.quotas_of({"default": {"jobs": 1}})
    got = decide([entry("h", who="carol", nodes=2, priority="high"), entry("a2", who="alice", enqueued=1)],
                 run=run, nodes=nodes, quotas=quotas)
    # alice's one job is the victim: her next is within her quota, and waits for what h took
    assert got["h"].victims == ("v",) and got["h"].where == {"w1": {"GPU": 1}, "w2": {"GPU": 1}}
    assert (got["a2"].reason, got["a2"].words) == (NO_FIT, "needs 1 node of 1 GPU; none fits")
    # the quota is asked before preemption: a submitter at their quota preempts nobody
    got = decide([entry("h", who="alice", nodes=2, priority="high")], run=run, nodes=nodes, quotas=quotas)
    assert (got["h"].reason, got["h"].victims) == (QUOTA_JOBS, ())


def test_many_candidates_still_choose_a_minimal_set():
    nodes = [worker(f"w{i:02}", gpus=0) for i in range(20)]
    run = [running(f"r{i:02}", {f"w{i:02}": {"GPU": 1}}, started=i) for i in range(20)]
    got = decide([entry("h", nodes=5, priority="high")], run=run, nodes=nodes)
    assert len(got["h"].victims) == 5  # the youngest five, and no more
    assert set(got["h"].victims) == {f"r{i:02}" for i in range(15, 20)}


# ---------------------------------------------------------------- twice, and words


def test_a_job_is_never_admitted_twice():
    run = [running("a", {"198.18.0.11": {"GPU": 1}})]
    got = admit.decide([entry("a"), entry("b"), entry("b", enqueued=1)], run, workers(3), NOW)
    assert [(d.id, d.reason) for d in got] == [("a", DUPLICATE), ("b", FITS), ("b", DUPLICATE)]
    assert got[0].words == "a is already running or queued ahead"


def test_plain_data_in_and_out():
    out = admit.decide_data(
        [{"id": "a", "submitter": "alice", "enqueued_s": 1, "placement": {"per_node": {"GPU": 1}}}],
        [], [{"id": "w1", "free": {"GPU": 1}}], NOW, {"default": {"jobs": 3}},
        [{"submitter": "alice", "ranks": 1, "start_s": 0, "end_s": 10}])
    assert out == [{"id": "a", "position": 1, "verdict": ADMIT, "reason": FITS, "words": "fits now on w1",
                    "victims": [], "where": {"w1": {"GPU": 1}}}]
    with pytest.raises(model.QueueError, match="^queue entry field 'placement'"):
        admit.decide_data([{"id": "a", "submitter": "s", "enqueued_s": 1, "placement": 3}], [], [], NOW)


# ---------------------------------------------------------------- properties over random small clusters


def random_case(rng):
    nodes = [worker(f"w{i}", gpus=rng.randint(0, 4), cpus=rng.randint(0, 8), cordoned=rng.random() < 0.1,
                    worker_node=1) for i in range(rng.randint(1, 5))]
    run = []
    for i in range(rng.randint(0, 4)):
        w = rng.choice(nodes)
        run.append(running(f"r{i}", {w.id: {"GPU": rng.randint(0, 2), "CPU": rng.randint(0, 4)}}, who=rng.choice("abc"),
                           priority=rng.choice(model.CLASSES), started=rng.randint(0, 999),
                           max_run=rng.choice([None, rng.randint(1, 3000)])))
    entries = [entry(f"e{i % 9}", who=rng.choice("abc"), nodes=rng.randint(1, 3), priority=rng.choice(model.CLASSES),
                     enqueued=rng.randint(0, 999), max_run=rng.choice([None, rng.randint(1, 3000)]),
                     per_node={"GPU": rng.randint(0, 3), "CPU": rng.randint(1, 4)},
                     driver=rng.choice([None, {"worker_node": 1}]))
               for i in range(rng.randint(0, 12))]
    quotas = model.quotas_of({"default": {"jobs": rng.randint(1, 6), "gpus": rng.randint(1, 16)}})
    return nodes, run, entries, quotas, rng.choice([("high",), ("normal", "high")])


@pytest.mark.parametrize("seed", range(200))
def test_random_clusters_keep_every_rule(seed):
    rng = random.Random(seed)
    nodes, run, entries, quotas, preempting = random_case(rng)
    got = admit.decide(entries, run, nodes, NOW, quotas, None, preempting)
    assert len(got) == len(entries)
    started = [d for d in got if d.verdict in (ADMIT, PREEMPT)]
    assert len({d.id for d in started}) == len(started), "a job admitted twice"
    victims = [v for d in started for v in d.victims]
    assert len(set(victims)) == len(victims), "a job preempted twice"
    by_id = {job.id: job for job in run}
    free = {w.id: dict(w.free) for w in nodes if not w.cordoned}
    for v in victims:
        assert by_id[v].preemptible
        free = {w: fit.plus(res, by_id[v].holds[w]) if w in by_id[v].holds else res for w, res in free.items()}
    for d in started:
        assert len([w for w in d.where]) >= 1 and set(d.where) <= set(free), "placed on a cordoned or unknown worker"
        free = fit.take(free, d.where)
    assert all(amount >= 0 for res in free.values() for amount in res.values()), f"over-committed: {free}"
    for d in got:
        assert d.reason in model.REASON_WORDS and d.words and "\n" not in d.words
        assert d.verdict in model.VERDICTS and (d.verdict == PREEMPT) == bool(d.victims)
    # the same data in another order gives the same decision
    shuffled = admit.decide(rng.sample(entries, len(entries)), rng.sample(run, len(run)),
                            rng.sample(nodes, len(nodes)), NOW, quotas, None, preempting)
    assert [(d.id, d.verdict, d.words, d.where) for d in shuffled] == [(d.id, d.verdict, d.words, d.where) for d in got]


@pytest.mark.parametrize("seed", range(200))
def test_random_backfill_never_delays_the_first_waiting_job(seed):
    """Decide once; take the first job that waits for resources it could hold one day (NO_FIT, and not a victim's
    preemptor); its earliest start with what the decision admitted running must be no later than with the jobs
    admitted before it only (what it would have had with no backfill)."""
    rng = random.Random(seed)
    nodes, run, entries, _, preempting = random_case(rng)
    entries_by_id = {}
    for e in entries:
        entries_by_id.setdefault(e.id, e)
    entries = list(entries_by_id.values())
    got = admit.decide(entries, run, nodes, NOW, None, None, preempting)
    order = {d.id: d.position for d in got}
    entries_by_id = {}
    for e in entries:
        entries_by_id.setdefault(e.id, e)
    capacity = {w.id: dict(w.free) for w in nodes if not w.cordoned}
    for job in run:
        capacity = {w: fit.plus(res, job.holds[w]) if w in job.holds else res for w, res in capacity.items()}
    waiting = [d for d in got if d.reason == NO_FIT and fit.place(entries_by_id[d.id].placement, capacity)]
    if not waiting:
        return
    first = entries_by_id[waiting[0].id]

    def start(admitted):
        decider = admit._Decider(run, nodes, None, NOW)
        for d in admitted:
            e = entries_by_id[d.id]
            for v in d.victims:
                job = next(j for j in decider.busy if j.id == v)
                decider.pool.give(job.holds)
                decider.busy.remove(job)
            decider.admit(e, d.where, d.reason, d.words, d.victims)
        return decider.shadow(first)[0] if decider.pool.place(first.placement) is None else NOW

    before = [d for d in got if d.verdict != WAIT and order[d.id] < order[first.id]]
    every = [d for d in got if d.verdict != WAIT]
    no_backfill, with_backfill = start(before), start(every)
    if no_backfill is not None:
        assert with_backfill is not None and with_backfill <= no_backfill, (no_backfill, with_backfill)
