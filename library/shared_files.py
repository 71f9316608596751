#!/usr/bin/python
"""Ansible module: keep small files under a folder with the given content, and read others back."""

DOCUMENTATION = r"""
---
module: shared_files
short_description: Keep small files in place with the given content; read others, in one call
description:
  - Writes each of O(files) under O(root) when its content or mode differs (atomically, by rename),
    creating folders with mode 0755. A re-run with the same files changes nothing.
  - Returns the content of each of O(read) (or null when it does not exist), so a caller can decide
    what else to do (e.g. whether a code snapshot is already in place) without another round trip.
options:
  root:
    description: The folder O(files) and O(read) are relative to.
    type: path
    required: true
  files:
    description: Files to keep, each C({dest, content_b64, mode}) with C(dest) relative to O(root).
    type: list
    elements: dict
    default: []
  read:
    description: Files to read back, relative to O(root).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Code snapshot | Place the smoke probe and plugins
  shared_files:
    root: /private/common/code
    files: "{{ lookup('code_tree', 'roles/code_snapshot/files/smoke_probe.py', wantlist=true) }}"
    read: [verl/verl-0.9.1/mvp_marker.py]
"""

RETURN = r"""
written:
  description: Files written (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
contents:
  description: The content of each file of O(read), null when it does not exist.
  returned: always
  type: dict
"""

import base64
import os

from ansible.module_utils.basic import AnsibleModule


def inside(root, rel):
    """root/rel, refusing anything that would leave root."""
    full = os.path.normpath(os.path.join(root, rel))
    if os.path.isabs(rel) or not full.startswith(os.path.normpath(root) + os.sep):
        raise ValueError(f"{rel!r} is not a path inside {root}")
    return full


def differs(path, content, mode):
    try:
        if os.stat(path).st_mode & 0o7777 != mode:
            return True
        with open(path, "rb") as handle:
            return handle.read() != content
    except FileNotFoundError:
        return True


def write(path, content, mode):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as handle:
        handle.write(content)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "default": []},
            "read": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    written, contents = [], {}
    try:
        for entry in p["files"]:
            path = inside(p["root"], str(entry["dest"]))
            content = base64.b64decode(entry["content_b64"])
            mode = int(str(entry.get("mode", "0644")), 8)
            if differs(path, content, mode):
                written.append(entry["dest"])
                if not module.check_mode:
                    write(path, content, mode)
        for rel in p["read"]:
            try:
                with open(inside(p["root"], rel), encoding="utf-8") as handle:
                    contents[rel] = handle.read()
            except FileNotFoundError:
                contents[rel] = None
    except (OSError, ValueError, KeyError) as exc:
        module.fail_json(msg=f"shared_files under {p['root']}: {exc}", written=written)
    module.exit_json(changed=bool(written), written=written, contents=contents)


if __name__ == "__main__":
    main()
