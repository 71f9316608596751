"""Gang fit: the whole placement on distinct workers, best fit, deterministic; and its words."""

import random

from ansible.module_utils.queue import fit
from queue_helpers import entry


def free(**workers):
    return {name: dict(res) for name, res in workers.items()}


def test_the_gang_lands_on_distinct_workers_or_not_at_all():
    two = entry("a", nodes=2, gpus=2).placement
    assert fit.place(two, free(w1={"GPU": 4}, w2={"GPU": 0})) is None  # 4 GPUs on one worker are not 2 nodes
    assert fit.place(two, free(w1={"GPU": 4}, w2={"GPU": 2})) == {"w1": {"GPU": 2}, "w2": {"GPU": 2}}


def test_best_fit_leaves_the_big_worker_whole_and_ties_go_by_id():
    one = entry("a", gpus=1).placement
    assert fit.place(one, free(w1={"GPU": 8}, w2={"GPU": 1}, w3={"GPU": 2})) == {"w2": {"GPU": 1}}
    assert fit.place(one, free(w2={"GPU": 1}, w1={"GPU": 1})) == {"w1": {"GPU": 1}}


def test_the_driver_goes_beside_the_gang_or_anywhere_it_fits():
    job = entry("a", nodes=1, gpus=1, driver={"worker_node": 1}).placement
    assert fit.place(job, free(w1={"GPU": 1, "worker_node": 1})) == {"w1": {"GPU": 1, "worker_node": 1}}
    # the best-fit gang (w1, fewest GPUs left) would take the worker the driver cannot leave: the driver goes first
    got = fit.place(job, free(w1={"GPU": 1, "worker_node": 0}, w2={"GPU": 2, "worker_node": 1}))
    assert got == {"w1": {"GPU": 1}, "w2": {"worker_node": 1}}
    two = entry("b", nodes=2, gpus=1, driver={"worker_node": 1}).placement
    assert fit.place(two, free(w1={"GPU": 1}, w2={"GPU": 1})) is None  # no worker holds the driver
    only = entry("c", gpus=0, driver={"CPU": 1}).placement
    assert fit.place(only, free(w1={"CPU": 0}, w2={"CPU": 2})) == {"w2": {"CPU": 1}}


def test_take_subtracts_only_where_it_went():
    before = free(w1={"GPU": 2, "CPU": 8}, w2={"GPU": 1})
    after = fit.take(before, {"w1": {"GPU": 1}})
    assert after == {"w1": {"GPU": 1, "CPU": 8}, "w2": {"GPU": 1}} and before["w1"]["GPU"] == 2


def test_words():
    job = entry("a", nodes=2, gpus=1, driver={"worker_node": 1}, ranks_per_node=1).placement
    assert fit.needs_words(job) == "2 nodes of 1 GPU and a driver of 1 worker_node"
    assert fit.needs_words(entry("b", gpus=0, driver={"CPU": 0.5}).placement) == "a driver of 0.5 CPU"
    assert fit.resources_words({"worker_node": 1, "CPU": 8, "GPU": 2}) == "2 GPU, 8 CPU, 1 worker_node"
    assert fit.fit_words(job, free(w1={"GPU": 1}, w2={"GPU": 0})) == "1 fits on w1"
    assert fit.fit_words(job, free(w1={"GPU": 0})) == "none fits"
    assert fit.fit_words(job, {}) == "no uncordoned worker"
    assert fit.fit_words(job, free(w1={"GPU": 1}, w2={"GPU": 1})) == "2 fit, but not the driver beside them"
    many = free(**{f"w{i:02}": {"GPU": 1} for i in range(9)})
    assert fit.fit_words(entry("c", nodes=10).placement, many) == (
        "9 fit on w00, w01, w02, w03, w04, w05 and 3 more")


def test_fits_says_what_place_finds_over_random_workers():
    rng = random.Random(7)
    for _ in range(2000):
        workers = {f"w{i}": {"GPU": rng.randint(0, 3), "CPU": rng.randint(0, 4), "worker_node": rng.randint(0, 1)}
                   for i in range(rng.randint(0, 5))}
        gpus, driver = rng.randint(0, 2), rng.choice([None, {"worker_node": 1}, {"worker_node": 1, "CPU": 2}])
        if not gpus and not driver:
            continue
        job = entry("a", nodes=rng.randint(1, 4), gpus=gpus, driver=driver).placement
        where = fit.place(job, workers)
        assert fit.fits(job, workers) == (where is not None), (job, workers)
        if where is not None:
            assert all(v >= 0 for res in fit.take(workers, where).values() for v in res.values())
