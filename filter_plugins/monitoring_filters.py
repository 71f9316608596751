"""Filters of the cluster owner's services (roles/ray_tensorboard, roles/ray_prometheus): their
settings checked (plugin_utils/monitoring.py) before any file is written or any command run."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import monitoring

from ansible.module_utils.node import doctor  # isort: skip


def _checked(build, value):
    try:
        return build(value)
    except monitoring.MonitoringSettingError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ray_tensorboard_settings(settings):
    return _checked(monitoring.tensorboard, settings)


def ray_prometheus_settings(settings):
    return _checked(monitoring.prometheus, settings)


def ray_prometheus_config(settings):
    """prometheus.yml's content (a dict) from ray_prometheus_settings' result."""
    return monitoring.prometheus_config(settings)


def ray_prometheus_rules(settings):
    """rules.yml's content (a dict) from ray_prometheus_settings' result."""
    return monitoring.alert_rules(settings)


def ray_monitoring_node_ips(hosts, hostvars):
    """The cluster address of each host (ray_node_ip, else ansible_host, else its name), as the nodes announce it."""
    ips = []
    for host in hosts:
        found = hostvars[host]
        ips.append(str(found.get("ray_node_ip") or found.get("ansible_host") or host))
    return ips


def ray_prometheus_target_hosts(answer):
    """The hosts Prometheus scrapes or is about to (monitoring.target_hosts: a target, none of them down)."""
    return sorted(monitoring.target_hosts(answer))


def ray_prometheus_caught_up(answer, ray_nodes):
    """Whether Prometheus's /api/v1/targets answer (its JSON) has a target on every ALIVE node of Ray's list and none of
    them down (doctor.prometheus_check finds no problem): a node that joined seconds ago shows within about 10 s (Ray
    rewrites its discovery file every 5 s; Prometheus reads it as often)."""
    if not isinstance(answer, dict):
        return False
    check = {"url": "", "host": "", "sd_file": "", "answer": {"status": 200, "json": answer}}
    _, problems = doctor.prometheus_check(check, ray_nodes or [], {})
    return not problems


def ray_doctor_prometheus(report, prometheus, ray_nodes, hosts, hostvars):
    """doctor.yml's report (ray_doctor_report's {lines, problems}) with Prometheus's line and problems added
    (doctor.prometheus_check: every ALIVE Ray node a target, every target up); prometheus None: unchanged."""
    names = {}
    for host in hosts:
        found = hostvars[host].get("doctor_facts") or {}
        if found.get("node_ip"):
            names[found["node_ip"]] = host
    line, problems = doctor.prometheus_check(prometheus, ray_nodes, names)
    return {**report, "lines": list(report.get("lines") or []) + ([line] if line else []),
            "problems": list(report.get("problems") or []) + problems}


def ray_doctor_services(report, host, checks):
    """doctor.yml's report with the head's services' line and problems added (doctor.services_check)."""
    line, problems = doctor.services_check(host, checks or {})
    return {**report, "lines": list(report.get("lines") or []) + ([line] if line else []),
            "problems": list(report.get("problems") or []) + problems}


class FilterModule:
    def filters(self):
        return {"ray_tensorboard_settings": ray_tensorboard_settings,
                "ray_prometheus_settings": ray_prometheus_settings,
                "ray_prometheus_config": ray_prometheus_config, "ray_prometheus_rules": ray_prometheus_rules,
                "ray_monitoring_node_ips": ray_monitoring_node_ips,
                "ray_prometheus_target_hosts": ray_prometheus_target_hosts,
                "ray_prometheus_caught_up": ray_prometheus_caught_up, "ray_doctor_prometheus": ray_doctor_prometheus,
                "ray_doctor_services": ray_doctor_services}
