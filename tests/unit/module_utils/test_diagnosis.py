"""module_utils/verl/diagnosis.py: each known failure, from a log excerpt as Ray, torch and verl print it."""

import pytest
from ansible.module_utils.verl import diagnosis

EXCERPTS = {
    "slurm_allocation_ending": ("status.json", "SLURM_ALLOCATION_ENDING\nJOB_SUPERVISOR_ACTOR_DIED\n"),
    "head_restarted": ("status.json", "HEAD_RESTARTED\nRay's head started again at 2026-11-23T10:00:00Z\n"),
    "hung": ("status.json", "HUNG\nno new step for 900 s\n"),
    "cuda_oom": ("worker_err.log", ("Traceback (most recent call last):\n"
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                 "capacity of 79.15 GiB of which 1.50 GiB is free.\n")),
    "oom_kill": ("driver.log", ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
                 "memory.\nMemory on the node (IP: 10.0.0.11, ID: 5f1c) where the task (actor ID: 9a, "
                 "name=WorkerDict.__init__) was running was 30.12GB / 31.00GB (0.971613), which exceeds the memory "
                 "usage threshold of 0.95.\n")),
    "hydra_config": ("driver.log", ("Could not override 'trainer.save_frq'.\nTo append to your config use "
                     "+trainer.save_frq=2\nKey 'save_frq' is not in struct\n    full_key: trainer.save_frq\n")),
    "import_error": ("driver.log", ("  File \"<frozen runpy>\", line 189, in _run_module_as_main\n"
                     "ModuleNotFoundError: No module named 'verl.trainer.sft_trainer_rayy'\n")),
    "version_mismatch": ("driver.log", ("RuntimeError: Version mismatch: The cluster was started with:\n"
                         "    Ray: 2.60.0\n    Python: 3.11.7\nThis process on node 10.0.0.11 was started with:\n"
                         "    Ray: 2.59.0\n")),
    "runtime_env_too_large": ("driver.log", ("ValueError: Package size (120.50MiB) exceeds the maximum size of "
                              "100.00MiB. You can exclude large files using the 'excludes' option\n")),
    "nccl_gloo": ("worker_err.log", ("RuntimeError: Gloo connectFullMesh failed with "
                  "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\n")),
    "node_died": ("driver.log", ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this "
                  "task.\n\tclass_name: WorkerDict\nThe actor is dead because its node has died. Node Id: 3e1f\n")),
    "resources_pending": ("driver.log", ("Error: No available node types can fulfill resource request "
                          "{'no_such_gpu': 1.0}. Add suitable node types to this cluster to resolve this issue.\n")),
}


@pytest.mark.parametrize("kind", sorted(EXCERPTS))
def test_each_signature_on_a_real_excerpt(kind):
    name, text = EXCERPTS[kind]
    found = diagnosis.classify([("noise.log", "INFO all good\n"), (name, text)])
    assert found["kind"] == kind and found["evidence"]["file"] == name and found["hint"]
    assert "\n" not in found["evidence"]["line"]


def test_every_signature_has_an_excerpt():
    assert sorted(EXCERPTS) == sorted(diagnosis.KINDS)


def test_nccl_error_text():
    text = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
            "unhandled system error\nncclSystemError: System call (e.g. socket, malloc) failed\n")
    assert diagnosis.classify([("w.log", text)])["kind"] == "nccl_gloo"


def test_status_fields_count_and_the_specific_cause_wins():
    found = diagnosis.classify([], {"state": "FAILED", "reason": "PENDING_TIMEOUT", "message": "Job has not started"})
    assert found["kind"] == "resources_pending"
    assert found["evidence"] == {"file": "status.json", "line": "PENDING_TIMEOUT"}
    # A CUDA OOM killed the worker; the supervisor then reports a dead actor: the OOM is the cause.
    found = diagnosis.classify([EXCERPTS["cuda_oom"]], {"error_type": "JOB_SUPERVISOR_ACTOR_DIED"})
    assert found["kind"] == "cuda_oom"
    assert diagnosis.classify([], {"error_type": "JOB_SUPERVISOR_ACTOR_DIED"})["kind"] == "node_died"


def test_nothing_known_is_none_and_long_lines_are_cut():
    assert diagnosis.classify([("driver.log", "ValueError: something else\n")], {"message": "exit code 1"}) is None
    found = diagnosis.classify([("d.log", "ModuleNotFoundError: No module named 'x'" + " y" * 400)])
    assert len(found["evidence"]["line"]) == diagnosis.EVIDENCE_WIDTH


def test_the_log_is_the_evidence_when_rays_message_repeats_it():
    line = "ModuleNotFoundError: No module named 'x'"
    found = diagnosis.classify([("logs/driver.log", line + "\n")], {"message": "exit code 1, last logs:\n" + line})
    assert found["evidence"] == {"file": "logs/driver.log", "line": line}


def test_a_raylet_killed_under_a_job_is_a_dead_node():
    line = ("\x1b[33m(raylet)\x1b[0m Raylet is terminated. Termination is unexpected. Possible reasons include: "
            "(1) SIGKILL by the user or system OOM killer")
    assert diagnosis.classify([("logs/driver.log", "Epoch 2/4:   0%|\n" + line + "\n")])["kind"] == "node_died"


def test_ray_260s_oom_killer_is_known_and_a_dead_peers_node_wins_over_gloos_closed_connection():
    """Ray 2.55 on says "N worker(s) were killed" (its raylet.out has no exception name). gloo in torch 2.13 names the
    peer of a closed connection (transport/tcp/pair.cc); the rank whose peer's node died logs it too, so it is no kind
    of its own and the dead node is the diagnosis."""
    oom = ("(raylet) 1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: "
           "10.0.0.13, ID: cc33) was 30.12GB used / 31.00GB limit (0.971613)")
    assert diagnosis.classify([("debug/logs/cc33-raylet.out", oom)])["kind"] == "oom_kill"
    gloo = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
            "by peer rank 1 ([10.0.0.12]:41187). This is typically caused by a remote worker crashing.")
    assert diagnosis.classify([("debug/logs/w.err", gloo)]) is None
    died = "ray.exceptions.NodeDiedError: node 10.0.0.12 has been marked dead"
    assert diagnosis.classify([("debug/logs/w.err", gloo + "\n" + died)])["kind"] == "node_died"
    assert diagnosis.classify([("d", "redis: Connection closed by peer")]) is None
