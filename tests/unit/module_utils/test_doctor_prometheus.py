"""doctor.prometheus_check: Prometheus scrapes every ALIVE Ray node; a node missing or down is one line with a fix."""

import copy

import pytest
from ansible.module_utils.node import doctor
from doctor_filters import ray_doctor_report
from monitoring_filters import ray_doctor_prometheus

NODES = [{"node_ip": "10.0.0.10", "state": "ALIVE", "is_head_node": True, "resources_total": {}},
         {"node_ip": "10.0.0.11", "state": "ALIVE", "is_head_node": False, "resources_total": {"GPU": 4}},
         {"node_ip": "10.0.0.12", "state": "ALIVE", "is_head_node": False, "resources_total": {"GPU": 4}},
         {"node_ip": "10.0.0.13", "state": "DEAD", "is_head_node": False, "resources_total": {}}]
NAMES = {"10.0.0.10": "head", "10.0.0.11": "w1", "10.0.0.12": "w2"}


def target(instance, health="up", error="", job="ray"):
    return {"labels": {"job": job, "instance": instance}, "health": health, "lastError": error,
            "scrapeUrl": f"http://{instance}/metrics"}


def answer(*targets, status=200):
    return {"status": status, "json": {"status": "success", "data": {"activeTargets": list(targets)}}}


HEALTHY = answer(target("10.0.0.10:42669"), target("10.0.0.10:44217"), target("10.0.0.10:44227"),
                 target("10.0.0.11:36905"), target("10.0.0.12:38765"))
PROMETHEUS = {"url": "http://10.0.0.10:9090", "host": "head", "sd_file": "/tmp/ray/prom_metrics_service_discovery.json",
              "answer": HEALTHY}


def test_every_alive_node_scraped_is_one_line_and_no_problem():
    line, problems = doctor.prometheus_check(PROMETHEUS, NODES, NAMES)
    assert problems == []
    assert line == "Prometheus http://10.0.0.10:9090: 3 of 3 ALIVE nodes have targets, 5 targets up"


def test_a_site_without_prometheus_is_not_checked():
    assert doctor.prometheus_check(None, NODES, NAMES) == (None, [])


def test_a_missing_node_is_named_with_the_file_prometheus_reads():
    found = copy.deepcopy(PROMETHEUS)
    found["answer"]["json"]["data"]["activeTargets"].pop()
    line, problems = doctor.prometheus_check(found, NODES, NAMES)
    assert "2 of 3 ALIVE nodes" in line and len(problems) == 1
    assert problems[0].startswith("w2: prometheus: no target for this ALIVE node")
    assert "/tmp/ray/prom_metrics_service_discovery.json" in problems[0]


def test_a_down_target_is_named_with_prometheus_own_error_on_one_line():
    found = dict(PROMETHEUS, answer=answer(target("10.0.0.10:42669"), target("10.0.0.11:36905"),
                                           target("10.0.0.12:38765", "down", "Get \"http://10.0.0.12:38765/metrics\":\n"
                                                  "dial tcp: connection refused")))
    _, problems = doctor.prometheus_check(found, NODES, NAMES)
    assert len(problems) == 1 and problems[0].startswith("w2: prometheus: target 10.0.0.12:38765 is down (Get ")
    assert "\n" not in problems[0] and "re-run up.yml" in problems[0]


def test_a_target_not_scraped_yet_is_said_not_blamed():
    found = dict(PROMETHEUS, answer=answer(target("10.0.0.10:42669"), target("10.0.0.11:36905", "unknown"),
                                           target("10.0.0.12:38765")))
    line, problems = doctor.prometheus_check(found, NODES, NAMES)
    assert problems == [] and line.endswith("2 targets up, 1 not scraped yet")


@pytest.mark.parametrize("registered", [
    {"status": -1, "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111]>"},
    {"status": 503, "json": None},
    {"skipped": True},
])
def test_prometheus_not_answering_is_one_problem_with_its_fix(registered):
    line, problems = doctor.prometheus_check(dict(PROMETHEUS, answer=registered), NODES, NAMES)
    assert line.endswith("NOT ANSWERING") and len(problems) == 1
    assert problems[0].startswith("head: prometheus: http://10.0.0.10:9090 does not answer") and "up.yml" in problems[0]


def test_other_jobs_and_dead_nodes_do_not_count():
    found = dict(PROMETHEUS, answer=answer(target("10.0.0.10:1"), target("10.0.0.11:1"), target("10.0.0.12:9100",
                                                                                                  job="node")))
    _, problems = doctor.prometheus_check(found, NODES, NAMES)
    assert [p.split(":")[0] for p in problems] == ["w2"]


def test_the_report_carries_the_prometheus_line_and_problems(facts):
    hostvars = {host: {"doctor_facts": found, "doctor_probes": {"probes": found["probes"]}}
                for host, found in facts.items()}
    hostvars["head"]["doctor_control_clock"] = 1000.0
    hosts = sorted(facts)
    report = ray_doctor_report(hosts, hostvars, "head", NODES[:3])
    assert report["problems"] == []
    judged = ray_doctor_prometheus(report, PROMETHEUS, NODES[:3], hosts, hostvars)
    assert judged["lines"][:-1] == report["lines"] and judged["problems"] == []
    assert judged["lines"][-1].startswith("Prometheus http://10.0.0.10:9090: 3 of 3")
    missing = copy.deepcopy(PROMETHEUS)
    missing["answer"]["json"]["data"]["activeTargets"] = []
    judged = ray_doctor_prometheus(report, missing, NODES[:3], hosts, hostvars)
    assert sorted(p.split(":")[0] for p in judged["problems"]) == ["head", "w1", "w2"]
    assert ray_doctor_prometheus(report, None, NODES[:3], hosts, hostvars) == report


def test_the_old_address_of_a_node_just_restarted_is_no_problem():
    # Ray lists the replaced node ALIVE beside the new one until its health checks fail; Prometheus scrapes both.
    nodes = [*NODES, {"node_ip": "10.0.0.12", "state": "ALIVE", "is_head_node": False, "resources_total": {"GPU": 4}}]
    found = dict(PROMETHEUS, answer=answer(target("10.0.0.10:42669"), target("10.0.0.11:36905"),
                                           target("10.0.0.12:38765", "down", "connection refused"),
                                           target("10.0.0.12:40001", "unknown")))
    line, problems = doctor.prometheus_check(found, nodes, NAMES)
    assert problems == [] and "3 of 3 ALIVE nodes have targets" in line and "2 not scraped yet" in line
    _, problems = doctor.prometheus_check(found, NODES, NAMES)  # one ALIVE node there: its down target is named
    assert len(problems) == 1 and "10.0.0.12:38765 is down" in problems[0]
