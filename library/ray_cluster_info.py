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
  dashboard_url:
    description: Dashboard address, e.g. C(http://10.0.0.10:8265).
    type: str
    required: true
  token_path:
    description: File holding the cluster token (token authentication); omit when auth is off.
    type: path
  expected_workers:
    description: Workers that must be ALIVE, each with C(host), C(ip), C(num_gpus), C(worker_node).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Readiness | Wait for every worker
  ray_cluster_info:
    dashboard_url: http://10.0.0.10:8265
    token_path: /etc/ray-verl/token
    expected_workers:
      - {host: gpu1, ip: 10.0.0.11, num_gpus: 4, worker_node: 1}
  register: info
  until: info.ready
  retries: 30
  delay: 2
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
  returned: always
  type: list
  elements: dict
busy_node_ips:
  description: IPs of nodes running a job's driver or actors.
  returned: always
  type: list
  elements: str
ready:
  description: Every expected worker is ALIVE with the expected resources.
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
"""

from ansible.module_utils import ray_cluster as rc
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "dashboard_url": {"type": "str", "required": True},
            "token_path": {"type": "path", "no_log": False},
            "expected_workers": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    rc.prepare_client_env(p["token_path"])
    try:
        import ray

        token = rc.read_token(p["token_path"])
        nodes = rc.list_nodes(p["dashboard_url"])
        jobs = [rc.job_summary(j) for j in rc.job_client(p["dashboard_url"], token).list_jobs()]
        actor_nodes = rc.list_alive_actor_nodes(p["dashboard_url"])
    except Exception as exc:  # noqa: BLE001 - any failure here means "cannot read the cluster"
        module.fail_json(msg="cannot read the Ray cluster at {}: {}".format(p["dashboard_url"], (str(exc).splitlines() or [type(exc).__name__])[0]),
                         ready=False, missing=["cluster unreachable"], nodes=[], node_lines=[])
    ready, missing = rc.worker_readiness(nodes, p["expected_workers"])
    module.exit_json(
        changed=False, nodes=nodes, node_lines=rc.describe_nodes(nodes), jobs=jobs,
        busy_node_ips=rc.busy_node_ips(nodes, jobs, actor_nodes), ready=ready, missing=missing,
        ray_version=ray.__version__)


if __name__ == "__main__":
    main()
