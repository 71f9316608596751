"""The control host's runners: their lock (scripts/regression.py, scripts/watch.py) and the regression's retention.

What a regression run writes is module_utils/regression/report.py's (the report module runs it on the head).
"""

import fcntl
import json
import os
import socket
import time

from ansible.module_utils.regression.report import iso_time


def retention(run_dirs, keep):
    """Run ids to delete, oldest first: finished runs beyond the newest `keep`; unfinished never."""
    if keep < 0:
        raise ValueError("keep must be >= 0")
    finished = sorted((r for r in run_dirs if r[2]), key=lambda r: r[1] or 0, reverse=True)
    return [run_id for run_id, _, _ in reversed(finished[keep:])]


class LockHeld(Exception):
    """Another runner of the same kind (a regression, a watcher pass) holds the lock."""

    def __init__(self, path, holder, kind="regression"):
        self.path, self.holder = path, holder
        if holder:
            since = iso_time(holder["started_at"]) if isinstance(holder.get("started_at"), (int, float)) else "?"
            who = (f"pid {holder.get('pid')} on {holder.get('host')}, run {holder.get('run_id')}, "
                   f"since {since}")
        else:  # it has the lock but has not written its name yet
            who = "a process that has not recorded itself yet"
        super().__init__(f"{kind} lock {path} is held by {who}")


class RunLock:
    """An exclusive, non-blocking flock on `path` for one runner of a kind on the control host.

    `kind` only names the lock in LockHeld's message ("regression lock ... is held by ...").

    flock belongs to the open file description, so the kernel drops it when the holder's
    process dies, however it dies: a crashed runner never leaves a stale lock behind. The file
    itself stays; it only tells the next runner who holds the lock.
    """

    def __init__(self, path, run_id, kind="regression"):
        self.path, self.run_id, self.kind = path, run_id, kind
        self._fd = None

    def acquire(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockHeld(self.path, holder, self.kind) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": self.run_id,
                  "started_at": int(time.time() * 1000)}  # epoch ms, like the records
        # Written in place, not by rename: a new file would be a different, unlocked inode.
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self):
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)  # no stale holder info for the next reader
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def _read_holder(fd):
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}
