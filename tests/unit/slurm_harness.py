"""Slurm's answers for the tests: real scontrol output from the lab (tests/unit/data/slurm/) and a fake scontrol
that gives them, shared by plugin_utils/test_slurm.py and inventory_plugins/test_slurm_allocation_inventory.py."""

import os

from plugin_utils import PROJECT_ROOT

DATA = os.path.join(PROJECT_ROOT, "tests", "unit", "data", "slurm")

JOB = "59544061"
HOSTNAMES = {"lab-worker[1-2]": "lab-worker1\nlab-worker2\n", "a[1-2]": "a1\na2\n", "a1": "a1\n", "a2": "a2\n",
             "lab-worker1": "lab-worker1\n"}


def read(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as handle:
        return handle.read()


def fake_scontrol(job_text, node_text=None):
    calls = []

    def run(*args):
        calls.append(args)
        if args[:2] == ("show", "job"):
            return job_text
        if args[:2] == ("show", "hostnames"):
            return HOSTNAMES[args[2]]
        if args[:2] == ("show", "node"):
            return node_text if node_text is not None else read("show_node_o.txt")
        raise AssertionError(args)
    run.calls = calls
    return run
