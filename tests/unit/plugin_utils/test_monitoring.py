"""plugin_utils/monitoring.py: the services' settings checked before they reach a command line, a unit or Prometheus's
files; Prometheus's configuration and alert rules (checked and exercised with Debian's promtool when it is here)."""

import re
import shutil
import subprocess

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from monitoring_filters import (
    ray_monitoring_node_ips,
    ray_prometheus_caught_up,
    ray_prometheus_settings,
    ray_prometheus_target_hosts,
    ray_tensorboard_settings,
)

from plugin_utils import monitoring

from ansible.module_utils.daemons import ctl as daemon_ctl  # isort: skip

TENSORBOARD = {"bind": "198.18.0.10", "port": 6006, "executable": "/opt/ray-verl/venv/bin/tensorboard",
               "shared_root": "/private", "reload_s": 60, "scalar_samples": 500, "load_fast": "true",
               "user": "nobody", "service": "ray-verl-tensorboard", "log": "/run/ray-verl/tensorboard.log"}
PROMETHEUS = {"bind": "198.18.0.10", "port": "9090", "retention": "15d", "retention_size": "", "dir": "/var/lib/p",
              "config_dir": "/etc/ray-verl/prometheus", "sd_file": "/tmp/ray/prom_metrics_service_discovery.json",
              "scrape_interval": "15s", "user": "prometheus", "service": "ray-verl-prometheus",
              "log": "/run/ray-verl/prometheus.log", "expected_nodes": "3", "object_store_full": "0.9",
              "alertmanagers": []}
PROMTOOL = shutil.which("promtool")


def test_tensorboard_serves_every_run_of_the_shared_root_cheaply_on_one_address():
    out = monitoring.tensorboard(dict(TENSORBOARD, port="6006"))
    assert out["logdir"] == "/private/jobs"
    assert out["argv"] == ["/opt/ray-verl/venv/bin/tensorboard", "--logdir=/private/jobs", "--host=198.18.0.10",
                           "--port=6006", "--load_fast=true", "--reload_interval=60",
                           "--samples_per_plugin=scalars=500"]


def test_prometheus_listens_on_one_address_with_the_sites_retention():
    out = monitoring.prometheus(dict(PROMETHEUS, retention_size="50GB", alertmanagers=["10.0.0.5:9093"]))
    assert out["url"] == "http://198.18.0.10:9090" and out["expected_nodes"] == 3 and out["object_store_full"] == 0.9
    assert out["argv"] == ["/usr/bin/prometheus", "--config.file=/etc/ray-verl/prometheus/prometheus.yml",
                           "--storage.tsdb.path=/var/lib/p", "--storage.tsdb.retention.time=15d",
                           "--web.listen-address=198.18.0.10:9090", "--web.external-url=http://198.18.0.10:9090/",
                           "--storage.tsdb.retention.size=50GB"]
    config = monitoring.prometheus_config(out)
    assert config["scrape_configs"] == [{"job_name": "ray", "file_sd_configs": [
        {"files": ["/tmp/ray/prom_metrics_service_discovery.json"], "refresh_interval": "5s"}]}]
    assert config["rule_files"] == ["/etc/ray-verl/prometheus/rules.yml"]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["10.0.0.5:9093"]


@pytest.mark.parametrize("duration", ["15d", "12h", "1w2d", "90m", "1y", "500ms", "1h30m"])
def test_prometheus_durations_pass(duration):
    assert monitoring.prometheus(dict(PROMETHEUS, retention=duration))["retention"] == duration


@pytest.mark.parametrize("build, base, field, value, setting", [
    (monitoring.tensorboard, TENSORBOARD, "bind", "0.0.0.0", "ray_tensorboard_bind"),
    (monitoring.tensorboard, TENSORBOARD, "bind", "head --bind_all", "ray_tensorboard_bind"),
    (monitoring.tensorboard, TENSORBOARD, "port", "6006 --bind_all", "ray_tensorboard_port"),
    (monitoring.tensorboard, TENSORBOARD, "executable", "/opt/venv/bin/tensorboard --inspect",
     "ray_tensorboard_executable"),
    (monitoring.tensorboard, TENSORBOARD, "shared_root", "/private/../etc", "shared_root_path"),
    (monitoring.tensorboard, TENSORBOARD, "reload_s", 0, "ray_tensorboard_reload_s"),
    (monitoring.tensorboard, TENSORBOARD, "scalar_samples", "all", "ray_tensorboard_scalar_samples"),
    (monitoring.tensorboard, TENSORBOARD, "load_fast", "maybe", "ray_tensorboard_load_fast"),
    (monitoring.tensorboard, TENSORBOARD, "user", "root\nExecStartPre=/bin/sh", "ray_tensorboard_user"),
    (monitoring.tensorboard, TENSORBOARD, "service", "../x", "ray_tensorboard_service_name"),
    (monitoring.tensorboard, TENSORBOARD, "log", "tb.log", "ray_tensorboard_log_path"),
    (monitoring.prometheus, PROMETHEUS, "bind", "::", "ray_prometheus_bind"),
    (monitoring.prometheus, PROMETHEUS, "port", 0, "ray_prometheus_port"),
    (monitoring.prometheus, PROMETHEUS, "retention", "15d --web.enable-admin-api", "ray_prometheus_retention"),
    (monitoring.prometheus, PROMETHEUS, "retention", "0d", "ray_prometheus_retention"),
    (monitoring.prometheus, PROMETHEUS, "retention", "15 days", "ray_prometheus_retention"),
    (monitoring.prometheus, PROMETHEUS, "retention", "", "ray_prometheus_retention"),
    (monitoring.prometheus, PROMETHEUS, "retention_size", "50 GB", "ray_prometheus_retention_size"),
    (monitoring.prometheus, PROMETHEUS, "dir", "/var/lib/p\n--web.enable-lifecycle", "ray_prometheus_dir"),
    (monitoring.prometheus, PROMETHEUS, "config_dir", "etc", "ray_prometheus_config_dir"),
    (monitoring.prometheus, PROMETHEUS, "sd_file", "/tmp/ray/*.json", "ray_prometheus_sd_file"),
    (monitoring.prometheus, PROMETHEUS, "scrape_interval", "30", "ray_prometheus_scrape_interval"),
    (monitoring.prometheus, PROMETHEUS, "user", "", "ray_prometheus_user"),
    (monitoring.prometheus, PROMETHEUS, "expected_nodes", "three", "ray_prometheus_expected_nodes"),
    (monitoring.prometheus, PROMETHEUS, "object_store_full", "95%", "ray_prometheus_object_store_full"),
    (monitoring.prometheus, PROMETHEUS, "object_store_full", 1.5, "ray_prometheus_object_store_full"),
    (monitoring.prometheus, PROMETHEUS, "alertmanagers", ["am:9093\n- x"], "ray_prometheus_alertmanagers"),
    (monitoring.prometheus, PROMETHEUS, "alertmanagers", ["am"], "ray_prometheus_alertmanagers"),
])
def test_a_bad_setting_is_one_line_naming_it_not_its_value(build, base, field, value, setting):
    with pytest.raises(monitoring.MonitoringSettingError) as exc:
        build(dict(base, **{field: value}))
    message = str(exc.value)
    assert message.startswith(f"{setting}: ") and "\n" not in message
    assert str(value) not in message or str(value) in ("0", "")


def test_the_filters_say_it_as_an_ansible_error():
    with pytest.raises(AnsibleFilterError, match="^ray_tensorboard_bind: "):
        ray_tensorboard_settings(dict(TENSORBOARD, bind="0.0.0.0"))
    with pytest.raises(AnsibleFilterError, match="^ray_prometheus_retention: "):
        ray_prometheus_settings(dict(PROMETHEUS, retention="forever"))


def test_each_services_command_needs_no_quoting_in_a_unit():
    # library/ray_daemon.py refuses any other word (module_utils/daemon_ctl.WORD); the settings never make one.
    for argv in (monitoring.tensorboard(TENSORBOARD)["argv"], monitoring.prometheus(PROMETHEUS)["argv"]):
        assert all(daemon_ctl.WORD.fullmatch(word) for word in argv), argv
    assert monitoring.tensorboard(TENSORBOARD)["argv"][0] == "/opt/ray-verl/venv/bin/tensorboard"


def test_the_node_ips_and_the_target_hosts_compare():
    hostvars = {"head": {"ansible_host": "10.0.0.10"}, "w1": {"ansible_host": "10.0.0.11", "ray_node_ip": "10.1.0.11"},
                "w2": {}}
    assert ray_monitoring_node_ips(["head", "w1", "w2"], hostvars) == ["10.0.0.10", "10.1.0.11", "w2"]
    answer = {"status": "success", "data": {"activeTargets": [
        {"labels": {"job": "ray", "instance": "10.0.0.10:44217"}, "health": "up"},
        {"labels": {"job": "ray", "instance": "10.0.0.11:36905"}, "health": "unknown"},
        {"labels": {"job": "other", "instance": "10.0.0.12:9100"}, "health": "up"}]}}
    assert ray_prometheus_target_hosts(answer) == ["10.0.0.10", "10.0.0.11"]
    assert ray_prometheus_target_hosts({}) == []
    # A restarted node: its old address stays, down, until Ray's discovery file drops it.
    answer["data"]["activeTargets"].append({"labels": {"job": "ray", "instance": "10.0.0.11:40001"}, "health": "down"})
    assert ray_prometheus_target_hosts(answer) == ["10.0.0.10"]


def test_doctor_waits_until_prometheus_has_caught_up_with_rays_nodes():
    def node(ip, state="ALIVE"):
        return {"node_ip": ip, "state": state}

    def targets(*rows):
        return {"status": "success", "data": {"activeTargets": [
            {"labels": {"job": "ray", "instance": f"{ip}:{port}"}, "health": health} for ip, port, health in rows]}}

    nodes = [node("10.0.0.10"), node("10.0.0.11"), node("10.0.0.12", "DEAD")]
    # The worker joined seconds ago: no target yet.
    assert not ray_prometheus_caught_up(targets(("10.0.0.10", 1, "up")), nodes)
    # Listed, not scraped yet: caught up (a scrape follows); a dead node needs none.
    assert ray_prometheus_caught_up(targets(("10.0.0.10", 1, "up"), ("10.0.0.11", 2, "unknown")), nodes)
    # A target that is down is a problem, unless Ray still lists the node's replaced self beside the new one.
    down = targets(("10.0.0.10", 1, "up"), ("10.0.0.11", 2, "up"), ("10.0.0.11", 3, "down"))
    assert not ray_prometheus_caught_up(down, nodes)
    assert ray_prometheus_caught_up(down, nodes + [node("10.0.0.11")])
    # No answer to judge, or no node Ray lists: nothing to wait for.
    assert not ray_prometheus_caught_up(None, nodes) and not ray_prometheus_caught_up("<html>", nodes)
    assert ray_prometheus_caught_up(targets(), [])


def rules_file(tmp_path, **change):
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(monitoring.alert_rules(monitoring.prometheus(dict(PROMETHEUS, **change)))))
    return path


def test_the_rules_name_real_ray_metrics_and_every_alert_says_what_to_do(tmp_path):
    rules = monitoring.alert_rules(monitoring.prometheus(PROMETHEUS))["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == ["RayMetricsTargetDown", "RayNodeLost", "RayWorkerRayletDown",
                                           "RayClusterSmallerThanInventory", "RayObjectStoreNearFull"]
    metrics = set(re.findall(r"\b(ray_[a-z_]+|up)\b", " ".join(r["expr"] for r in rules)))
    assert metrics == {"up", "ray_node_mem_total", "ray_resources", "ray_object_store_used_memory",
                       "ray_object_store_available_memory"}
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["description"]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus package) is not installed")
def test_promtool_accepts_the_rules_and_the_configuration(tmp_path):
    rules = rules_file(tmp_path)
    proc = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0 and "SUCCESS: 5 rules found" in proc.stdout, proc.stdout + proc.stderr
    settings = monitoring.prometheus(dict(PROMETHEUS, config_dir=str(tmp_path), alertmanagers=["10.0.0.5:9093"]))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(monitoring.prometheus_config(settings)))
    proc = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _expanded(rule, labels, value):
    """The rule's annotations as Prometheus expands them for one alert (the few template forms the rules use)."""
    def expand(text):
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        text = text.replace("{{ $value | humanizePercentage }}", f"{float(value) * 100:g}%")
        return text.replace("{{ $value }}", value)
    return {key: expand(text) for key, text in rule["annotations"].items()}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus package) is not installed")
def test_promtool_fires_each_alert_on_what_a_lost_node_and_a_full_store_look_like(tmp_path):
    rules_file(tmp_path)
    by_name = {r["alert"]: r for r in monitoring.alert_rules(monitoring.prometheus(PROMETHEUS))["groups"][0]["rules"]}
    node = 'ray_node_mem_total{{ip="{0}",RayNodeType="{1}",instance="{0}:1",job="ray"}}'
    raylet = 'ray_resources{{Name="worker_node",NodeAddress="{0}",State="AVAILABLE",instance="{0}:1",job="ray"}}'
    store = 'ray_object_store_{1}_memory{{NodeAddress="{0}",instance="{0}:1",job="ray"}}'
    series = [
        # The head and worker 1 report all along; worker 2 is lost at 10m (its target leaves: stale markers).
        (node.format("10.0.0.10", "head"), "1x30"), (node.format("10.0.0.11", "worker"), "1x30"),
        (node.format("10.0.0.12", "worker"), "1x10 stale"),
        (raylet.format("10.0.0.11"), "1x30"), (raylet.format("10.0.0.12"), "1x10 stale"),
        # Worker 1's object store is 95% full; a target still listed does not answer.
        (store.format("10.0.0.11", "used"), "95x30"), (store.format("10.0.0.11", "available"), "5x30"),
        ('up{instance="10.0.0.13:2",job="ray"}', "0x30")]

    def alert(name, labels, value):
        return {"exp_labels": dict(labels, severity=by_name[name]["labels"]["severity"]),
                "exp_annotations": _expanded(by_name[name], labels, value)}

    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "RayNodeLost",
             "exp_alerts": [alert("RayNodeLost", {"ip": "10.0.0.12"}, "1")]},
            {"eval_time": "20m", "alertname": "RayWorkerRayletDown",
             "exp_alerts": [alert("RayWorkerRayletDown", {"NodeAddress": "10.0.0.12"}, "1")]},
            {"eval_time": "20m", "alertname": "RayClusterSmallerThanInventory",
             "exp_alerts": [alert("RayClusterSmallerThanInventory", {}, "2")]},
            {"eval_time": "20m", "alertname": "RayObjectStoreNearFull",
             "exp_alerts": [alert("RayObjectStoreNearFull", {"NodeAddress": "10.0.0.11"}, "0.95")]},
            {"eval_time": "20m", "alertname": "RayMetricsTargetDown",
             "exp_alerts": [alert("RayMetricsTargetDown", {"instance": "10.0.0.13:2", "job": "ray"}, "0")]},
            # Before the loss (and within each alert's `for`), nothing fires.
            {"eval_time": "9m", "alertname": "RayNodeLost", "exp_alerts": []},
            {"eval_time": "11m", "alertname": "RayWorkerRayletDown", "exp_alerts": []},
            {"eval_time": "9m", "alertname": "RayClusterSmallerThanInventory", "exp_alerts": []},
        ]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
