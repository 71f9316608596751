"""Small builders of the queue's models for its tests (plain data through the models' own readers)."""

from ansible.module_utils.queue import model


def entry(sid, who="alice", nodes=1, gpus=1, priority=None, enqueued=0, max_run=None, driver=None, **extra):
    data = {"id": sid, "submitter": who, "enqueued_s": enqueued,
            "placement": {"nodes": nodes, "per_node": {"GPU": gpus} if gpus else {}, **extra}}
    if driver:
        data["placement"]["driver"] = driver
    if priority:
        data["priority"] = priority
    if max_run is not None:
        data["max_run_s"] = max_run
    return model.entry_of(data)


def worker(wid, gpus=1, cpus=8, cordoned=False, **other):
    return model.worker_of({"id": wid, "free": {"GPU": gpus, "CPU": cpus, **other}, "cordoned": cordoned})


def running(sid, holds, who="bob", priority="low", started=0, max_run=None, preemptible=None):
    data = {"id": sid, "submitter": who, "priority": priority, "started_s": started, "holds": holds}
    if max_run is not None:
        data["max_run_s"] = max_run
    if preemptible is not None:
        data["preemptible"] = preemptible
    return model.running_of(data)


def workers(n, gpus=1, cpus=8):
    return [worker(f"198.18.0.{11 + i}", gpus, cpus) for i in range(n)]
