#!/usr/bin/python
"""Ansible module: check the external Redis that Ray's GCS fault tolerance keeps the head's tables in."""

DOCUMENTATION = r"""
---
module: ray_store_info
short_description: Check the Redis that keeps a Ray head's GCS tables (GCS fault tolerance)
description:
  - Connects to the store (RESP2 over TCP, standard library only, so the host needs no C(redis) package),
    authenticates, and reads its version, its persistence (INFO persistence) and whether Ray's GCS keeps
    tables there (keys C(RAY<namespace>@<table>), found with SCAN).
  - Read-only; it never writes to the store.
  - Every failure is one line naming the store's host:port and the cause (cannot connect, timed out, did not finish
    within O(deadline_s), refused the password, needs a password, a server error); the password is never shown.
options:
  host:
    description: The store's address, as the module's host reaches it.
    type: str
    required: true
  port:
    description: The store's port.
    type: int
    default: 6379
  username:
    description: The Redis ACL user (Redis 6 and later); C(default) authenticates with the password alone.
    type: str
    default: default
  password:
    description:
      - The store's password, never shown.
      - Mutually exclusive with O(password_file); give neither for a store without one.
    type: str
  password_file:
    description:
      - A file holding the password (one line; the line ending is dropped), read on the host the module runs on.
      - Mutually exclusive with O(password).
    type: path
  namespace:
    description:
      - Ray's C(external_storage_namespace) of the cluster; RV(cluster_data) says whether it has tables in the store.
      - Without it, RV(cluster_data) says whether any Ray namespace has.
    type: str
  require_persistence:
    description:
      - Fail (with the facts) unless the store persists Ray's tables, i.e. C(appendonly) is on and its last
        AOF write and rewrite succeeded (RV(persistence_ok)).
    type: bool
    default: true
  timeout_s:
    description: Seconds to wait for the connection and for each reply (at most what is left of O(deadline_s)).
    type: float
    default: 5
  deadline_s:
    description:
      - Seconds the whole check may take, every command together (a slow store, or something else on its port,
        cannot hold the play for long).
      - Past it the module fails in one line naming the store and what it had found so far, and returns those facts.
    type: float
    default: 30
attributes:
  check_mode:
    description: Can run in check mode; it only reads, so check mode changes nothing and returns the same facts.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: GCS store | Check the head's Redis keeps its tables on disk
  ray_store_info:
    host: 10.0.0.5
    port: 6379
    password_file: /etc/ray-verl/redis_password
    namespace: verl-prod
  register: store

- name: GCS store | Only look (a store without AOF is reported, not failed)
  ray_store_info:
    host: 127.0.0.1
    require_persistence: false
"""

RETURN = r"""
reachable:
  description:
    - A Redis answered there, even if only to refuse the password or a command (so one runs).
    - False when nothing could be reached, it timed out, what answered does not speak Redis (RESP2), or the
      module failed on its own options before trying (an unreadable O(password_file)).
  returned: always
  type: bool
version:
  description: The store's C(redis_version).
  returned: success, and when O(deadline_s) passed after they were read
  type: str
  sample: 7.0.15
aof_enabled:
  description: The append-only file is on (C(appendonly yes)).
  returned: success, and when O(deadline_s) passed after they were read
  type: bool
persistence_ok:
  description: The AOF is on, the store is not loading, and its last AOF write and rewrite succeeded.
  returned: success, and when O(deadline_s) passed after they were read
  type: bool
cluster_data:
  description: Ray's GCS keeps tables there (keys C(RAY<namespace>@*); any namespace without O(namespace)).
  returned: success
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.daemons.redis_store import DEADLINE_S, StoreError, check, persistence_problem


def read_password(module, path):
    """The password in path (its first line, without the line ending); fails without showing it."""
    try:
        with open(path, encoding="utf-8") as handle:
            password = handle.readline(65536).rstrip("\r\n")
    except OSError as exc:
        module.fail_json(msg=f"password_file {path}: cannot read it ({exc.strerror or type(exc).__name__})",
                         reachable=False)
    except UnicodeDecodeError:
        module.fail_json(msg=f"password_file {path}: is not UTF-8 text", reachable=False)
    if not password:
        module.fail_json(msg=f"password_file {path}: is empty", reachable=False)
    module.no_log_values.add(password)
    return password


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "port": {"type": "int", "default": 6379},
            "username": {"type": "str", "default": "default"},
            "password": {"type": "str", "no_log": True},
            "password_file": {"type": "path", "no_log": False},
            "namespace": {"type": "str"},
            "require_persistence": {"type": "bool", "default": True},
            "timeout_s": {"type": "float", "default": 5},
            "deadline_s": {"type": "float", "default": DEADLINE_S},
        },
        mutually_exclusive=[("password", "password_file")],
        supports_check_mode=True,
    )
    p = module.params
    password = read_password(module, p["password_file"]) if p["password_file"] else p["password"]
    try:
        result = check(p["host"], p["port"], password, p["namespace"], username=p["username"], timeout=p["timeout_s"],
                       deadline_s=p["deadline_s"])
    except StoreError as exc:  # past the deadline, with the facts it had found
        module.fail_json(msg=str(exc), **{**exc.found, "reachable": exc.answered})
    except ValueError as exc:  # an option out of range (port, timeout_s, deadline_s, namespace): nothing was sent
        module.fail_json(msg=str(exc), reachable=False)
    problem = persistence_problem(p["host"], p["port"], result)
    if p["require_persistence"] and problem:
        module.fail_json(msg=f"{problem}; require_persistence=false only reports it", **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
