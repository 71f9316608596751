#!/usr/bin/python
"""Ansible module: cordon a worker (no new work lands on it) or give it back; make Ray hold what the cordons say."""

DOCUMENTATION = r"""
---
module: ray_cordon
short_description: Cordon a Ray worker, uncordon it, or make Ray follow the cordons on the shared root
description:
  - A cordon is one small file on the shared root, C(<shared_root>/cordons/<ip>.json) (who, when, why). It is the
    truth; Ray is told of it by a detached placement group pinned to the worker that holds its C(worker_node), GPUs
    and CPUs, so no new job's driver, trainer rank or task lands there. The worker keeps its Ray, and a job running
    there goes on.
  - A hold asked for while a job still uses the worker waits (PENDING) until the job ends, then takes the worker
    before anything new. The module never stops a job; cordon.yml stops them first with C(-e force=true).
  - O(state=synced) makes Ray hold exactly the cordoned workers (up.yml runs it once the workers are up, so a worker
    whose Ray started anew gets its hold again); it changes no file.
  - Must run with a Python that has Ray installed (the head's Ray Python).
options:
  state:
    description: present cordons the worker, absent gives it back, synced only brings Ray in line with the files.
    type: str
    choices: [present, absent, synced]
    default: present
  host:
    description:
      - The worker, by inventory name or address (one of O(workers)). Required with present and absent.
    type: str
  workers:
    description:
      - "The inventory's workers, C({name: address}), that O(host) is looked up in, and whose names the lines show."
      - The action plugin fills it from the inventory's C(ray_worker_addresses).
    type: dict
    default: {}
  why:
    description: Why, one line (kept in the file, cut to 300 characters).
    type: str
  who:
    description: Who cordons it (the login running cordon.yml); a login name or nothing.
    type: str
  wait_s:
    description: Wait up to this many seconds for Ray to hold a worker cordoned now (RV(held)).
    type: float
    default: 0
  python:
    description: (action) Python with Ray on the head that runs the module; default C(ray_python).
    type: str
extends_documentation_fragment:
  - ray_connection
  - ray_connection.ray_config
attributes:
  check_mode:
    description: Says what it would change (the file, the holds) and changes nothing.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Cordon | Keep new work off lab-worker2
  ray_cordon:
    host: lab-worker2
    workers: {lab-worker1: 198.18.0.11, lab-worker2: 198.18.0.12}
    why: flaky NIC
    who: alice
    wait_s: 10

- name: Cordon | Give it back
  ray_cordon:
    host: 198.18.0.12
    workers: {lab-worker2: 198.18.0.12}
    state: absent
"""

RETURN = r"""
node_ip:
  description: The worker's address (present and absent).
  returned: with present or absent
  type: str
cordon:
  description: The worker's cordon as its file holds it (who, when, why), or null.
  returned: with present or absent
  type: dict
existed:
  description: The worker was cordoned already (with present, its first cordon stays), or was not (with absent).
  returned: with present or absent
  type: bool
busy_jobs:
  description: Submission ids of the jobs whose driver or actors run on the worker now.
  returned: with present or absent
  type: list
  elements: str
held:
  description: "Each cordoned worker's hold in Ray: CREATED (held), PENDING (still in use by running work), missing."
  returned: always
  type: dict
absent:
  description: Cordoned workers Ray has no live node for (held once they join).
  returned: always
  type: list
  elements: str
lines:
  description: One line per cordon (status.yml's words), and one per cordon file that cannot be read.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.base.conventions import one_line
from ansible.module_utils.base.ray_connection import argument_spec
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cordons import cordons


def resolve(host, workers, cordoned=()):
    """(name or None, ip) of host: an inventory worker by name or address ({name: address}), or the address of a
    cordon already there (cordoned: so a retry's cordon of a node outside the inventory can be given back);
    CordonError naming host otherwise. Only the entry that matches is read as an address."""
    workers = {str(name): str(address) for name, address in (workers or {}).items()}
    if str(host) in workers:
        return str(host), cordons.node_ip(workers[str(host)], f"host: {host}'s address")
    for name, address in workers.items():
        if cordons.canonical(address) is not None and cordons.canonical(address) == cordons.canonical(host):
            return name, cordons.node_ip(address)
    if cordons.canonical(host) in cordoned:
        return None, cordons.canonical(host)
    raise cordons.CordonError(f"host: {one_line(host, 60)!r} is not a worker of this inventory (one of: "
                              f"{', '.join(sorted(workers)) or 'none'})")


def busy_jobs(client_jobs, actors, node_id):
    """Submission ids of the running jobs with their driver or a live actor on node_id."""
    job_ids = {a.get("job_id") for a in actors if a.get("node_id") == node_id and a.get("state") == "ALIVE"}
    return sorted(j["submission_id"] for j in client_jobs
                  if j["status"] in ("PENDING", "RUNNING") and j["submission_id"]
                  and (j.get("driver_node_id") == node_id or j.get("job_id") in job_ids))


def run(module):
    p = module.params
    config = p["ray_config"]
    shared_root, url, address = config["shared_root"], config["dashboard_url"], config["address"]
    rc.prepare_client_env(p["token_path"])
    result = {"changed": False}
    cordons.read_all(shared_root, whole=True)  # a folder that cannot be listed whole: one line, nothing changed
    nodes = rc.list_nodes(url)  # one listing serves the busy jobs, the holds' plan and their wait
    if p["state"] != "synced":
        if not p["host"]:
            raise cordons.CordonError("host: name the worker (-e host=NAME, an inventory worker or its address)")
        name, ip = resolve(p["host"], p["workers"], set(cordons.read_all(shared_root)[0]) if p["state"] == "absent"
                           else ())
        result["node_ip"] = ip
        entry, problem = cordons.read_one(shared_root, ip)
        result["existed"] = bool(entry or problem)
        if p["state"] == "present" and not result["existed"]:
            entry = cordons.make(ip, by="person", host=name, who=p["who"] or None, why=p["why"])
            if not module.check_mode:
                created, entry = cordons.add(shared_root, entry)
                result["existed"] = not created
            result["changed"] = not result["existed"]
        elif p["state"] == "absent" and result["existed"]:
            result["changed"] = True
            if not module.check_mode:
                cordons.remove(shared_root, ip)
            entry = None
        result["cordon"] = entry
        node = cordons.alive_workers(nodes).get(ip)
        result["busy_jobs"] = busy_jobs([rc.job_summary(j) for j in rc.job_client(url, rc.read_token(
            p["token_path"])).list_jobs()], rc.list_actor_summaries(url), node["node_id"]) if node else []
    found, problems = cordons.read_all(shared_root, whole=True)
    changes = cordons.sync(lambda: cordons.cordoned(shared_root), nodes,
                           lambda: cordons.list_groups(url), address, check=module.check_mode)
    result["changed"] = result["changed"] or changes["changed"]
    if not module.check_mode:
        result["held"] = cordons.wait_held(lambda: cordons.list_groups(url), sorted(
            set(found) - set(changes["absent"])), p["wait_s"], nodes=nodes)
    else:
        result["held"] = {**changes["held"], **{ip: "missing" for ip, _ in changes["create"]}}
    result["absent"] = changes["absent"]
    names = {ip: name for name, ip in (p["workers"] or {}).items()}
    result["lines"] = [cordons.line(e, names.get(ip))
                       + f" [Ray: {hold_word(result['held'].get(ip), ip in changes['absent'])}]"
                       for ip, e in sorted(found.items()) if e] + problems
    # A hold without its file (a run gave the worker back while another made it): shown until a sync removes it.
    result["lines"] += [f"{g['name']}: a hold without a cordon file (the next up.yml or cordon.yml removes it)"
                        for g in changes["remove"]] if module.check_mode else []
    return result


def hold_word(state, absent):
    if absent:
        return "not in the cluster; held when it joins"
    return {"CREATED": "held", "PENDING": "not held yet: new work can still land there until its running work "
            "ends"}.get(state, "not held yet")


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(
            ray_config=True,
            state={"type": "str", "choices": ["present", "absent", "synced"], "default": "present"},
            host={"type": "str"}, workers={"type": "dict", "default": {}}, why={"type": "str"},
            who={"type": "str"}, wait_s={"type": "float", "default": 0}),
        supports_check_mode=True)
    try:
        module.exit_json(**run(module))
    except cordons.CordonError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # noqa: BLE001 - Ray's and the share's errors, one line each
        module.fail_json(msg=f"cordon: {type(exc).__name__}: {one_line(exc, 300)}")


if __name__ == "__main__":
    main()
