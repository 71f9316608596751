"""Which records are open, found without reading every record: <shared_root>/jobs/.open/<id>, an empty file per
record whose status.json is not final.

A record gets its entry when submit writes it (submit.submit_locked, before its first status.json) and loses it once its status.json is final
(Record.save_status). Readers (reconcile.open_records: up.yml's reconcile, the watcher, status.yml) list the folder
and read only those records, so their cost grows with the open jobs, not with years of finished ones; an entry whose
record turns out final (a run killed between its two writes) is removed by the next reader. A shared root written
before the index existed has no .open/.complete: the first reader scans every record once, writes the entries of the
open ones and the mark, and from then on reads the index.

The folder is on the share, which is data: nothing is created, listed or removed through a symlink (files.py walks
from the jobs folder without following one), and only names that are job ids count.
"""

import errno
import os
import stat

from ansible.module_utils.base import conventions, files

INDEX = ".open"
COMPLETE = ".complete"


def _jobs_dir(output_dir):
    return os.path.dirname(output_dir.rstrip("/"))


def add(output_dir):
    """Enter the record at output_dir (<jobs>/<id>) in its jobs folder's index (nothing if it is there)."""
    jobs = _jobs_dir(output_dir)
    _ensure(jobs)
    files.write_atomic(os.path.join(jobs, INDEX, os.path.basename(output_dir.rstrip("/"))), b"", base=jobs)


def remove(output_dir):
    """Take the record out of the index (nothing if it is not in it)."""
    jobs = _jobs_dir(output_dir)
    _unlink(jobs, os.path.basename(output_dir.rstrip("/")))


def mark_complete(jobs):
    """Say the index lists every open record of jobs (after a full scan wrote their entries)."""
    _ensure(jobs)
    files.write_atomic(os.path.join(jobs, INDEX, COMPLETE), b"", base=jobs)


def listed(jobs):
    """The ids the index of the jobs folder lists, sorted, or None when it is not complete (no index yet, or not a
    folder: a symlink there is never followed)."""
    try:
        fd = os.open(os.path.join(jobs, INDEX), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        names = os.listdir(fd)
    finally:
        os.close(fd)
    if COMPLETE not in names:
        return None
    return sorted(n for n in names if conventions.matches(conventions.ID_RULE, n))


def _ensure(jobs):
    """The index folder, made if missing; one that is not a folder (a symlink, a file) is refused."""
    path = os.path.join(jobs, INDEX)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            raise files.UnsafeFile(f"{path}: is {files.kind(mode)}, not the open records' index folder") from None


def _unlink(jobs, name):
    try:
        fd = os.open(os.path.join(jobs, INDEX), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return
        raise
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)
