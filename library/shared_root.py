#!/usr/bin/python
"""Ansible module: the shared root on this node - mounted, verified, laid out and marked, in one call."""

DOCUMENTATION = r"""
---
module: shared_root
short_description: Mount, verify, lay out and mark the shared root on this node
description:
  - One call settles what a node needs of the shared storage, so a re-run on a healthy node costs
    one round trip.
  - Mounts O(source) at O(path) (nfs or bind) when nothing is mounted there, and records the mount
    in O(fstab) when O(persist).
  - Verifies that O(path) is the shared root (a mount point; for nfs, of O(source); for bind, the
    same directory as O(source)) and fails naming O(node_name) otherwise, since jobs would write to the
    node's local disk and lose their data.
  - Creates the O(layout) directories with their modes, and returns the mark of the storage
    (O(path)/.shared-root-id, written once with a random id), so the caller can check that every
    node sees the same storage.
options:
  path:
    description: Where the shared root is mounted on every node.
    type: path
    required: true
  mode:
    description: C(nfs) mounts O(source) over NFS, C(bind) bind-mounts the directory O(source), C(none) only checks.
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
    description: Record the mount in O(fstab) (nfs and bind).
    type: bool
    default: true
  fstab:
    description: The fstab file to record the mount in.
    type: path
    default: /etc/fstab
  layout:
    description:
      - Directories (relative to O(path)) every job and snapshot relies on, each with its octal mode.
      - A directory whose mode is not world-writable must be owned by the user the module runs as
        (root), since code there is imported by every job, so nobody else may have made it first.
    type: dict
    default: {}
  node_name:
    description: The name this node goes by in messages (the inventory name).
    type: str
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Shared root | Mount, verify, lay out and mark it
  shared_root:
    path: /private
    mode: nfs
    source: nfs1:/export/private
    layout: {common: "0755", common/code: "0755", jobs: "0755", user: "1777"}
    node_name: "{{ inventory_hostname }}"
  register: shared
"""

RETURN = r"""
mounted:
  description: What is mounted at O(path) (C(findmnt)'s SOURCE and FSTYPE), after the call.
  returned: always
  type: str
mark:
  description: The storage's mark; the same on every node that sees the same storage (empty in check mode before it
    exists).
  returned: always
  type: str
actions:
  description: What was (or in check mode would be) done.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.node import shared_root


def main():
    module = AnsibleModule(argument_spec=shared_root.OPTIONS, required_if=shared_root.REQUIRED_IF,
                           supports_check_mode=True)
    module.exit_json(**shared_root.run(module, module.params))


if __name__ == "__main__":
    main()
