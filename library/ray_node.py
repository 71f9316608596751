#!/usr/bin/python
"""Ansible module: keep this host's Ray node started with a given configuration, or stopped."""

DOCUMENTATION = r"""
---
module: ray_node
short_description: Start, heal or stop the Ray node on this host
description:
  - Starts Ray as a head or a worker with C(ray start), and records a fingerprint of the
    command, environment and Ray version under O(state_file).
  - A re-run on a healthy node changes nothing and does not import Ray (it is the common case, and
    fast). A node whose Ray died is started again (it rejoins the cluster). A node whose
    configuration drifted is restarted, but not while a job runs on it unless O(force); only then is
    the cluster asked, through O(dashboard_url), which jobs run (for the head, any job, since restarting
    it ends them all). When the cluster cannot be asked, the node is not restarted (fail closed).
  - Checks that O(python) has Ray O(ray_version), and keeps the cluster token at O(token_path).
  - With O(state=stopped) stops Ray and also ends job drivers that Ray left orphaned.
options:
  state:
    description: Whether Ray should run on this host.
    type: str
    choices: [started, stopped]
    default: started
  role:
    description: Head or worker.
    type: str
    choices: [head, worker]
  python:
    description: Python interpreter that has Ray installed; its C(ray) script is used.
    type: path
    required: true
  node_ip:
    description: Address this node announces to the cluster.
    type: str
  head_ip:
    description: Address of the head (workers only).
    type: str
  gcs_port:
    description: GCS port of the head.
    type: int
    default: 6379
  dashboard_host:
    description: Address the head's dashboard binds to; defaults to O(node_ip).
    type: str
  dashboard_port:
    description: Dashboard port of the head.
    type: int
    default: 8265
  client_server_port:
    description: Ray client server port of the head (must be outside the worker port range).
    type: int
    default: 10001
  num_cpus:
    description: CPUs a worker offers; Ray detects them when unset.
    type: int
  num_gpus:
    description:
      - GPUs a worker offers, a whole number taken as given (V(0) for a CPU worker), or V(auto) for a GPU worker whose
        GPUs are counted here - with C(nvidia-smi) on the PATH or in a driver's usual folder
        (NVIDIA_SMI_DIRS in C(module_utils/node/probe.py), C(/usr/local/nvidia/bin) among them), else through NVML
        (C(libnvidia-ml.so.1)).
      - With V(auto) the module fails, naming the node and the fix, when no GPU is found or the driver fails
        (C(nvidia-smi) exits non-zero), since a worker that joined with 0 GPUs would pass the readiness gate and leave
        every GPU job waiting.
    type: str
    default: "0"
  resources:
    description: "Custom resources, e.g. C({\"worker_node\": 1})."
    type: dict
    default: {}
  carries_work:
    description:
      - For O(role=head) only. The head is also the site's one worker (a one-box site, the same host in C(ray_head)
        and C(ray_workers)), so it offers O(num_cpus), O(num_gpus) and O(resources) as a worker would. Without it, the
        head offers no CPUs and no GPUs, and no work lands on it.
    type: bool
    default: false
  extra_args:
    description: More C(ray start) arguments.
    type: list
    elements: str
    default: []
  env:
    description: Environment for C(ray start) (e.g. RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH).
    type: dict
    default: {}
  state_file:
    description: Where the node records how it was started.
    type: path
    default: /run/ray-verl/node.json
  ray_version:
    description: The Ray version O(python) must have; the module fails naming both versions otherwise.
    type: str
  token:
    description: The cluster token, written to O(token_path) (mode 0600) when it differs; a new token restarts the node.
    type: str
  token_path:
    description: Where the node keeps the cluster token (Ray reads it through RAY_AUTH_TOKEN_PATH).
    type: path
  redis_password:
    description:
      - The GCS store's password (a head whose O(env) has RAY_REDIS_ADDRESS keeps its tables in that Redis).
      - Given to C(ray start --head) as C(--redis-password); the state file, the result and any error show its
        digest only, and a new password restarts the head. Ray passes it on to its GCS server's command line,
        so it is visible in the head's process list to root.
      - With the store in O(env), the cluster's tables are deleted from the store once the head's Ray has stopped
        (O(state=stopped), or a restart; Ray's own cleanup), since a head stopped on purpose ends its cluster.
        A head that died and is started again keeps them, and comes back to its cluster.
    type: str
  dashboard_url:
    description: The cluster's dashboard, asked which jobs run before a drifted node is restarted.
    type: str
  socket_ifname:
    description:
      - Sets NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in Ray's environment (so every job's workers on
        this node have them) unless O(env) sets them. C(auto) names the interface that reaches the head
        (on the head, the one holding O(node_ip)), an empty string sets nothing, anything else is the name.
    type: str
    default: ""
  force:
    description: Restart a drifted node even while a job runs on it, or when the cluster cannot tell.
    type: bool
    default: false
  restart:
    description: Restart even when the configuration is unchanged (e.g. the head was restarted).
    type: bool
    default: false
  cleanup_legacy:
    description: Replace a Ray this project did not start (and remove its session directories).
    type: bool
    default: false
  plan:
    description:
      - Only say what Ray would do (RV(action)), changing nothing of Ray or its token, as check mode does; the shared
        root (O(shared_root)) is still settled for real. up.yml looks at every worker this way first, then starts in
        waves only the ones that must.
    type: bool
    default: false
  store:
    description:
      - The GCS store (Redis) the head keeps its tables in, checked before anything else with O(redis_password), as the
        ray_store_info module checks it (it must answer and persist); RV(store) says whether it holds this
        cluster's tables (C(cluster_data)), i.e. whether a head that starts comes back to its cluster.
      - Not with O(state=stopped).
    type: dict
    suboptions:
      host:
        description: The store's address.
        type: str
        required: true
      port:
        description: The store's port.
        type: int
        default: 6379
      namespace:
        description: Ray's C(external_storage_namespace) of this cluster.
        type: str
        required: true
  shared_root:
    description:
      - Settle the shared root first, as the shared_root module does with these options, in the same call (a
        worker then costs one call of up.yml, not two). Ray does not start on a node whose shared root fails.
      - Not with O(state=stopped).
    type: dict
    suboptions:
      path:
        description: Where the shared root is mounted on every node.
        type: path
        required: true
      mode:
        description: C(nfs), C(bind) or C(none), as the shared_root module's.
        type: str
        choices: [nfs, bind, none]
        default: nfs
      source:
        description: C(server:/export) for nfs, a directory for bind.
        type: str
        default: ""
      nfs_options:
        description: Mount options for nfs.
        type: str
        default: defaults,_netdev
      persist:
        description: Record the mount in O(shared_root.fstab).
        type: bool
        default: true
      fstab:
        description: The fstab file to record the mount in.
        type: path
        default: /etc/fstab
      layout:
        description: Directories relative to O(shared_root.path), each with its octal mode.
        type: dict
        default: {}
      node_name:
        description: The name this node goes by in messages (the inventory name).
        type: str
      mark:
        description: The storage's mark as another node sees it; a node whose mark differs fails before Ray starts.
        type: str
        default: ""
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Ray | Start the head
  ray_node:
    role: head
    python: /opt/ray/bin/python
    ray_version: "2.60.0"
    node_ip: 10.0.0.10
    dashboard_url: http://10.0.0.10:8265
    socket_ifname: auto
    token: "{{ lookup('ansible.builtin.file', 'inventory/site/.secrets/ray_token') }}"
    token_path: /etc/ray-verl/ray_token
    env:
      RAY_AUTH_MODE: token
      RAY_AUTH_TOKEN_PATH: /etc/ray-verl/token

- name: Ray | Stop Ray and orphaned drivers
  ray_node:
    state: stopped
    python: /opt/ray/bin/python
"""

RETURN = r"""
action:
  description: What was done (none, start, restart, stop; refuse_busy and refuse_legacy on failure).
  returned: always
  type: str
reason:
  description: Why.
  returned: always
  type: str
num_gpus:
  description: The GPUs the node offers (O(num_gpus), or what C(nvidia-smi) or NVML counted for V(auto)).
  returned: when O(state=started)
  type: int
node_ip:
  description: O(node_ip), for the readiness gate (filter ray_expected_workers).
  returned: when O(state=started)
  type: str
resources:
  description: O(resources), for the readiness gate (filter ray_expected_workers).
  returned: when O(state=started)
  type: dict
token_changed:
  description: The node's copy of the cluster token was (or, in check mode, would be) rewritten.
  returned: when O(state=started)
  type: bool
changes:
  description: What differs from the recorded configuration.
  returned: always
  type: list
  elements: str
ray_version:
  description: Ray version of O(python).
  returned: always
  type: str
started_at_ms:
  description: When C(ray start) began (epoch ms, this host's clock); the new node's start time is later.
  returned: when Ray was started or restarted
  type: int
busy_jobs:
  description: Submission ids of the jobs that keep a drifted node from restarting.
  returned: when a restart was refused
  type: list
  elements: str
store_cleared:
  description: The GCS store namespace whose tables were deleted (a head with a store, stopped or restarted).
  returned: when Ray was stopped or restarted
  type: str
killed_driver_pids:
  description: Orphaned job drivers ended (on stop, on restart, and on a start after Ray died here).
  returned: when Ray was stopped, started or restarted
  type: list
  elements: int
retried:
  description:
    - A worker's C(ray start) timed out (its raylet did not register within Ray's fixed 30 s); once the head's GCS
      answered, Ray was stopped here and started once more.
  returned: when a start was retried
  type: bool
stderr_tail:
  description: The last lines C(ray start) printed (the failure's one-line message names the cause).
  returned: when C(ray start) failed
  type: str
store:
  description: What the check of O(store) found (reachable, version, aof_enabled, persistence_ok, cluster_data).
  returned: when O(store) is set
  type: dict
shared_root:
  description: The shared_root module's result (mounted, mark, actions) for O(shared_root).
  returned: when O(shared_root) is set
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.node import ray_node, shared_root


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
            "role": {"type": "str", "choices": ["head", "worker"]},
            "python": {"type": "path", "required": True},
            "node_ip": {"type": "str"},
            "head_ip": {"type": "str"},
            "gcs_port": {"type": "int", "default": 6379},
            "dashboard_host": {"type": "str"},
            "dashboard_port": {"type": "int", "default": 8265},
            "client_server_port": {"type": "int", "default": 10001},
            "num_cpus": {"type": "int"},
            "num_gpus": {"type": "str", "default": "0"},
            "resources": {"type": "dict", "default": {}},
            "carries_work": {"type": "bool", "default": False},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "env": {"type": "dict", "default": {}},
            "state_file": {"type": "path", "default": "/run/ray-verl/node.json"},
            "ray_version": {"type": "str"},
            "token": {"type": "str", "no_log": True},
            "token_path": {"type": "path", "no_log": False},
            "redis_password": {"type": "str", "no_log": True},
            "dashboard_url": {"type": "str"},
            "socket_ifname": {"type": "str", "default": ""},
            "force": {"type": "bool", "default": False},
            "restart": {"type": "bool", "default": False},
            "cleanup_legacy": {"type": "bool", "default": False},
            "plan": {"type": "bool", "default": False},
            "store": {"type": "dict", "options": {"host": {"type": "str", "required": True},
                                                  "port": {"type": "int", "default": 6379},
                                                  "namespace": {"type": "str", "required": True}}},
            "shared_root": {"type": "dict",
                            "options": {**shared_root.OPTIONS, "mark": {"type": "str", "default": ""}},
                            "required_if": shared_root.REQUIRED_IF},
        },
        required_if=[("state", "started", ("role", "node_ip"))],
        required_together=[("token", "token_path")],
        supports_check_mode=True,
    )
    ray_node.run(module)


if __name__ == "__main__":
    main()
