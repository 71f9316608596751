#!/usr/bin/python
"""Ansible module: one node's facts for doctor.yml (versions, snapshots, GPUs, shared root, clock, route, py-spy)."""

DOCUMENTATION = r"""
---
module: ray_doctor
short_description: Gather what doctor.yml compares between the nodes of a Ray cluster
description:
  - With O(phase=facts), reads this node's facts without changing anything but a probe file on the
    shared root - Python and package versions as Ray's workers here import them (the raylet's own
    environment), the digest of each verl code snapshot as this node sees it, the GPUs the driver
    shows, free space on the shared root, the clock, the interface that routes to the head and the
    raylet's NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME and GCS store settings (module_utils/node/doctor.py RAYLET_VARS),
    where Ray's dashboard agent finds py-spy, and whether /proc hides other users' processes (its hidepid).
  - GPUs are counted as M(ray_node) counts them for C(num_gpus=auto) (nvidia-smi on the PATH or in a driver's
    usual folder, else NVML; module_utils/node/probe.py), and the interface is found as it finds it (iproute2, or
    the kernel's route without it).
  - With O(phase=read), reads every node's probe file, proving that each node sees what every other
    node wrote (not only that something is mounted).
options:
  phase:
    description: C(facts) (and write this node's probe) or C(read) (every node's probes).
    type: str
    choices: [facts, read]
    default: facts
  python:
    description: The nodes' Ray Python.
    type: path
    required: true
  shared_root:
    description: The shared root.
    type: path
    required: true
  head_ip:
    description: The head's address (for the route).
    type: str
    required: true
  node_ip:
    description: This node's cluster address.
    type: str
    required: true
  node_name:
    description: This node's inventory name (its probe file's name).
    type: str
    required: true
  run_id:
    description: This doctor run's id (the folder of the probe files).
    type: str
    required: true
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Doctor | Read this node's facts
  ray_doctor:
    python: /opt/ray-verl/venv/bin/python
    shared_root: /private
    head_ip: 10.0.0.10
    node_ip: 10.0.0.11
    node_name: "{{ inventory_hostname }}"
    run_id: doctor-1
"""

RETURN = r"""
python:
  description: Python version of the Ray Python, with the raylet's environment.
  returned: phase=facts
  type: str
packages:
  description: Versions of ray, torch, verl, vllm, sglang and transformers (null when absent).
  returned: phase=facts
  type: dict
snapshots:
  description: Content digest of each verl code snapshot, by code id.
  returned: phase=facts
  type: dict
gpus_present:
  description: The GPUs the driver lists here; null where there is no driver (no nvidia-smi, no NVML).
  returned: phase=facts
  type: int
gpus_error:
  description: Why the driver could not count them (the command and its first error line), else null.
  returned: phase=facts
  type: str
iface:
  description: The interface that reaches the head (null when none does).
  returned: phase=facts
  type: str
py_spy:
  description: Where Ray's processes find py-spy (the raylet's PATH, or the Ray Python's folder first), else null.
  returned: phase=facts
  type: str
proc_hidepid:
  description:
    - The hidepid option of /proc as mounted here (C(off) when absent; C(noaccess), C(invisible), C(ptraceable)
      hide other users' command lines), or null when no proc mount on /proc was found.
  returned: phase=facts
  type: str
probes:
  description: Every probe file this node reads, by node name.
  returned: phase=read
  type: dict
"""

import glob
import json
import os
import secrets
import time

from ansible.module_utils.base import conventions
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.node import code_snapshot, doctor, ray_node
from ansible.module_utils.node import probe as node_probe


def raylet_env():
    """The environment of this node's raylet (what Ray's workers inherit), or None when none runs."""
    raylets = ray_node.find_raylets()
    return ray_node.process_environ(raylets[0]) if raylets else None


def proc_hidepid():
    """/proc's hidepid option in this node's mount table (doctor.proc_hidepid), or None when it cannot be read."""
    for path in ("/proc/self/mountinfo", "/proc/mounts"):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return doctor.proc_hidepid(handle.read(1 << 22))  # a container host's table fits in 4 MiB
        except OSError:
            continue
    return None


def probe_dir(shared_root, run_id):
    return os.path.join(shared_root, ".doctor", run_id)


def facts(module, p):
    env = raylet_env()
    rc, out, err = module.run_command([p["python"], "-c", doctor.VERSION_PROBE], environ_update=env or {})
    if rc != 0:
        module.fail_json(msg=f"{p['node_name']}: {p['python']} cannot report versions: {(err or out).strip()[-300:]}")
    versions = json.loads(out)
    snapshots = {}
    verl_root = os.path.dirname(conventions.verl_code_dir(p["shared_root"], "x"))
    for path in sorted(glob.glob(os.path.join(verl_root, "*"))):
        if os.path.isdir(path) and not os.path.basename(path).startswith("."):
            snapshots[os.path.basename(path)] = code_snapshot.source_digest(path)[:16]
    # Counted as ray_node counts them for num_gpus auto; a failing driver is reported, not fatal here.
    gpus, gpus_error = None, None
    try:
        gpus = node_probe.count_gpus(module.run_command)[0]
    except node_probe.GpuDriverError as exc:
        gpus_error = str(exc)
    usage = os.statvfs(p["shared_root"])
    probe = f"{p['node_name']} {secrets.token_hex(8)}"
    if not module.check_mode:
        folder = probe_dir(p["shared_root"], p["run_id"])
        os.makedirs(folder, mode=0o755, exist_ok=True)
        with open(os.path.join(folder, p["node_name"]), "w", encoding="utf-8") as handle:
            handle.write(probe)
    return {"python": versions["python"], "packages": versions["packages"], "snapshots": snapshots,
            "gpus_present": gpus, "gpus_error": gpus_error,
            "iface": node_probe.interface_to(module.run_command, p["head_ip"]), "node_ip": p["node_ip"],
            "py_spy": node_probe.find_on_ray_path("py-spy", p["python"], env), "ray_python": p["python"],
            "proc_hidepid": proc_hidepid(),
            "raylet_env": {k: v for k, v in (env or {}).items() if k in doctor.RAYLET_VARS} if env else None,
            "free_gb": usage.f_bavail * usage.f_frsize / 2**30, "clock": time.time(),
            "probe": probe if not module.check_mode else None}


def read_probes(p):
    folder = probe_dir(p["shared_root"], p["run_id"])
    probes = {}
    for path in sorted(glob.glob(os.path.join(folder, "*"))):
        with open(path, encoding="utf-8") as handle:
            probes[os.path.basename(path)] = handle.read()
    return probes


def main():
    module = AnsibleModule(
        argument_spec={
            "phase": {"type": "str", "choices": ["facts", "read"], "default": "facts"},
            "python": {"type": "path", "required": True},
            "shared_root": {"type": "path", "required": True},
            "head_ip": {"type": "str", "required": True},
            "node_ip": {"type": "str", "required": True},
            "node_name": {"type": "str", "required": True},
            "run_id": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        for field in ("node_name", "run_id"):
            conventions.check_id(field, p[field])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if p["phase"] == "read":
        module.exit_json(changed=False, probes=read_probes(p))
    module.exit_json(changed=False, **facts(module, p))


if __name__ == "__main__":
    main()
