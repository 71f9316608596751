"""Stale POSIX shared-memory segments that vLLM's CPU build leaves in /dev/shm.

vLLM's processes (API server, engine core) exchange data through multiprocessing.shared_memory segments
(`psm_*`, 160-250 MB each) and semaphores (`sem.mp-*`). When a job ends, Ray kills those processes and nobody
unlinks the segments: the tmpfs fills job after job. A segment is stale when no process on the host has it open
or mapped; only such segments are removed, so a running job's segments are never touched.

Runs where vLLM's server starts (rollout.py calls clean_stale_segments when verl's vLLM server module is
imported, that is once per job on each node that serves a rollout). Standard library only.
"""

from __future__ import annotations

import fnmatch
import os

SHM_DIR = "/dev/shm"
PATTERNS = ("psm_*", "sem.mp-*")


def referenced_paths(proc: str = "/proc") -> set[str]:
    """Every file the host's processes have open (fd links) or mapped (maps), as paths."""
    seen: set[str] = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return seen
    for pid in pids:
        base = os.path.join(proc, pid)
        try:
            for fd in os.listdir(os.path.join(base, "fd")):
                try:
                    seen.add(os.readlink(os.path.join(base, "fd", fd)))
                except OSError:
                    continue
        except OSError:
            pass
        try:
            with open(os.path.join(base, "maps"), encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    fields = line.split(None, 5)
                    if len(fields) == 6:
                        seen.add(fields[5].strip().removesuffix(" (deleted)"))
        except OSError:
            continue
    return seen


def stale_segments(shm_dir: str = SHM_DIR, referenced: set[str] | None = None,
                   patterns: tuple[str, ...] = PATTERNS) -> list[str]:
    """Paths of segments in shm_dir named like vLLM's that nothing references, sorted."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    in_use = referenced_paths() if referenced is None else referenced
    found = []
    for name in names:
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            continue
        path = os.path.join(shm_dir, name)
        if path not in in_use and os.path.isfile(path):
            found.append(path)
    return sorted(found)


def clean_stale_segments(shm_dir: str = SHM_DIR, referenced: set[str] | None = None) -> list[tuple[str, int]]:
    """Remove the stale segments; [(path, bytes)] of what was removed."""
    removed = []
    for path in stale_segments(shm_dir, referenced):
        try:
            size = os.path.getsize(path)
            os.unlink(path)
        except OSError:
            continue  # gone already, or not ours to remove
        removed.append((path, size))
    return removed
