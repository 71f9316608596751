"""Which verl checkpoint a job may resume from: the newest whole one.

verl saves <checkpoint_dir>/global_step_N/ (each sharded state as <kind>_world_size_W_rank_R.pt, in the
step's folder or in its actor/ and critic/ sub-folders) and only then writes N into
latest_checkpointed_iteration.txt. So a checkpoint is whole when the tracker has reached N and every kind
of shard (every kind any of the job's checkpoints has) has every rank 0..W-1 at the world size the resuming
job runs at. A step folder newer than the tracker is a save that did not finish. Standard library only: the module on
the head imports it.

The checkpoints sit on the shared root, which anyone may write: the tracker is read as a small regular file
(base/files.py: a FIFO or a symlink is never opened), numbers are ASCII digits of bounded length and a step is in
0..STEP_MAX (base/files.py; a folder or tracker beyond it is skipped, saying so), and a step is only
ever one folder of the checkpoint dir itself: a symlinked global_step_N, or one whose real path leaves the
checkpoint dir, is skipped with its reason.
"""

import os
import re

from ansible.module_utils.base.files import MAX_DIGITS, STEP_MAX, RecordError, ascii_int, bounded_step, read_small

TRACKER = "latest_checkpointed_iteration.txt"
_DIGITS = f"[0-9]{{1,{MAX_DIGITS}}}"
_STEP = re.compile(rf"global_step_({_DIGITS})", re.ASCII)
_SHARD = re.compile(rf"(?P<kind>.+)_world_size_(?P<world>{_DIGITS})_rank_(?P<rank>{_DIGITS})\.pt", re.ASCII)


class CheckpointError(Exception):
    """No checkpoint to resume from; str() is one line saying why."""


class NoCheckpoint(CheckpointError):
    """Not a single step folder: the job never saved (an attempt then starts from the beginning)."""


def read_tracker(checkpoint_dir):
    """(the step latest_checkpointed_iteration.txt names, None) or (None, why not): no file, not a regular file (a
    FIFO, a symlink), not a number in at most MAX_DIGITS ASCII digits, a step beyond STEP_MAX."""
    path = os.path.join(checkpoint_dir, TRACKER)
    try:
        raw = read_small(path, 64)
    except RecordError as exc:
        return None, str(exc).replace(f"{path}: ", "", 1)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    if raw is None:
        return None, "is missing"
    step = ascii_int(raw.decode("ascii", errors="replace"))
    if step is None:
        return None, f"does not hold a step in ASCII digits (at most {MAX_DIGITS})"
    return (step, None) if bounded_step(step) is not None else (None, f"names a step beyond {STEP_MAX}")


def shard_groups(step_dir):
    """{(sub-folder, kind): {"worlds": {W, ...}, "ranks": {R, ...}}} of the shards under a step folder."""
    groups = {}
    for folder, _, files in os.walk(step_dir):  # symlinked sub-folders are not entered
        where = os.path.relpath(folder, step_dir)
        for name in files:
            match = _SHARD.fullmatch(name)
            if match:
                group = groups.setdefault((where, match["kind"]), {"worlds": set(), "ranks": set()})
                group["worlds"].add(int(match["world"]))
                group["ranks"].add(int(match["rank"]))
    return groups


def _label(where, kind):
    return kind if where == "." else f"{where}/{kind}"


def check_step(step_dir, world_size, expected=()):
    """(whole, why not, made at another world size) for one global_step_N folder.

    expected: (sub-folder, kind) pairs the job's other checkpoints have; a step without one lost it."""
    groups = shard_groups(step_dir)
    if not groups:
        return False, "holds no model shards", False
    lost = sorted(set(expected) - set(groups))
    if lost:
        return False, f"lacks {', '.join(_label(*key) for key in lost)} (the other checkpoints have it)", False
    for (where, kind), group in sorted(groups.items()):
        label = _label(where, kind)
        if group["worlds"] != {world_size}:
            made = ", ".join(str(w) for w in sorted(group["worlds"]))
            return False, f"{label} was saved at world size {made}, this job runs at {world_size}", True
        missing = sorted(set(range(world_size)) - group["ranks"])
        if missing:
            return False, f"{label} lacks rank(s) {', '.join(str(r) for r in missing)} of {world_size}", False
    return True, "", False


def outside(path, real_dir):
    """Why a step folder is not the checkpoint dir's own (a symlink, or its real path leaves real_dir), or None."""
    if os.path.islink(path):
        return "is a symlink: a step is never taken from outside its checkpoint dir"
    if os.path.dirname(os.path.realpath(path)) != real_dir:
        return "its real path leaves the checkpoint dir"
    return None


def newest_whole(checkpoint_dirs, world_size):
    """The newest whole checkpoint over checkpoint_dirs (a job's and its earlier attempts'), at world_size.

    Returns {"path", "step", "skipped": [(path, why), ...]}; raises CheckpointError when none is whole,
    saying so plainly when the checkpoints were made at another world size (resume is refused then).
    """
    candidates, skipped = [], []
    for directory in checkpoint_dirs:
        if not os.path.isdir(directory):
            continue
        tracked, untracked = read_tracker(directory)
        real = os.path.realpath(directory)
        for name in sorted(os.listdir(directory)):
            match = _STEP.fullmatch(name)
            path = os.path.join(directory, name)
            if not match or not os.path.isdir(path):
                continue
            step, why = bounded_step(int(match[1])), outside(path, real)
            if step is None:
                skipped.append((path, f"its step is beyond {STEP_MAX}"))
            elif why:
                skipped.append((path, why))
            elif tracked is None:
                skipped.append((path, f"{TRACKER} {untracked}: no save is known to have finished"))
            elif step > tracked:
                skipped.append((path, f"newer than {TRACKER} ({tracked}): its save did not finish"))
            else:
                candidates.append((step, path))
    # A kind of shard deleted whole (one rank at world size 1) shows only against the other checkpoints.
    expected = set().union(*(shard_groups(path) for _, path in candidates)) if candidates else set()
    other_world = []
    for step, path in sorted(candidates, reverse=True):
        whole, why, mismatch = check_step(path, world_size, expected)
        if whole:
            return {"path": path, "step": step, "skipped": skipped}
        skipped.append((path, why))
        if mismatch:
            other_world.append(f"{os.path.basename(path)}: {why}")
    if other_world:
        raise CheckpointError(f"no checkpoint at world size {world_size} to resume from ({other_world[0]}); "
                              "resume refused: run with the world size it was saved at")
    if not skipped:
        raise NoCheckpoint(f"no checkpoint to resume from in {', '.join(checkpoint_dirs)}")
    path, why = skipped[0]
    raise CheckpointError(f"no whole checkpoint to resume from ({os.path.basename(path)} {why})")
