"""A daemon's directories and files (module_utils/daemons/ctl.py): made, owned, moded and written as root without ever
following a symbolic link, and reachable by the user the daemon runs as, however their parent folders were made."""

import errno
import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.base.files import UnsafeFile, make_folder

# Folders of the system itself: never opened for a daemon's user (a path through one of them that the user cannot
# enter is an error naming it). A folder below them that blocks the user, owned by root, is the project's or the
# site's own (/etc/ray-verl): it gets search permission for others, never read.
SYSTEM_DIRS = frozenset({"/", "/etc", "/var", "/var/lib", "/var/log", "/var/tmp", "/run", "/tmp", "/usr", "/usr/local",
                         "/opt", "/srv", "/home", "/root", "/mnt", "/media"})


class DaemonError(Exception):
    """One line naming the daemon, file or setting at fault (never a file's content)."""


def ids(user, group=None):
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        raise DaemonError(f"user {user} does not exist on this host") from None
    try:
        gid = grp.getgrnam(group).gr_gid if group else pwd.getpwnam(user).pw_gid
    except KeyError:
        raise DaemonError(f"group {group} does not exist on this host") from None
    return uid, gid


def lstat(path):
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(found.st_mode):
        raise DaemonError(f"{path} is a symbolic link: refused (the daemon's files are never followed through one)")
    return found


def makedirs(path):
    """Make path and its missing parents, each 0755 whatever the umask (os.makedirs gives parents the umask's mode: a
    0750 /etc/ray-verl would hide Prometheus's configuration from its user)."""
    missing = []
    while lstat(path) is None:
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        try:
            make_folder(folder, "a folder of the daemon's")
        except UnsafeFile as exc:
            raise DaemonError(str(exc)) from None


def directory(entry, check):
    """Make or fix one directory ({path, owner, group, mode}); True when it changed (or would)."""
    uid, gid = ids(entry["owner"], entry.get("group"))
    mode = int(entry["mode"], 8)
    found = lstat(entry["path"])
    if found is not None and not stat.S_ISDIR(found.st_mode):
        raise DaemonError(f"{entry['path']} exists and is not a directory")
    if found is not None and (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (uid, gid, mode):
        return False
    if not check:
        if found is None:
            makedirs(entry["path"])
        os.chown(entry["path"], uid, gid, follow_symlinks=False)
        os.chmod(entry["path"], mode)
    return True


def file_differs(entry, uid, gid, mode):
    found = lstat(entry["path"])
    if found is None:
        return True
    if not stat.S_ISREG(found.st_mode):
        raise DaemonError(f"{entry['path']} exists and is not a regular file")
    if (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) != (uid, gid, mode):
        return True
    with open(entry["path"], "rb") as handle:
        return handle.read() != entry["content"].encode()


def place(entry, check, run):
    """Write one file ({path, content, mode, owner, group, validate}) when it differs: a new file beside it, checked by
    its validate command (the word %s is its path) before it replaces the one in use. True when it changed."""
    uid, gid = ids(entry["owner"], entry.get("group"))
    mode = int(entry["mode"], 8)
    if not file_differs(entry, uid, gid, mode):
        return False
    if check:
        return True
    folder = os.path.dirname(entry["path"])
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(entry["path"]) + ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(entry["content"].encode())
            os.fchown(handle.fileno(), uid, gid)
            os.fchmod(handle.fileno(), mode)
        if entry.get("validate"):
            argv = [word.replace("%s", tmp) for word in entry["validate"]]
            rc, out, err = run(argv)
            if rc != 0:
                said = (err or out).strip().splitlines()
                raise DaemonError(f"{entry['path']}: {argv[0]} refused the new file, which was not put in place: "
                                  f"{said[-1][:300] if said else 'exit ' + str(rc)}")
        os.replace(tmp, entry["path"])
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def _can_enter(found, uid, gids):
    if uid == 0:
        return True
    if found.st_uid == uid:
        return bool(found.st_mode & stat.S_IXUSR)
    if found.st_gid in gids:
        return bool(found.st_mode & stat.S_IXGRP)
    return bool(found.st_mode & stat.S_IXOTH)


def _who(user):
    uid, gid = ids(user)
    return uid, set(os.getgrouplist(user, gid))


def blocking(path, user):
    """The existing parent folders of path that user cannot enter, outermost first, each with its stat."""
    uid, gids = _who(user)
    found, folder = [], os.path.dirname(path)
    while True:
        try:
            here = os.stat(folder)  # a linked parent (/var/run) is judged by what it leads to
        except FileNotFoundError:
            here = None
        if here is not None and not _can_enter(here, uid, gids):
            found.append((folder, here))
        if folder == "/":
            return list(reversed(found))
        folder = os.path.dirname(folder)


def _open_for_others(folder):
    """o+x on folder, through a descriptor: never through a link, and only while root still owns it."""
    lstat(folder)  # a link: refused, naming it
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # made a link since
            raise DaemonError(f"{folder} is a symbolic link: refused (never followed by root)") from None
        raise
    try:
        found = os.fstat(fd)
        if found.st_uid != 0:
            raise DaemonError(f"{folder} is no longer root's (uid {found.st_uid}): left as it is")
        os.fchmod(fd, stat.S_IMODE(found.st_mode) | stat.S_IXOTH)
    finally:
        os.close(fd)


def open_parents(paths, user, check):
    """Let user reach every path: a root-owned parent folder that keeps it out gets search permission for others
    (o+x). Returns the folders opened (or that would be). A system folder, one another user owns, or one whose group
    is the user's (its group bits, not the others', decide then) is an error naming it and the fix (a fresh head once
    made /etc/ray-verl 0700 and Prometheus could not read its files)."""
    _, gids = _who(user)
    opened = []
    for path in paths:
        for folder, found in blocking(path, user):
            fix = "g+x" if found.st_gid in gids else "o+x"
            if folder in SYSTEM_DIRS or found.st_uid != 0 or fix == "g+x":
                raise DaemonError(f"user {user} cannot enter {folder} (mode {stat.S_IMODE(found.st_mode):04o}, owner "
                                  f"uid {found.st_uid}, group gid {found.st_gid}), on the way to {path}: give it "
                                  f"search permission (chmod {fix} {folder}) or move the daemon's files")
            if folder not in opened:
                opened.append(folder)
                if not check:
                    _open_for_others(folder)
    return opened
