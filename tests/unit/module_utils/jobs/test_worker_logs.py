"""Issue 33, item 5: the job's own Ray workers' logs are copied into its record (logs/workers/<node_ip>/), bounded and
redacted, when its stacks are taken (a hang) and when it is finalised, so the blame can be read after the cluster is
gone; what Ray gives (an IP, a file name) is data, and a node that cannot be read is skipped and noted."""

import os

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.base.redaction import redact
from ansible.module_utils.jobs.evidence import stacks
from ansible.module_utils.jobs.evidence import worker_logs as wl
from ray_job_harness import HEAD, SECRET, SID, WORKER, RecordJob, make_spec, record, run

JOB = "07000000"
NODES = [{"node_id": "n-w1", "node_ip": "10.0.0.11", "state": "ALIVE"},
         {"node_id": "n-w2", "node_ip": "10.0.0.12", "state": "ALIVE"}]


def name(worker, pid, ext="out", job=JOB):
    """A worker log's name as Ray writes it: worker-<worker id, 56 hex>-<job id>-<pid>.<out|err>."""
    return f"worker-{worker * 56}-{job}-{pid}.{ext}"


class Client:
    """Ray's node table, actors and nodes' logs as the job's client serves them; `down`: nodes that do not answer."""

    def __init__(self, node_files, nodes=NODES, actor_nodes=("n-w1", "n-w2"), down=()):
        self.node_files, self.table, self.down = node_files, nodes, set(down)
        self.actor_nodes, self.asked, self.read = actor_nodes, [], []

    def nodes(self):
        return self.table

    def actors(self):
        return [{"node_id": n, "job_id": JOB} for n in self.actor_nodes] + [{"node_id": "n-other", "job_id": "0800"}]

    def worker_log_names(self, node_id, job_id):
        self.asked.append(node_id)
        if node_id in self.down:
            raise RuntimeError(f"Ray's log API: node {node_id} is not reachable")
        return list(self.node_files.get(node_id, {}))

    def worker_log_tail(self, node_id, log, lines, max_bytes):
        self.read.append((node_id, log))
        return self.node_files[node_id][log]  # whole: the copy bounds what it is given


@pytest.fixture
def job(tmp_path):
    made = RecordJob(str(tmp_path / "rec"), sid=SID)
    made.redact = lambda value: redact(value, (), extra_values=[SECRET])
    return made


def workers(job):
    return os.path.join(job.rec["dir"], "logs", "workers")


def read(job, *parts):
    with open(os.path.join(workers(job), *parts), encoding="utf-8") as handle:
        return handle.read()


def copied(job):
    """{relative path: text} of every file under logs/workers/."""
    found = {}
    for root, _, names in os.walk(workers(job)):
        for leaf in names:
            path = os.path.join(root, leaf)
            with open(path, encoding="utf-8") as handle:
                found[os.path.relpath(path, workers(job))] = handle.read()
    return found


def test_each_nodes_worker_logs_land_under_its_ip_redacted(job):
    job.client = Client({"n-w1": {name("a", 11): "rank 0 step 3\n", name("a", 11, "err"): f"key={SECRET}\nboom\n"},
                         "n-w2": {name("b", 12): "rank 1 step 3\n"}})
    result = wl.copy(job, "final", job_id=JOB)
    files = copied(job)
    assert set(files) == {f"10.0.0.11/{name('a', 11)}", f"10.0.0.11/{name('a', 11, 'err')}",
                          f"10.0.0.12/{name('b', 12)}", "README"}
    assert files[f"10.0.0.11/{name('a', 11, 'err')}"] == "key=<redacted>\nboom\n"
    assert not any(SECRET in text for text in files.values())
    assert sorted(job.client.asked) == ["n-w1", "n-w2"]  # the job's actors' nodes, not another job's
    assert [c[0] for c in result["hosts"]["10.0.0.12"]["copied"]] == [name("b", 12)]
    assert "Last copy: " in files["README"] and "(final); Ray's job id: 07000000" in files["README"]
    assert f"10.0.0.12/ (node n-w2):\n  copied {name('b', 12)} (14 bytes)\n" in files["README"]


def test_a_huge_log_keeps_only_its_tail_within_the_bounds(job):
    many = "".join(f"line {i} " + "x" * 200 + "\n" for i in range(wl.TAIL_LINES * 2))
    one_long = "y" * (wl.TAIL_BYTES * 3)
    job.client = Client({"n-w1": {name("a", 1): many, name("a", 2): one_long + "\nlast words\n"}})
    wl.copy(job, "final", job_id=JOB)
    kept = read(job, "10.0.0.11", name("a", 1))
    assert len(kept.encode()) <= wl.TAIL_BYTES and kept.endswith(f"line {wl.TAIL_LINES * 2 - 1} {'x' * 200}\n")
    assert kept.startswith("line ")  # a line the byte cut split is dropped whole
    assert len(kept.splitlines()) < wl.TAIL_LINES
    assert read(job, "10.0.0.11", name("a", 2)) == "last words\n"
    assert f"copied {name('a', 1)} ({len(kept.encode())} bytes, its tail)" in read(job, "README")


def test_lines_alone_are_cut_to_the_last_tail_lines():
    text, cut = wl.tail("".join(f"{i}\n" for i in range(wl.TAIL_LINES + 5)))
    assert cut and text.splitlines() == [str(i) for i in range(5, wl.TAIL_LINES + 5)]
    assert wl.tail("short\n") == ("short\n", False)


def test_the_file_cap_takes_each_nodes_files_in_turn_and_counts_earlier_copies(job, monkeypatch):
    monkeypatch.setattr(wl, "MAX_FILES", 3)
    job.client = Client({"n-w1": {name("a", i): f"w1 {i}\n" for i in range(1, 5)},
                         "n-w2": {name("b", i): f"w2 {i}\n" for i in range(1, 5)}})
    wl.copy(job, "stacks", job_id=JOB)
    files = copied(job)
    assert sorted(f for f in files if f != "README") == [f"10.0.0.11/{name('a', 1)}", f"10.0.0.11/{name('a', 2)}",
                                                         f"10.0.0.12/{name('b', 1)}"]
    assert f"skipped: {name('b', 2)}: the job's cap of 3 files is reached" in files["README"]
    # A second copy overwrites the files it has and adds none past the cap.
    job.client.node_files["n-w1"][name("a", 1)] = "w1 1\nnewer\n"
    wl.copy(job, "final", job_id=JOB)
    assert read(job, "10.0.0.11", name("a", 1)) == "w1 1\nnewer\n"
    assert len(copied(job)) == 4


def test_the_byte_cap_skips_what_would_pass_it(job, monkeypatch):
    monkeypatch.setattr(wl, "MAX_BYTES", 25)
    job.client = Client({"n-w1": {name("a", 1): "x" * 20 + "\n", name("a", 2): "y" * 20 + "\n"}})
    wl.copy(job, "final", job_id=JOB)
    assert set(copied(job)) == {f"10.0.0.11/{name('a', 1)}", "README"}
    assert f"{name('a', 2)}: the job's cap of 25 bytes is reached" in read(job, "README")


@pytest.mark.parametrize(("given", "folder"), [
    ("10.0.0.11", "10.0.0.11"), ("fd00:0::1", "fd00::1"), ("../../etc", None), ("10.0.0.1/x", None),
    ("fe80::1%eth0/..", None), ("10.0.0.256", None), ("", None), (None, None), (168427531, None)])
def test_an_ip_from_ray_is_a_folder_only_when_it_is_an_address(given, folder):
    assert wl.folder_ip(given) == folder


def test_a_bad_ip_or_file_name_from_ray_is_skipped_never_a_path(job, tmp_path):
    nodes = [{"node_id": "n-w1", "node_ip": "10.0.0.11", "state": "ALIVE"},
             {"node_id": "n-w2", "node_ip": "../../../outside", "state": "ALIVE"}]
    bad = ["../../../outside.out", f"worker-{'a' * 56}-{JOB}-1.out/../../x.out", f"worker-zz-{JOB}-1.out",
           f"worker-{'a' * 56}-{JOB}-1.log", name("c", 3, job="08000000"), f"{name('a', 1)}\n"]
    job.client = Client({"n-w1": {name("a", 1): "good\n", **{b: "bad\n" for b in bad}}, "n-w2": {name("b", 2): "x\n"}},
                        nodes=nodes)
    wl.copy(job, "final", job_id=JOB)
    assert set(copied(job)) == {f"10.0.0.11/{name('a', 1)}", "README"}
    assert job.client.read == [("n-w1", name("a", 1))]
    assert not (tmp_path / "outside.out").exists() and not (tmp_path / "outside").exists()
    readme = read(job, "README")
    assert f"  skipped: {len(bad)} names Ray listed that are not a worker log of this job\n" in readme
    assert "Note: node n-w2: skipped, its IP from Ray is not an address\n" in readme


def test_a_dead_node_is_skipped_and_noted_and_what_an_earlier_copy_got_from_it_is_kept(job):
    job.client = Client({"n-w1": {name("a", 1): "w1 at the hang\n"}, "n-w2": {name("b", 2): "w2 at the hang\n"}})
    wl.copy(job, "stacks", job_id=JOB)
    # Then w2's node died (its agent does not answer) and w1 wrote more: the final copy.
    job.client.down.add("n-w2")
    job.client.node_files["n-w1"][name("a", 1)] = "w1 at the hang\nw1 at the end\n"
    result = wl.copy(job, "final", job_id=JOB)
    assert read(job, "10.0.0.11", name("a", 1)) == "w1 at the hang\nw1 at the end\n"
    assert read(job, "10.0.0.12", name("b", 2)) == "w2 at the hang\n"
    readme = read(job, "README")
    assert ("10.0.0.12/ (node n-w2):\n  kept from an earlier copy: " + name("b", 2)
            + "\n  skipped: node n-w2 cannot be read: Ray's log API: node n-w2 is not reachable\n") in readme
    assert result["hosts"]["10.0.0.12"]["kept"] == [name("b", 2)]


def test_a_node_ray_lists_as_dead_is_not_asked(job):
    nodes = [NODES[0], dict(NODES[1], state="DEAD")]
    job.client = Client({"n-w1": {name("a", 1): "x\n"}, "n-w2": {name("b", 2): "y\n"}}, nodes=nodes)
    wl.copy(job, "final", job_id=JOB)
    assert job.client.asked == ["n-w1"]
    assert "10.0.0.12/ (node n-w2):\n  skipped: node n-w2 is DEAD in Ray's node table\n" in read(job, "README")


def test_a_symlink_in_the_record_is_never_followed(job, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, workers(job))
    job.client = Client({"n-w1": {name("a", 1): "x\n"}})
    assert wl.copy(job, "final", job_id=JOB) is None
    assert list(outside.iterdir()) == []


def test_a_copy_that_fails_never_raises_and_says_why(job):
    job.client = Client({})
    job.client.nodes = lambda: (_ for _ in ()).throw(RuntimeError(f"dashboard down, token {SECRET}"))
    assert wl.copy(job, "final", job_id=JOB) is None
    readme = read(job, "README")
    assert "Note: no copy: dashboard down, token <redacted>\n" in readme and SECRET not in readme
    assert wl.copy(job, "final", job_id="../x") is None  # a job id is hex, or nothing is asked


# ------------------------------------------------------------------ through the ray_job module: the hang, the end

W2 = dict(WORKER, node_id="n-w2", node_ip="10.0.0.12", node_name="w2")
STEPS = "".join(f"step:{s} - train/loss:{5 - s / 10} - train/lr:0.001\n" for s in range(1, 4))
PROCS = [{"role": "actor", "name": "TrainingWorker", "pid": 11, "node_ip": "10.0.0.11", "node_id": "n-w1",
          "state": "ALIVE"},
         {"role": "actor", "name": "TrainingWorker", "pid": 12, "node_ip": "10.0.0.12", "node_id": "n-w2",
          "state": "ALIVE"}]


@pytest.fixture
def copies(monkeypatch):
    """What took each copy (its `why`), the real copy run each time."""
    calls, real = [], wl.copy

    def spy(job, why, *args, **kwargs):
        calls.append(why)
        return real(job, why, *args, **kwargs)

    monkeypatch.setattr(wl, "copy", spy)
    return calls


def start(capsys, ray, ray_config, **spec):
    code, _ = run(capsys, spec=make_spec(ray_config, submission_id=SID, **spec), ray_config=ray_config)
    assert code == 0
    ray.set(SID, "RUNNING", driver_node_id="n-w1", job_id=JOB, start_time=int(ray.clock.now * 1000))


def record_file(ray_config, *parts):
    with open(os.path.join(record(ray_config), "logs", "workers", *parts), encoding="utf-8") as handle:
        return handle.read()


def test_a_hang_copies_the_logs_with_its_stacks_and_the_end_copies_them_again(ray, ray_config, capsys, monkeypatch,
                                                                                copies):
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER, W2])
    monkeypatch.setattr(stacks, "processes", lambda job: [dict(p) for p in PROCS])
    monkeypatch.setattr(stacks, "_take", lambda job, proc: dict(proc, text=None, why="timed out after 20s: stopped?"))
    start(capsys, ray, ray_config, timeouts={"stall_s": 300, "max_run_s": None}, retries={"max": 1, "on": ["hung"]})
    ray.logs[SID] = STEPS
    ray.node_files = {"n-w1": {name("a", 11): f"rank 0 at step 3 {SECRET}\n"}, "n-w2": {name("b", 12): "rank 1\n"}}
    assert run(capsys, action="watch", ray_config=ray_config)[0] == 0
    assert copies == []  # not hung yet: nothing copied
    ray.clock.now += 400
    ray.node_files["n-w1"][name("a", 11)] += "rank 0 still waiting\n"
    code, out = run(capsys, action="watch", ray_config=ray_config)
    assert code == 0 and out["finalized"] == [SID]
    assert copies == ["stacks", "final"]
    assert record_file(ray_config, "10.0.0.11", name("a", 11)) == "rank 0 at step 3 <redacted>\nrank 0 still waiting\n"
    assert record_file(ray_config, "10.0.0.12", name("b", 12)) == "rank 1\n"
    assert "(final); Ray's job id: 07000000" in record_file(ray_config, "README")


def test_a_job_that_succeeded_has_its_workers_logs_in_its_record(ray, ray_config, capsys, copies):
    start(capsys, ray, ray_config)
    ray.logs[SID] = STEPS
    ray.node_files = {"n-w1": {name("a", 11): "done\n"}}
    ray.set(SID, "SUCCEEDED", end_time=int(ray.clock.now * 1000))
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "SUCCEEDED"
    assert copies == ["final"]
    assert record_file(ray_config, "10.0.0.11", name("a", 11)) == "done\n"


def test_a_copy_that_breaks_never_stops_the_finalize(ray, ray_config, capsys, monkeypatch):
    monkeypatch.setattr(wl, "_copy", lambda *args: 1 / 0)
    monkeypatch.setattr(wl, "_write", lambda *args: 1 / 0)
    start(capsys, ray, ray_config)
    ray.set(SID, "FAILED", end_time=int(ray.clock.now * 1000), message="boom")
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED" and out["done"]


# ------------------------------------------------------------------ Ray's state API, as the client asks it


class Streamed:
    """A streamed answer of Ray's log API, in chunks."""

    def __init__(self, chunks):
        self.chunks = chunks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def iter_content(self, chunk_size):
        yield from self.chunks


def test_a_tail_is_kept_to_its_last_bytes_as_it_streams(monkeypatch):
    chunks = [b"a" * 1000, b"b" * 1000, b"\n", b"the end\n"]
    asked = []
    monkeypatch.setattr(rc, "_log_file", lambda url, params, timeout: asked.append(params) or Streamed(chunks))
    assert rc.node_log_tail("http://h:8265", "n-w1", name("a", 1), 50, max_bytes=12) == "bbb\nthe end\n"
    assert asked[0]["filename"] == name("a", 1) and asked[0]["lines"] == 50
    assert rc.node_log_tail("http://h:8265", "n-w1", name("a", 1), 50) == "a" * 1000 + "b" * 1000 + "\nthe end\n"


def test_the_client_lists_only_the_jobs_worker_logs_of_a_node(monkeypatch):
    import requests
    from ansible.module_utils.jobs.record.client import JobClient

    urls = []

    class Listed:
        def raise_for_status(self):
            return None

        def json(self):
            listing = {"worker_out": [name("a", 1)], "worker_err": [name("a", 1, "err")], "bad": "not a list"}
            return {"result": True, "data": {"result": listing}}

    monkeypatch.setattr(requests, "get", lambda url, **kwargs: urls.append(url) or Listed())
    client = JobClient("http://h:8265", None, client=object())
    assert client.worker_log_names("n-w1", JOB) == [name("a", 1), name("a", 1, "err")]
    assert urls == ["http://h:8265/api/v0/logs?node_id=n-w1&timeout=10&glob=worker-%2A-07000000-%2A"]
