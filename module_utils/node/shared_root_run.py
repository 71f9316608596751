"""library/shared_root.py's run: mount, verify, lay out and mark the shared root, from parameters to a result.

Also run by ray_node on a worker (its `shared_root` option), so that a worker costs one call, not two: at 16
workers every call on every node costs about 2.5 s of up.yml (docs/performance.md). The steps are in
shared_root_ctl; this file runs the two commands (findmnt, mount) and fails the module in one line naming the node.
"""

import os

from ansible.module_utils.node import shared_root_ctl as ctl

# The argument spec, here because two modules take it: shared_root itself and ray_node's `shared_root` option.
OPTIONS = {
    "path": {"type": "path", "required": True},
    "mode": {"type": "str", "choices": ["nfs", "bind", "none"], "default": "nfs"},
    "source": {"type": "str", "default": ""},
    "nfs_options": {"type": "str", "default": "defaults,_netdev"},
    "persist": {"type": "bool", "default": True},
    "fstab": {"type": "path", "default": "/etc/fstab"},
    "layout": {"type": "dict", "default": {}},
    "node_name": {"type": "str"},
}
REQUIRED_IF = [("mode", "nfs", ("source",)), ("mode", "bind", ("source",))]


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


def run(module, p):
    """{changed, mounted, mark, actions} of the shared root on this node, or the module fails in one line.

    `p` holds the OPTIONS' values; `mark`, when given and not empty, is the storage another node sees: a node that
    sees other storage fails, naming itself, before its caller goes on (ray_node then never starts Ray there).
    """
    p = dict(p, node_name=p.get("node_name") or os.uname().nodename)
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
    if module.check_mode and not mounted and p["mode"] != "none":
        # Nothing to verify yet: the mount above has not happened.
        return {"changed": bool(actions), "mounted": "", "mark": "", "actions": actions}
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
    expected = p.get("mark") or ""
    if expected and mark and mark != expected:
        module.fail_json(msg=f"{p['node_name']}: {p['path']} is not the same storage as on the other nodes "
                         f"(its {ctl.SHARED_ROOT_MARK} differs)", mounted=mounted, mark=mark, actions=actions)
    return {"changed": bool(actions), "mounted": mounted, "mark": mark, "actions": actions}
