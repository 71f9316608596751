"""Which records are open, found without reading every record: <shared_root>/jobs/.open/<id>, an empty file per
record whose status.json is not final.

A record gets its entry when submit writes it (submit.submit_locked, before its first status.json) and loses it once
its status.json is final (Record.save_status). Readers (reconcile.open_records: up.yml's reconcile, the watcher,
status.yml) list the folder and read only those records, so their cost grows with the open jobs, not with years of
finished ones; an entry whose record turns out final (a run killed between its two writes) is removed by the next
reader. A shared root written before the index existed has no .open/.complete: the first reader scans every record
once, writes the entries of the open ones and the mark, and from then on reads the index.

The folder is on the share, which is data: nothing is created, listed or removed through a symlink (files.py walks
from the jobs folder without following one), and only names that are job ids count.
"""

import errno
import os

from ansible.module_utils.base import conventions, files

INDEX = ".open"
COMPLETE = ".complete"
# Final FAILED records whose retry was due and not yet decided: the watcher takes them up in every pass until their
# next attempt is submitted or a person must decide, so a pass that could not submit it loses no retry.
RETRY = ".retry"


def _jobs_dir(output_dir):
    return os.path.dirname(output_dir.rstrip("/"))


def add(output_dir, index=INDEX):
    """Enter the record at output_dir (<jobs>/<id>) in its jobs folder's index (nothing if it is there)."""
    jobs = _jobs_dir(output_dir)
    _ensure(jobs, index)
    files.write_atomic(os.path.join(jobs, index, os.path.basename(output_dir.rstrip("/"))), b"", base=jobs)


def remove(output_dir, index=INDEX):
    """Take the record out of the index (nothing if it is not in it)."""
    jobs = _jobs_dir(output_dir)
    _unlink(jobs, os.path.basename(output_dir.rstrip("/")), index)


def mark_complete(jobs):
    """Say the index lists every open record of jobs (after a full scan wrote their entries)."""
    _ensure(jobs)
    files.write_atomic(os.path.join(jobs, INDEX, COMPLETE), b"", base=jobs)


def listed(jobs, index=INDEX):
    """The ids the index of the jobs folder lists, sorted, or None when it is not complete (no index yet, or not a
    folder: a symlink there is never followed). The retry index needs no mark: none is an empty one."""
    try:
        fd = os.open(os.path.join(jobs, index), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return [] if index == RETRY else None
    try:
        names = os.listdir(fd)
    finally:
        os.close(fd)
    if COMPLETE not in names and index != RETRY:
        return None
    return sorted(n for n in names if conventions.matches(conventions.ID_RULE, n))


def _ensure(jobs, index=INDEX):
    """The index folder, made if missing; one that is not a folder (a symlink, a file) is refused."""
    files.make_folder(os.path.join(jobs, index), "the open records' index folder", owned=False)


def _unlink(jobs, name, index=INDEX):
    try:
        fd = os.open(os.path.join(jobs, index), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
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
