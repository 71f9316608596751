"""The durable record of one job on the shared root: ${shared_root}/jobs/<submission_id>/.

It outlives the Ray head (whose job history vanishes on restart), so everything a person
needs to understand a job later is written here: what was asked, what Ray said, the logs
and the final state. Writes are atomic; an existing record is never overwritten wholesale.
"""

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time

LAYOUT = ("config", "logs", "checkpoints", "debug")
LOCK_FILE = ".submit.lock"
STATUS_LOCK_FILE = ".status.lock"  # held only while status.json is read, merged and written
_STEP_LINE = re.compile(r"\bstep:\s*(\d+)\b")
_LOSS = re.compile(r"\btrain/loss:\s*([-+0-9.eE]+)")
# Ray colours the "(Actor pid=N)" prefix of a worker's lines; a progress line shows neither.
_RAY_PREFIX = re.compile(r"\x1b\[[0-9;]*m|^\s*\([^)]*pid=\d+[^)]*\)\s*")


def paths(output_dir):
    join = os.path.join
    return {
        "dir": output_dir,
        "job_spec": join(output_dir, "config", "job_spec.json"),
        "runtime_env": join(output_dir, "config", "runtime_env.json"),
        "submit_cmd": join(output_dir, "config", "submit_cmd.txt"),
        "env_names": join(output_dir, "config", "env_var_names.json"),
        "submit_out": join(output_dir, "logs", "ray_job_submit.out"),
        "driver_log": join(output_dir, "logs", "driver.log"),
        "checkpoints": join(output_dir, "checkpoints"),
        "status_pre": join(output_dir, "debug", "ray_status_pre.txt"),
        "status_post": join(output_dir, "debug", "ray_status_post.txt"),
        "job_list_post": join(output_dir, "debug", "ray_job_list_post.txt"),
        "nodes": join(output_dir, "debug", "nodes.json"),
        "actors": join(output_dir, "debug", "actors.json"),
        "failure": join(output_dir, "debug", "failure.txt"),
        # Ray's error logs of a failed job's workers and the raylet logs of their nodes.
        "debug_logs": join(output_dir, "debug", "logs"),
        "status": join(output_dir, "status.json"),
        "preflight": join(output_dir, "preflight.json"),
        # The reason of a stop, left before Ray is asked (see ray_job.stop_for).
        "stop_request": join(output_dir, ".stop_request"),
    }


def create_exclusive(output_dir):
    """Create the job directory; False if it already exists (then nothing is touched).

    mkdir is atomic, so of two submissions racing for one id exactly one gets True.
    """
    os.makedirs(os.path.dirname(output_dir.rstrip("/")), exist_ok=True)
    try:
        os.mkdir(output_dir)
    except FileExistsError:
        return False
    ensure_layout(output_dir)
    return True


def ensure_layout(output_dir):
    """The record's sub-directories, also after a submit killed before it made them all."""
    for sub in LAYOUT:
        os.makedirs(os.path.join(output_dir, sub), exist_ok=True)
    # Jobs run as whichever user the workers run as; the plan lets everyone write.
    os.chmod(os.path.join(output_dir, "checkpoints"), 0o777)


class LockTimeout(OSError):
    """Another run held the record's lock for longer than we wait."""


@contextlib.contextmanager
def record_lock(output_dir, timeout_s=120, name=LOCK_FILE):
    """Hold the record's lock: runs of one submission id (a retry racing an interrupted one) go one at a time.

    flock on a file inside the record; on NFS the kernel maps it to a lock the server arbitrates. A run that
    hangs while holding it (a dashboard that never answers) makes the next one fail after timeout_s, saying so."""
    fd = os.open(os.path.join(output_dir, name), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"another run of {os.path.basename(output_dir)} has held its record's lock "
                                      f"for {timeout_s}s; is it stuck? (the lock is {name} in the record)") \
                        from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def write_text(path, text):
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_text(obj):
    """How the record writes JSON (stable, so an unchanged object leaves its file unchanged)."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def write_json(path, obj):
    write_text(path, json_text(obj))


def read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def last_step_line(log_text, width=200):
    """The newest verl `step:N - ...` line of a log, shortened, or None."""
    for line in reversed(log_text.splitlines()):
        if _STEP_LINE.search(line):
            line = _RAY_PREFIX.sub("", _RAY_PREFIX.sub("", line)).strip()
            return line if len(line) <= width else line[: width - 3] + "..."
    return None


def step_losses(log_text):
    """[(step, loss)] from verl's console logger lines, in order."""
    found = []
    for line in log_text.splitlines():
        step, loss = _STEP_LINE.search(line), _LOSS.search(line)
        if step and loss:
            try:
                found.append((int(step.group(1)), float(loss.group(1))))
            except ValueError:  # e.g. "train/loss:-inf" captures just "-"
                continue
    return found


def now_ms():
    return int(time.time() * 1000)


def final_state(ray_status, reason):
    """The state we record: a job we stopped for a timeout failed, whatever Ray calls it."""
    if reason in ("PENDING_TIMEOUT", "DEADLINE_EXCEEDED"):
        return "FAILED"
    return ray_status


def phases(submitted_ms, start_ms, end_ms, submit_s):
    """Seconds spent submitting, waiting for resources, and running."""
    out = {"submit_s": round(submit_s, 3) if submit_s is not None else None}
    if submitted_ms and start_ms:
        out["pending_s"] = round(max(0, start_ms - submitted_ms) / 1000, 3)
    if start_ms and end_ms:
        out["running_s"] = round(max(0, end_ms - start_ms) / 1000, 3)
    if submitted_ms and end_ms:
        out["total_s"] = round(max(0, end_ms - submitted_ms) / 1000, 3)
    return out
