"""Mount, verify, lay out and mark the shared root on the node we run on.

The work of library/shared_root.py, which keeps only its documentation, its argument spec and main()
(and the two commands it runs, findmnt and mount). `p` is the module's parameters; `actions` collects
what was (or in check mode would be) done.

The run (run(), at the end) goes from parameters to a result: it runs the two commands (findmnt, mount) and fails
the module in one line naming the node. Also run by ray_node on a worker (its `shared_root` option), so that a worker
costs one call, not two: at 16 workers every call on every node costs about 2.5 s of up.yml (docs/performance.md).
"""

import os
import re
import secrets

from ansible.module_utils.base.conventions import SHARED_ROOT_MARK


class NotUsable(Exception):
    """The shared root cannot be used on this node; str() is one line naming the node."""


def check_settings(p):
    """Refuse a relative path and layout entries outside the shared root or with a mode that is not octal.

    Returns the layout with every mode as text (0755 given as a YAML int stays 0755); raises ValueError
    naming the setting.
    """
    if not os.path.isabs(p["path"]):
        raise ValueError(f"shared_root_path must be absolute, got {p['path']!r}")
    layout = {}
    for sub, mode in p["layout"].items():
        if sub.startswith("/") or ".." in sub.split("/") or not sub.strip("/"):
            raise ValueError(f"shared_root_layout entry {sub!r} must be a relative path inside the shared root")
        if not re.fullmatch(r"0?[0-7]{3,4}", str(mode)):
            raise ValueError(f"shared_root_layout entry {sub!r}: the mode must be octal like 0755, got {mode!r}")
        layout[sub] = str(mode)
    return layout


def mount_command(p):
    if p["mode"] == "bind":
        return ["mount", "--bind", p["source"], p["path"]]
    return ["mount", "-t", "nfs", "-o", p["nfs_options"], p["source"], p["path"]]


def fstab_line(p):
    if p["mode"] == "nfs":
        return f"{p['source']} {p['path']} nfs {p['nfs_options']} 0 0"
    return f"{p['source']} {p['path']} none bind 0 0"


def settle_fstab(p, actions, check_mode=False):
    """Make p['fstab'] carry exactly one line for the shared root's mount point."""
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
    if not check_mode:
        tmp = p["fstab"] + ".shared_root.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("\n".join([*kept, line]) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, p["fstab"])


def same_directory(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_ino, sa.st_dev) == (sb.st_ino, sb.st_dev)


def not_shared(p, mounted):
    """Why p['path'] is not the shared root, or None when it is (`mounted`: findmnt's SOURCE FSTYPE)."""
    if not mounted:
        return "nothing is mounted there"
    if p["mode"] == "nfs" and mounted.split()[0] != p["source"]:
        return f"mounted: {mounted}; expected nfs {p['source']}"
    if p["mode"] == "bind" and not same_directory(p["source"], p["path"]):
        return f"mounted: {mounted}; expected a bind mount of {p['source']}"
    return None


def lay_out(p, actions, check_mode=False):
    """Create the layout's directories with their modes; raises NotUsable for one someone else owns."""
    # Parents first (common before common/code).
    for sub, mode_text in sorted(p["layout"].items()):
        mode = int(mode_text, 8)
        folder = os.path.join(p["path"], sub)
        try:
            info = os.stat(folder)
        except FileNotFoundError:
            info = None
        if info is not None and not mode & 0o002 and info.st_uid != os.geteuid():
            raise NotUsable(f"{p['node_name']}: {folder} belongs to uid {info.st_uid}, not to uid {os.geteuid()}: "
                            "code there runs in every job, so only its owner may write it; "
                            "check what is in it, then chown it")
        if info is not None and info.st_mode & 0o7777 == mode:
            continue
        actions.append(f"{'create' if info is None else 'chmod'} {folder} {mode_text}")
        if check_mode:
            continue
        try:
            os.mkdir(folder, mode)
        except FileExistsError:  # another node of the same storage made it a moment ago
            pass
        os.chmod(folder, mode)  # mkdir's mode passes through the umask


def read_mark(p, actions, check_mode=False):
    """The storage's mark, written once: O_EXCL lets exactly one node of several create it."""
    path = os.path.join(p["path"], SHARED_ROOT_MARK)
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except FileNotFoundError:
        pass
    actions.append(f"mark the storage ({path})")
    if check_mode:
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


# The run: the two commands (findmnt, mount), from parameters to a result.

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
    argv = mount_command(p)
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
        p["layout"] = check_settings(p)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    actions = []
    mounted = findmnt(module, p["path"])
    if not mounted and p["mode"] != "none":
        mount(module, p, actions)
        mounted = "" if module.check_mode else findmnt(module, p["path"])
    if p["persist"] and p["mode"] != "none":
        settle_fstab(p, actions, module.check_mode)
    if module.check_mode and not mounted and p["mode"] != "none":
        # Nothing to verify yet: the mount above has not happened.
        return {"changed": bool(actions), "mounted": "", "mark": "", "actions": actions}
    why = not_shared(p, mounted)
    if why:
        module.fail_json(msg=f"{p['node_name']}: {p['path']} is not the shared root ({why}). "
                         "Jobs would write to this node's local disk and lose their data.",
                         mounted=mounted, actions=actions)
    try:
        lay_out(p, actions, module.check_mode)
    except NotUsable as exc:
        module.fail_json(msg=str(exc), actions=actions)
    mark = read_mark(p, actions, module.check_mode)
    expected = p.get("mark") or ""
    if expected and mark and mark != expected:
        module.fail_json(msg=f"{p['node_name']}: {p['path']} is not the same storage as on the other nodes "
                         f"(its {SHARED_ROOT_MARK} differs)", mounted=mounted, mark=mark, actions=actions)
    return {"changed": bool(actions), "mounted": mounted, "mark": mark, "actions": actions}
