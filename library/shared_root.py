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
  description: The storage's mark; the same on every node that sees the same storage (empty in check mode before it exists).
  returned: always
  type: str
actions:
  description: What was (or in check mode would be) done.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils import shared_root_ctl as ctl
from ansible.module_utils.basic import AnsibleModule


def findmnt(module, path):
    rc, out, err = module.run_command(["findmnt", "--noheadings", "--output", "SOURCE,FSTYPE", "--mountpoint", path])
    if rc not in (0, 1):
        module.fail_json(msg=f"findmnt {path} failed: {(err or out).strip()}")
    return out.strip() if rc == 0 else ""


def mount(module, p, actions):
    actions.append(f"mount {p['source']} at {p['path']} ({p['mode']})")
    if module.check_mode:
        return
    for folder in ([p["source"]] if p["mode"] == "bind" else []) + [p["path"]]:
        os.makedirs(folder, mode=0o755, exist_ok=True)
    argv = ctl.mount_command(p)
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{p['node_name']}: {' '.join(argv)} failed: {(err or out).strip()}", actions=actions)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "mode": {"type": "str", "choices": ["nfs", "bind", "none"], "default": "nfs"},
            "source": {"type": "str", "default": ""},
            "nfs_options": {"type": "str", "default": "defaults,_netdev"},
            "persist": {"type": "bool", "default": True},
            "fstab": {"type": "path", "default": "/etc/fstab"},
            "layout": {"type": "dict", "default": {}},
            "node_name": {"type": "str"},
        },
        required_if=[("mode", "nfs", ("source",)), ("mode", "bind", ("source",))],
        supports_check_mode=True,
    )
    p = module.params
    p["node_name"] = p["node_name"] or os.uname().nodename
    try:
        p["layout"] = ctl.check_settings(p)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    actions = []
    mounted = findmnt(module, p["path"])
    if not mounted and p["mode"] != "none":
        mount(module, p, actions)
        mounted = "" if module.check_mode else findmnt(module, p["path"])
    if p["persist"] and p["mode"] != "none":
        ctl.settle_fstab(p, actions, module.check_mode)
    if module.check_mode and not mounted:
        # Nothing to verify yet: the mount above has not happened.
        module.exit_json(changed=bool(actions), mounted="", mark="", actions=actions)
    why = ctl.not_shared(p, mounted)
    if why:
        module.fail_json(msg=f"{p['node_name']}: {p['path']} is not the shared root ({why}). "
                         "Jobs would write to this node's local disk and lose their data.",
                         mounted=mounted, actions=actions)
    try:
        ctl.lay_out(p, actions, module.check_mode)
    except ctl.NotUsable as exc:
        module.fail_json(msg=str(exc), actions=actions)
    mark = ctl.read_mark(p, actions, module.check_mode)
    module.exit_json(changed=bool(actions), mounted=mounted, mark=mark, actions=actions)


if __name__ == "__main__":
    main()
