"""The cluster owner's services (roles/ray_tensorboard, roles/ray_prometheus, library/ray_daemon.py): off for a site,
on in the lab, started last by up.yml behind their switches, stopped by down.yml, and a unit that needs no quoting."""

import os

import yaml

from plugin_utils import PROJECT_ROOT, monitoring

from ansible.module_utils.daemons import ctl as daemon_ctl  # isort: skip

ROOT = PROJECT_ROOT


def load(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_both_are_off_for_a_site_and_on_in_the_lab():
    defaults = load("roles", "project_defaults", "defaults", "main.yml")
    assert defaults["ray_tensorboard_enabled"] is False and defaults["ray_prometheus_enabled"] is False
    assert (defaults["ray_tensorboard_port"], defaults["ray_prometheus_port"]) == (6006, 9090)
    # Where the dashboard listens, never every interface.
    assert "ray_dashboard_host" in defaults["ray_monitoring_ip"] and "0.0.0.0" in defaults["ray_monitoring_ip"]
    lab = load("inventory", "lab", "group_vars", "ray_cluster.yml")
    assert lab["ray_tensorboard_enabled"] is True and lab["ray_prometheus_enabled"] is True
    for site in ("example", "example-slurm"):
        folder = os.path.join(ROOT, "inventory", site, "group_vars")
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            found = load("inventory", site, "group_vars", name) or {}
            assert not found.get("ray_tensorboard_enabled") and not found.get("ray_prometheus_enabled"), name


def test_tensorboard_comes_from_the_nodes_venv_and_serves_the_layouts_jobs():
    defaults = load("roles", "ray_tensorboard", "defaults", "main.yml")
    assert defaults["ray_tensorboard_executable"] == "{{ ray_python | dirname }}/tensorboard"
    assert defaults["ray_tensorboard_bind"] == defaults_prometheus()["ray_prometheus_bind"] == "{{ ray_monitoring_ip }}"
    with open(os.path.join(ROOT, "roles", "ray_tensorboard", "tasks", "main.yml"), encoding="utf-8") as handle:
        tasks = handle.read()
    assert "'shared_root': shared_root_path" in tasks and "/jobs" not in tasks


def defaults_prometheus():
    return load("roles", "ray_prometheus", "defaults", "main.yml")


def test_up_starts_them_with_the_head_behind_their_switches_and_down_stops_them_first():
    up = load("playbooks", "up.yml")
    names = [play["name"] for play in up]
    head = next(play for play in up if play["hosts"] == "ray_head" and play["roles"][-1]["role"] == "ray_head")
    # Started with the head, before the workers: Prometheus reads Ray's discovery file while they start.
    assert names.index(head["name"]) < names.index("Start the workers")
    [services] = head["tasks"]
    started = {t["ansible.builtin.include_role"]["name"]: t["when"] for t in services["block"]}
    assert started == {"ray_tensorboard": "ray_tensorboard_enabled | bool",
                       "ray_prometheus": "ray_prometheus_enabled | bool"}
    # A service that fails does not stop the workers' start, the readiness gate or the reconcile: its failure is kept
    # (rescue) and fails the run in the last play, after ray_ready, before Prometheus's targets are asked for.
    [kept] = services["rescue"]
    assert "up_monitoring_failure" in kept["ansible.builtin.set_fact"]
    assert up[-1]["roles"][-1]["role"] == "ray_ready"
    failed, targets = up[-1]["tasks"][:2]
    assert failed["ansible.builtin.fail"]["msg"] == "{{ up_monitoring_failure }}"
    assert failed["when"] == "up_monitoring_failure is defined"
    assert targets["ansible.builtin.include_role"] == {"name": "ray_prometheus", "tasks_from": "targets"}
    assert targets["when"] == "ray_prometheus_enabled | bool"
    down = load("playbooks", "down.yml")
    stopped = {t["ansible.builtin.include_role"]["name"]: t["ansible.builtin.include_role"]["tasks_from"]
               for t in down[0]["tasks"]}
    assert stopped == {"ray_tensorboard": "stop.yml", "ray_prometheus": "stop.yml"}


def test_the_unit_runs_the_checked_command_as_its_user():
    argv = monitoring.prometheus({
        "bind": "10.0.0.10", "port": 9090, "retention": "15d", "dir": "/var/lib/p",
        "config_dir": "/etc/ray-verl/prometheus", "sd_file": "/tmp/ray/sd.json", "scrape_interval": "15s",
        "user": "prometheus", "service": "ray-verl-prometheus", "log": "/run/ray-verl/p.log", "expected_nodes": 3,
        "object_store_full": 0.9})["argv"]
    unit = daemon_ctl.unit({"name": "ray-verl-prometheus", "description": "Prometheus; rm -rf / %h",
                            "user": "prometheus", "group": "", "notify": False, "argv": argv})
    lines = unit.splitlines()
    assert "User=prometheus" in lines and "Type=simple" in lines and not any(x.startswith("Group=") for x in lines)
    assert f"ExecStart={' '.join(argv)}" in lines
    assert lines[lines.index("[Service]") - 4] == "Description=Prometheus rm -rf / h (ray-verl)"
    assert "ExecStart=/usr/bin/prometheus --config.file=/etc/ray-verl/prometheus/prometheus.yml" in unit
