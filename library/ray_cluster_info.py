#!/usr/bin/python
"""Ansible module: what a Ray cluster looks like now (nodes, jobs, readiness)."""

DOCUMENTATION = r"""
---
module: ray_cluster_info
short_description: Read a Ray cluster's nodes and jobs through its dashboard
description:
  - Uses Ray's state API and Job Submission SDK (no C(ray) CLI) to list nodes and jobs.
  - With O(expected_workers), tells whether every inventory worker is ALIVE with its
    C(worker_node) and GPU resources (the readiness gate of C(up.yml)).
  - Must run with a Python that has Ray installed (the head's Ray Python).
options:
  expected_workers:
    description: Workers that must be ALIVE, each with C(host), C(ip), C(num_gpus), C(worker_node).
    type: list
    elements: dict
    default: []
  wait_s:
    description:
      - Look again (every second) for up to this many seconds until every expected worker is ready.
      - The action plugin of the same name sets it; with O(timeout_s) it keeps calling the module,
        printing which workers it still waits for, until they are ready or O(timeout_s) has passed.
    type: float
    default: 0
  timeout_s:
    description:
      - Handled on the control host by the action plugin; fail naming the workers not ready after this
        many seconds. Without it the module looks once (or for O(wait_s)).
    type: float
  list_jobs:
    description:
      - List the cluster's jobs and the nodes they occupy (RV(jobs), RV(busy_node_ips)). The readiness gate of up.yml
        does without them, which spares importing the Job Submission SDK and two more requests.
    type: bool
    default: true
  shared_root:
    description:
      - Also say which jobs the shared root's open-records index lists there (RV(open_records)), so that up.yml
        skips the records' reconcile when the index is complete and lists none, which is what the reconcile would
        find.
    type: path
  recent_records:
    description:
      - Also read the job records of this many chains of attempts on O(shared_root), those written last (RV(records)),
        for status.yml; 0 reads none, and at most 50 are read.
      - They are read when the cluster cannot be, too (a record outlives its cluster).
    type: int
    default: 0
  prometheus_url:
    description:
      - Also ask the Prometheus there for its active targets (RV(prometheus_targets)), from this node, once the
        workers are ready, so that up.yml checks that Prometheus reads the head without a call of its own. Only an
        http or https URL is asked; any other gives null.
    type: str
  python:
    description: (action) Python with Ray on the head that runs the module; default C(ray_python).
    type: str
extends_documentation_fragment:
  - ray_connection
  - ray_connection.dashboard
attributes:
  check_mode:
    description: Can run in check mode; it only reads, so check mode changes nothing and returns the same facts.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
# dashboard_url, token_path and the interpreter default to the inventory's ray_dashboard_url,
# ray_auth_token_path (with ray_auth_enabled) and ray_python.
- name: Readiness | Wait for every worker
  ray_cluster_info:
    expected_workers:
      - {host: gpu1, ip: 10.0.0.11, num_gpus: 4, worker_node: 1}
    timeout_s: 120
  register: info
"""

RETURN = r"""
nodes:
  description: Every node Ray knows, alive or dead.
  returned: always
  type: list
  elements: dict
node_lines:
  description: One readable line per node.
  returned: always
  type: list
  elements: str
jobs:
  description: Every job the cluster lists.
  returned: when O(list_jobs)
  type: list
  elements: dict
busy_node_ips:
  description: IPs of nodes running a job's driver or actors.
  returned: when O(list_jobs)
  type: list
  elements: str
ready:
  description: >-
    Every expected worker is ready: exactly one ALIVE node on its IP (a replaced node no longer
    ALIVE), started after its C(started_after_ms), with the expected resources.
  returned: always
  type: bool
missing:
  description: Expected workers that are not ready, with the reason.
  returned: always
  type: list
  elements: str
ray_version:
  description: Ray version of the Python this module ran with.
  returned: always
  type: str
queue:
  description:
    - The jobs waiting in the cluster's queue (records in state QUEUED), in its order, each with C(submission_id),
      C(submitter), C(priority), C(waited_s) (so far), C(position), C(reason) and C(words), as the last admission
      wrote them (docs/queue.md).
  returned: when O(shared_root) is set
  type: list
  elements: dict
queue_lines:
  description: The queue as status.yml prints it, one line a job (C(1. ID, normal, alice, waiting 4m10s, words)).
  returned: when O(shared_root) is set
  type: list
  elements: str
open_records:
  description: >-
    The ids of the job records the open-records index of O(shared_root) lists (records not final), or null when
    that index is not complete (its first reader scans every record and writes it).
  returned: when O(shared_root) is set
  type: list
  elements: str
records:
  description:
    - >-
      The O(recent_records) chains of attempts whose records were written last, newest first, each read through the
      record's model: C(submission_id) (the first job), C(state) and C(final) (its newest attempt's; C(state) null when
      that record is unreadable), C(attempts), C(goodput) (the final line's words, empty until the chain ended),
      C(account) (the goodput's seconds), C(blame) (each C(node_ip), C(why), C(attempt)) and C(unreadable) (each record
      the model refused, and why).
  returned: when O(shared_root) is set and O(recent_records) is more than 0
  type: list
  elements: dict
records_note:
  description: Why the records could not be listed, or null.
  returned: when O(shared_root) is set and O(recent_records) is more than 0
  type: str
prometheus_targets:
  description: >-
    Prometheus's C(/api/v1/targets?state=active) answer (its JSON), or null when it did not answer, or answered
    something else than JSON.
  returned: when O(prometheus_url) is set and the workers are ready
  type: dict
"""

import http.client
import json
import time
import urllib.request

from ansible.module_utils.base import conventions
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.base.ray_connection import argument_spec
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.jobs.evidence import goodput
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.submission import admission


def read_nodes_until_ready(dashboard_url, expected, wait_s, clock=time.monotonic, sleep=time.sleep):
    """Nodes, readiness and missing workers, looking again until ready or wait_s has passed.

    A failure to read the cluster is retried within wait_s (a head that just started); the last
    one is raised.
    """
    deadline = clock() + wait_s
    while True:
        try:
            nodes = rc.list_nodes(dashboard_url)
        except Exception:  # retried until the deadline, then reported by the caller
            if clock() >= deadline:
                raise
        else:
            ready, missing = rc.worker_readiness(nodes, expected)
            if ready or clock() >= deadline:
                return nodes, ready, missing
        sleep(1)


# Prometheus's targets answer is a few KB per node: a bound, never a whole body of any size in memory.
TARGETS_MAX_BYTES = 16 * 1024 * 1024


class HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to http or https. urllib's own follows one to ftp:// too: whatever answers at the
    Prometheus address could make the node read an FTP server of its choosing."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"a redirect to {scheme or 'no'} scheme is refused", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def prometheus_targets(url, timeout=5.0):
    """Prometheus's active targets (its JSON answer), or None when it does not answer with JSON."""
    if not str(url).lower().startswith(("http://", "https://")):
        return None  # a site value of any shape: never a file or FTP read on the head
    opener = urllib.request.build_opener(HttpOnlyRedirects)  # and a redirect of any shape: never FTP either
    try:
        with opener.open(f"{url.rstrip('/')}/api/v1/targets?state=active", timeout=timeout) as answer:
            body = answer.read(TARGETS_MAX_BYTES + 1)
        if len(body) > TARGETS_MAX_BYTES:
            return None
        found = json.loads(body)
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return found if isinstance(found, dict) else None


def main():
    module = AnsibleModule(
        argument_spec={
            **argument_spec(dashboard=True),
            "expected_workers": {"type": "list", "elements": "dict", "default": []},
            "wait_s": {"type": "float", "default": 0},
            "timeout_s": {"type": "float"},
            "prometheus_url": {"type": "str"},
            "shared_root": {"type": "path"},
            "list_jobs": {"type": "bool", "default": True},
            "recent_records": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    records = {}
    if p["shared_root"] and p["recent_records"] > 0:
        found, note = goodput.recent(p["shared_root"], p["recent_records"])
        records = {"records": found, "records_note": note}
    if p["shared_root"]:  # the queue in order, from the records alone: shown with the cluster down too
        try:
            records["queue"], records["queue_lines"] = admission.listing(p["shared_root"])
        except OSError as exc:
            records["queue"], records["queue_lines"] = [], [f"the queue cannot be read: {exc}"]
    rc.prepare_client_env(p["token_path"])
    try:
        import ray

        token = rc.read_token(p["token_path"])
        nodes, ready, missing = read_nodes_until_ready(p["dashboard_url"], p["expected_workers"], p["wait_s"])
        if p["list_jobs"]:
            jobs = [rc.job_summary(j) for j in rc.job_client(p["dashboard_url"], token).list_jobs()]
            busy = rc.busy_node_ips(nodes, jobs, rc.list_alive_actor_nodes(p["dashboard_url"]))
            listed = {"jobs": jobs, "busy_node_ips": busy}
        else:
            listed = {}
    except Exception as exc:  # noqa: BLE001 - any failure here means "cannot read the cluster"
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        module.fail_json(msg="cannot read the Ray cluster at {}: {}".format(p["dashboard_url"], first),
                         ready=False, missing=["cluster unreachable"], nodes=[], node_lines=[], **records)
    extra = {"prometheus_targets": prometheus_targets(p["prometheus_url"])} if p["prometheus_url"] and ready else {}
    if p["shared_root"]:
        try:
            extra["open_records"] = open_index.listed(conventions.paths(p["shared_root"])["jobs"])
        except OSError:  # an index it cannot read is not complete: the reconcile then reads every record
            extra["open_records"] = None
    module.exit_json(changed=False, **extra, **listed, **records, nodes=nodes, node_lines=rc.describe_nodes(nodes),
                     ready=ready, missing=missing, ray_version=ray.__version__)


if __name__ == "__main__":
    main()
