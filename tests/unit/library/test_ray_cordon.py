"""ray_cordon's pure parts: the worker named by -e host, and the jobs running on it."""

import importlib.util
import pathlib

import pytest
from ansible.module_utils.cordons import cordons

spec = importlib.util.spec_from_file_location(
    "ray_cordon", pathlib.Path(__file__).resolve().parents[3] / "library" / "ray_cordon.py")
ray_cordon = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ray_cordon)

WORKERS = {"lab-worker1": "198.18.0.11", "lab-worker2": "198.18.0.12"}


def test_host_by_name_or_address():
    assert ray_cordon.resolve("lab-worker2", WORKERS) == ("lab-worker2", "198.18.0.12")
    assert ray_cordon.resolve("198.18.0.11", WORKERS) == ("lab-worker1", "198.18.0.11")


@pytest.mark.parametrize("host", ["lab-head", "198.18.0.10", "{{ lookup('pipe', 'id') }}", ""])
def test_an_unknown_host_is_one_line_naming_it(host):
    with pytest.raises(cordons.CordonError, match=r"^host: .* is not a worker of this inventory \(one of: "
                                                  r"lab-worker1, lab-worker2\)$"):
        ray_cordon.resolve(host, WORKERS)


def test_busy_jobs_by_driver_or_actor():
    jobs = [{"submission_id": "a", "job_id": "01", "status": "RUNNING", "driver_node_id": "n1"},
            {"submission_id": "b", "job_id": "02", "status": "RUNNING", "driver_node_id": "n2"},
            {"submission_id": "c", "job_id": "03", "status": "SUCCEEDED", "driver_node_id": "n1"},
            {"submission_id": "d", "job_id": "04", "status": "PENDING", "driver_node_id": "n2"}]
    actors = [{"job_id": "02", "node_id": "n1", "state": "ALIVE"}, {"job_id": "04", "node_id": "n1", "state": "DEAD"}]
    assert ray_cordon.busy_jobs(jobs, actors, "n1") == ["a", "b"]


def test_only_the_matching_entry_is_read_as_an_address():
    workers = {"gpu1": "gpu1.cluster", "gpu2": "10.0.0.12"}  # Slurm's NodeAddr may be a name
    assert ray_cordon.resolve("10.0.0.12", workers) == ("gpu2", "10.0.0.12")
    with pytest.raises(cordons.CordonError, match=r"^host: gpu1's address: 'gpu1.cluster' is not an IP address$"):
        ray_cordon.resolve("gpu1", workers)


def test_a_cordon_outside_the_inventory_can_be_given_back():
    assert ray_cordon.resolve("192.168.50.11", WORKERS, {"192.168.50.11"}) == (None, "192.168.50.11")
