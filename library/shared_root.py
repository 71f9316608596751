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
import re
import secrets

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.conventions import SHARED_ROOT_MARK


def findmnt(module, path):
    rc, out, err = module.run_command(["findmnt", "--noheadings", "--output", "SOURCE,FSTYPE", "--mountpoint", path])
    if rc not in (0, 1):
        module.fail_json(msg=f"findmnt {path} failed: {(err or out).strip()}")
    return out.strip() if rc == 0 else ""


def same_directory(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_ino, sa.st_dev) == (sb.st_ino, sb.st_dev)


def fstab_line(p):
    if p["mode"] == "nfs":
        return f"{p['source']} {p['path']} nfs {p['nfs_options']} 0 0"
    return f"{p['source']} {p['path']} none bind 0 0"


def settle_fstab(module, p, actions):
    """Make O(fstab) carry exactly one line for the shared root's mount point."""
    line = fstab_line(p)
    try:
        with open(p["fstab"], encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    ours = re.compile(r"^\S+\s+" + re.escape(p["path"]) + r"\s")
    kept = [entry for entry in lines if not ours.match(entry)]
    if [entry for entry in lines if ours.match(entry)] == [line]:
        return
    actions.append(f"record the mount in {p['fstab']}")
    if not module.check_mode:
        tmp = p["fstab"] + ".shared_root.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("\n".join([*kept, line]) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, p["fstab"])


def mount(module, p, actions):
    actions.append(f"mount {p['source']} at {p['path']} ({p['mode']})")
    if module.check_mode:
        return
    for folder in ([p["source"]] if p["mode"] == "bind" else []) + [p["path"]]:
        os.makedirs(folder, mode=0o755, exist_ok=True)
    argv = ["mount", "--bind", p["source"], p["path"]] if p["mode"] == "bind" else \
        ["mount", "-t", "nfs", "-o", p["nfs_options"], p["source"], p["path"]]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{p['node_name']}: {' '.join(argv)} failed: {(err or out).strip()}", actions=actions)


def not_shared(p, mounted):
    """Why O(path) is not the shared root, or None when it is."""
    if not mounted:
        return "nothing is mounted there"
    if p["mode"] == "nfs" and mounted.split()[0] != p["source"]:
        return f"mounted: {mounted}; expected nfs {p['source']}"
    if p["mode"] == "bind" and not same_directory(p["source"], p["path"]):
        return f"mounted: {mounted}; expected a bind mount of {p['source']}"
    return None


def lay_out(module, p, actions):
    # Parents first (common before common/code).
    for sub, mode_text in sorted(p["layout"].items()):
        mode = int(mode_text, 8)
        folder = os.path.join(p["path"], sub)
        try:
            info = os.stat(folder)
        except FileNotFoundError:
            info = None
        if info is not None and not mode & 0o002 and info.st_uid != os.geteuid():
            module.fail_json(msg=f"{p['node_name']}: {folder} belongs to uid {info.st_uid}, not to uid {os.geteuid()}: "
                             "code there runs in every job, so only its owner may write it; "
                             "check what is in it, then chown it", actions=actions)
        if info is not None and info.st_mode & 0o7777 == mode:
            continue
        actions.append(f"{'create' if info is None else 'chmod'} {folder} {mode_text}")
        if module.check_mode:
            continue
        try:
            os.mkdir(folder, mode)
        except FileExistsError:  # another node of the same storage made it a moment ago
            pass
        os.chmod(folder, mode)  # mkdir's mode passes through the umask


def read_mark(module, p, actions):
    """The storage's mark, written once: O_EXCL lets exactly one node of several create it."""
    path = os.path.join(p["path"], SHARED_ROOT_MARK)
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except FileNotFoundError:
        pass
    actions.append(f"mark the storage ({path})")
    if module.check_mode:
        return ""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    mark = secrets.token_hex(20)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(mark + "\n")
    return mark


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
    if not os.path.isabs(p["path"]):
        module.fail_json(msg=f"shared_root_path must be absolute, got {p['path']!r}")
    for sub, mode in p["layout"].items():
        if sub.startswith("/") or ".." in sub.split("/") or not sub.strip("/"):
            module.fail_json(msg=f"shared_root_layout entry {sub!r} must be a relative path inside the shared root")
        if not re.fullmatch(r"0?[0-7]{3,4}", str(mode)):
            module.fail_json(msg=f"shared_root_layout entry {sub!r}: the mode must be octal like 0755, got {mode!r}")
        p["layout"][sub] = str(mode)
    actions = []
    mounted = findmnt(module, p["path"])
    if not mounted and p["mode"] != "none":
        mount(module, p, actions)
        mounted = "" if module.check_mode else findmnt(module, p["path"])
    if p["persist"] and p["mode"] != "none":
        settle_fstab(module, p, actions)
    if module.check_mode and not mounted:
        # Nothing to verify yet: the mount above has not happened.
        module.exit_json(changed=bool(actions), mounted="", mark="", actions=actions)
    why = not_shared(p, mounted)
    if why:
        module.fail_json(msg=f"{p['node_name']}: {p['path']} is not the shared root ({why}). "
                         "Jobs would write to this node's local disk and lose their data.",
                         mounted=mounted, actions=actions)
    lay_out(module, p, actions)
    mark = read_mark(module, p, actions)
    module.exit_json(changed=bool(actions), mounted=mounted, mark=mark, actions=actions)


if __name__ == "__main__":
    main()
