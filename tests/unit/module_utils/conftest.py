"""Fixtures the tests of module_utils/ share: a healthy cluster's facts for the doctor (test_doctor.py,
test_doctor_prometheus.py, test_doctor_store.py)."""

import pytest
from doctor_helpers import node


@pytest.fixture
def facts():
    found = {"head": node("head", "10.0.0.10"), "w1": node("w1", "10.0.0.11"), "w2": node("w2", "10.0.0.12")}
    probes = {h: f["probe"] for h, f in found.items()}
    for f in found.values():
        f["probes"] = dict(probes)
    return found
