"""The cluster owner's services (roles/ray_tensorboard, roles/ray_prometheus): their settings
checked before they reach a command line, a systemd unit or Prometheus's files, and what is made of them.

Every value may come from -e or a site file: a space or a newline in one would add an argument to a command run as
root, a line to a unit, or a rule to Prometheus's configuration. Each is checked against a strict rule; an error is
one line naming the setting and the rule, never the value.
"""

import ipaddress
import posixpath
import re

from ansible.module_utils.base import conventions
from ansible.module_utils.node import doctor

from plugin_utils import settings
from plugin_utils.settings import SettingError

# Prometheus's durations (model.ParseDuration): units from the largest down, each at most once.
_DURATION = re.compile(r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?")
_SIZE = re.compile(r"[1-9][0-9]{0,8}(?:B|KB|MB|GB|TB|PB)")
LOAD_FAST = ("true", "false", "auto")
# Prometheus's job of Ray's targets (the label Ray's discovery file gives them; doctor.yml looks for it too).
RAY_JOB = doctor.PROMETHEUS_JOB
# The rules use the metrics every Ray node's dashboard agent serves, read off a live Ray 2.60 node (never guessed):
# ray_node_mem_total{ip, RayNodeType} per node, ray_resources{NodeAddress, Name} from each raylet, and
# ray_object_store_used_memory and ray_object_store_available_memory{NodeAddress} from each raylet.
# Ray writes every ALIVE node's metrics address to this file in its session directory every 5 s (reporter_head's
# PrometheusServiceDiscoveryWriter, ray/_private/metrics_agent.py); the one in Ray's temp dir is a link to it.
SD_FILE_NAME = "prom_metrics_service_discovery.json"


# Its errors are settings.SettingError (one line naming the setting and its rule, never the value).
MonitoringSettingError = SettingError
_path, _int, _name = settings.path, settings.whole, settings.name


def _bind(field, value):
    try:
        address = ipaddress.ip_address(str(value))
    except ValueError:
        raise MonitoringSettingError(field, "must be an IP address (the head's cluster address, where the "
                                     "dashboard listens)") from None
    if address.is_unspecified:
        raise MonitoringSettingError(field, "must be one address (the head's cluster address), not every interface")
    return str(address)


def _duration(field, value, allow_zero=False):
    value = str(value)
    if not value or not _DURATION.fullmatch(value) or (not allow_zero and not re.search(r"[1-9]", value)):
        raise MonitoringSettingError(field, "must be a Prometheus duration such as 15d, 12h or 1w2d (units y w d h "
                                     "m s ms, largest first)")
    return value


def tensorboard(settings):
    """The validated settings of roles/ray_tensorboard, with its command line (`argv`)."""
    out = {"bind": _bind("ray_tensorboard_bind", settings["bind"]),
           "port": _int("ray_tensorboard_port", settings["port"], 1, 65535),
           "executable": _path("ray_tensorboard_executable", settings["executable"]),
           "shared_root": _path("shared_root_path", settings["shared_root"]),
           "reload_s": _int("ray_tensorboard_reload_s", settings["reload_s"], 1, 86400),
           "scalar_samples": _int("ray_tensorboard_scalar_samples", settings["scalar_samples"], 10, 100000),
           "user": _name("ray_tensorboard_user", settings["user"]),
           "service": _name("ray_tensorboard_service_name", settings["service"]),
           "log": _path("ray_tensorboard_log_path", settings["log"])}
    load_fast = str(settings["load_fast"]).lower()
    if load_fast not in LOAD_FAST:
        raise MonitoringSettingError("ray_tensorboard_load_fast", "must be true, false or auto")
    out["load_fast"] = load_fast
    # Every run under the shared root's jobs: a job writes its event files to <jobs>/<submission_id>/tensorboard/.
    out["logdir"] = conventions.paths(out["shared_root"])["jobs"]
    out["argv"] = [out["executable"], f"--logdir={out['logdir']}", f"--host={out['bind']}", f"--port={out['port']}",
                   f"--load_fast={load_fast}", f"--reload_interval={out['reload_s']}",
                   f"--samples_per_plugin=scalars={out['scalar_samples']}"]
    return out


def _alertmanagers(value):
    found = []
    for item in value or []:
        host, sep, port = str(item).rpartition(":")
        try:
            ipaddress.ip_address(host)
            ok = bool(sep)
        except ValueError:
            ok = bool(sep) and re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})", host) is not None
        if not ok or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise MonitoringSettingError("ray_prometheus_alertmanagers", "must be a list of host:port")
        found.append(f"{host}:{int(port)}")
    return found


def prometheus(settings):
    """The validated settings of roles/ray_prometheus, with its command line (`argv`)."""
    out = {"bind": _bind("ray_prometheus_bind", settings["bind"]),
           "port": _int("ray_prometheus_port", settings["port"], 1, 65535),
           "retention": _duration("ray_prometheus_retention", settings["retention"]),
           "dir": _path("ray_prometheus_dir", settings["dir"]),
           "config_dir": _path("ray_prometheus_config_dir", settings["config_dir"]),
           "sd_file": _path("ray_prometheus_sd_file", settings["sd_file"]),
           "scrape_interval": _duration("ray_prometheus_scrape_interval", settings["scrape_interval"]),
           "user": _name("ray_prometheus_user", settings["user"]),
           "service": _name("ray_prometheus_service_name", settings["service"]),
           "log": _path("ray_prometheus_log_path", settings["log"]),
           "expected_nodes": _int("ray_prometheus_expected_nodes", settings["expected_nodes"], 1, 100000),
           "alertmanagers": _alertmanagers(settings.get("alertmanagers"))}
    size = str(settings.get("retention_size") or "")
    if size and not _SIZE.fullmatch(size):
        raise MonitoringSettingError("ray_prometheus_retention_size", "must be empty or a size such as 50GB "
                                     "(B KB MB GB TB PB)")
    out["retention_size"] = size
    try:
        full = float(str(settings["object_store_full"]))
    except ValueError:
        full = -1.0
    if not 0.0 < full < 1.0:
        raise MonitoringSettingError("ray_prometheus_object_store_full", "must be a fraction between 0 and 1")
    out["object_store_full"] = full
    out["config_file"] = posixpath.join(out["config_dir"], "prometheus.yml")
    out["rules_file"] = posixpath.join(out["config_dir"], "rules.yml")
    address = f"{out['bind']}:{out['port']}" if ":" not in out["bind"] else f"[{out['bind']}]:{out['port']}"
    out["url"] = f"http://{address}"
    out["argv"] = ["/usr/bin/prometheus", f"--config.file={out['config_file']}",
                   f"--storage.tsdb.path={out['dir']}", f"--storage.tsdb.retention.time={out['retention']}",
                   f"--web.listen-address={address}", f"--web.external-url={out['url']}/"]
    if size:
        out["argv"].append(f"--storage.tsdb.retention.size={size}")
    return out


def prometheus_config(p):
    """prometheus.yml: every Ray node through Ray's own service-discovery file, the alert rules, the alertmanagers."""
    config = {"global": {"scrape_interval": p["scrape_interval"], "evaluation_interval": p["scrape_interval"]},
              "rule_files": [p["rules_file"]],
              "scrape_configs": [{"job_name": RAY_JOB,
                                  # Ray rewrites the file every 5 s. Prometheus's watch of its folder misses that (the
                                  # file in Ray's temp dir is a link into the session's), so it reads it as often: a
                                  # node that joined is scraped seconds later, not up to 30 s (the default) later.
                                  "file_sd_configs": [{"files": [p["sd_file"]], "refresh_interval": "5s"}]}]}
    if p["alertmanagers"]:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": p["alertmanagers"]}]}]}
    return config


def _alert(name, expr, wait, severity, summary, description):
    return {"alert": name, "expr": expr, "for": wait, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def alert_rules(p):
    """rules.yml: what a cluster owner wants to hear about. Ray lists only ALIVE nodes in its discovery file, so a
    node that dies leaves the targets soon after: its loss is seen as its series stopping, not as a target down."""
    full = p["object_store_full"]
    rules = [
        _alert("RayMetricsTargetDown", f'up{{job="{RAY_JOB}"}} == 0', "2m", "warning",
               "Prometheus cannot scrape Ray's metrics at {{ $labels.instance }}",
               "Ray still lists this node, but its dashboard agent does not answer: the node is unreachable or its "
               "Ray is stopping. Check the node (doctor.yml), then re-run up.yml."),
        _alert("RayNodeLost",
               "group by (ip) (max_over_time(ray_node_mem_total[1h])) unless group by (ip) (ray_node_mem_total)",
               "1m", "critical", "Ray node {{ $labels.ip }} stopped reporting",
               "The node reported in the last hour and reports nothing now: the host is down, its Ray stopped or "
               "the head declared it dead. Jobs on it fail. Re-run up.yml (it restarts a dead node)."),
        _alert("RayWorkerRayletDown",
               'group by (NodeAddress) (max_over_time(ray_resources{Name="worker_node"}[1h])) '
               'unless group by (NodeAddress) (ray_resources{Name="worker_node"})',
               "1m", "critical", "The raylet of worker {{ $labels.NodeAddress }} is down",
               "The worker's raylet (the node's Ray) reported in the last hour and reports nothing now: no task "
               "or actor runs there. Re-run up.yml (it restarts the worker, never while a job runs on it)."),
        _alert("RayClusterSmallerThanInventory",
               f"(count(group by (ip) (ray_node_mem_total)) or vector(0)) < {p['expected_nodes']}",
               "5m", "warning", "Ray reports {{ $value }} nodes, the inventory names "
               f"{p['expected_nodes']}",
               "Some node never joined or was lost over an hour ago. Run status.yml to see which, then up.yml."),
        _alert("RayObjectStoreNearFull",
               "sum by (NodeAddress) (ray_object_store_used_memory) / (sum by (NodeAddress) "
               "(ray_object_store_used_memory) + sum by (NodeAddress) (ray_object_store_available_memory)) "
               f"> {full:g}", "5m", "warning",
               "The object store of {{ $labels.NodeAddress }} is {{ $value | humanizePercentage }} full",
               "Ray spills objects to disk from here on, and tasks that need more fail. Free references in the job, "
               "or give the node more object store memory."),
    ]
    return {"groups": [{"name": "ray-verl", "rules": rules}]}


def target_hosts(answer):
    """The hosts Prometheus scrapes, or is about to, in its /api/v1/targets answer: each has an active Ray target and
    none of its targets is down (a restarted node's old address stays, down, until Ray's discovery file drops it)."""
    return {host for host, targets in doctor.prometheus_targets(answer).items()
            if not any(t.get("health") == "down" for t in targets)}
