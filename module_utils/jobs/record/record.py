"""The durable record of one job on the shared root: ${shared_root}/jobs/<submission_id>/.

It outlives the Ray head (whose job history vanishes on restart), so everything a person needs to understand a
job later is written here: what was asked, what Ray said, the logs and the final state. Writes are atomic; an
existing record is never overwritten wholesale. status.json is read and written only through Record.status and
Record.save_status, which speak StatusFile (status.py) and hold the record's status lock while they merge. Every
file of a record is data anyone who can write the share may have shaped: it is read, written and locked only
through files.py (no symlink followed, regular files only, a cap on what is read).
"""

import contextlib
import json
import os
import stat
import time

from ansible.module_utils.base import conventions, files, model
from ansible.module_utils.base.conventions import RECORD_LAYOUT as LAYOUT
from ansible.module_utils.base.conventions import record_paths as paths
from ansible.module_utils.base.files import UnsafeFile, json_text, read_json, read_small, write_json  # noqa: F401
from ansible.module_utils.jobs.record import open_index, retry
from ansible.module_utils.jobs.record.status import Merge, Preflight, RecordError, StatusFile

LOCK_FILE = ".submit.lock"
STATUS_LOCK_FILE = ".status.lock"  # held only while status.json is read, merged and written
# Where a status.json whose content could not be trusted is kept (status.json.untrusted-<ms>) before another
# replaces it: each one is kept.
UNTRUSTED_SUFFIX = ".untrusted-"
# A rebuilt status's `rebuilt` when there was no status.json at all.
LOST = "status.json is lost"
# ... and when it is there but could not be read at all (nothing is judged from that guess, nothing written over it).
UNREADABLE = "status.json cannot be read now"
# The most read of a record's status.json, spec or preflight.json (bytes): more is not the module's.
STATUS_CAP = 1 << 20
PREFLIGHT_CAP = 64 << 10
# The cap of each text of preflight.json (roles/code_snapshot/files/job_preflight.py) that goes into status.json.
PREFLIGHT_TEXT_CAP = 1024


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
    """The record's sub-directories, also after a submit killed before it made them all (one made a symlink or a
    file meanwhile: UnsafeFile, nothing is made or changed through it)."""
    for sub in LAYOUT:
        path = os.path.join(output_dir, sub)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            raise UnsafeFile(f"{path}: is {files.kind(mode)}, not a directory of the record")
    # Jobs run as whichever user the workers run as; the plan lets everyone write (chmod through no symlink). The
    # sticky bit keeps one user from renaming or removing what another wrote there (the acceptance result's folder).
    fd = os.open(os.path.join(output_dir, "checkpoints"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, 0o1777)
    finally:
        os.close(fd)


class LockTimeout(OSError):
    """Another run held the record's lock for longer than we wait."""


@contextlib.contextmanager
def record_lock(output_dir, timeout_s=120, name=LOCK_FILE):
    """Hold the record's lock: runs of one submission id (a retry racing an interrupted one) go one at a time.

    flock on a file inside the record; on NFS the kernel maps it to a lock the server arbitrates. A run that
    hangs while holding it (a dashboard that never answers) makes the next one fail after timeout_s, saying so."""
    def busy():
        return LockTimeout(f"another run of {os.path.basename(output_dir)} has held its record's lock for "
                           f"{timeout_s}s; is it stuck? (the lock is {name} in the record)")

    with files.held_lock(os.path.join(output_dir, name), timeout_s, busy):
        yield


def write_text(path, text, base=None):
    """Write text (or bytes) via a temporary file and rename, so a crash never leaves half a file; a symlink at path
    is replaced, never written through (files.write_atomic; base: the record's directory, when path is inside it)."""
    files.write_atomic(path, text if isinstance(text, bytes) else text.encode("utf-8"), base=base)


def now_ms():
    return int(time.time() * 1000)


class UnreadableStatus(RecordError):
    """status.json is there but the system would not read it (EIO, ESTALE, EACCES): nothing may replace it."""


def read_status(path):
    """The StatusFile in a status.json; None when there is none; RecordError (one line naming the file) when its
    content cannot be trusted (a symlink, not a regular file, over STATUS_CAP, not UTF-8, not JSON, not an object, a
    field of the wrong type); UnreadableStatus when the file cannot be read at all."""
    try:
        raw = read_small(path, STATUS_CAP)
    except OSError as exc:
        raise UnreadableStatus(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"{path}: is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise RecordError(f"{path}: is not JSON") from None
    return StatusFile.from_dict(data, where=path)


def status_of(shared_root, sid):
    """The status of job sid's record (a rebuilt one when status.json is lost or untrusted; None: no record)."""
    output_dir = conventions.job_dir(shared_root, sid)
    return Record(output_dir, sid).status() if os.path.isdir(output_dir) else None


class Record:
    """One job's record directory: its files, its locks and the one way to read and write its status.json.

    `changed` says whether this run wrote anything into the record."""

    def __init__(self, output_dir, sid):
        self.dir = output_dir
        self.sid = sid
        self.path = paths(output_dir)
        self.changed = False

    def write_text(self, path, text):
        """Write a record file when its content differs (a symlink or FIFO there is replaced, never followed)."""
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        try:
            if read_small(path, len(data), base=self.dir) == data:
                return
        except (OSError, RecordError):
            pass
        write_text(path, text, base=self.dir)
        self.changed = True

    def write_json(self, path, obj):
        self.write_text(path, json_text(obj))

    def read_status(self):
        """The StatusFile in status.json, or None; RecordError when it cannot be trusted."""
        status = read_status(self.path["status"])
        if status is not None and status.submission_id != self.sid:
            raise RecordError(f"{self.path['status']}: field 'submission_id' names another job")
        return status

    def has_status(self):
        """status.json is there (trusted or not): the submit that made this record got that far."""
        return os.path.lexists(self.path["status"])

    def status(self):
        """The record's status: status.json, or, when it is lost or cannot be trusted, one rebuilt from the record."""
        try:
            status = self.read_status()
        except UnreadableStatus as exc:  # an I/O error (EIO, ESTALE on NFS) may pass: see step.py
            return self.rebuilt(f"{UNREADABLE} ({exc})")
        except RecordError as exc:
            return self.rebuilt(f"status.json is untrusted ({exc})")
        return status if status is not None else self.rebuilt(LOST)

    def rebuilt(self, why):
        """What the record still says (config/job_spec.json), without a submit time: the pending timeout is then
        not enforced, as a lost file must never stop a healthy job."""
        spec = read_json(self.path["job_spec"], base=self.dir)
        spec = spec if isinstance(spec, dict) else {}
        timeouts = spec.get("timeouts") if isinstance(spec.get("timeouts"), dict) else {}
        pending_s, max_run_s = timeouts.get("pending_s"), timeouts.get("max_run_s")

        def text(value):
            return value if isinstance(value, str) else None

        def number(value):
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

        return StatusFile(submission_id=self.sid, state="UNKNOWN", spec=text(spec.get("name")),
                          workload=text(spec.get("workload")), record=self.dir, rebuilt=why,
                          timeouts={"pending_s": number(pending_s) or conventions.DEFAULT_PENDING_S,
                                    "max_run_s": number(max_run_s)})

    def save_status(self, status, files=None):
        """Write status.json (and, for a final record, its files {path: text}) under the record's status lock.

        Several runs write one record (a wait whose controller was interrupted goes on polling on the head while a
        stop gives its reason), so what was recorded meanwhile is merged first (StatusFile.merge). A status.json
        whose content could not be trusted is copied aside (status.json.untrusted-<ms>) before this one replaces it
        atomically, so the record always has a status.json; one that cannot be read at all is never replaced
        (UnreadableStatus: fail closed). A status that is not a valid StatusFile itself is never written."""
        StatusFile.from_dict(status.to_dict(), where=f"{self.path['status']} (as this run would write it)")

        def recorded():
            try:
                return self.read_status()
            except UnreadableStatus:
                raise
            except RecordError:
                return None

        old = recorded()
        if not files and old is not None and status.same_as(old):
            return Merge.WRITE
        with record_lock(self.dir, name=STATUS_LOCK_FILE):
            old = recorded()
            outcome = status.merge(old, self.stop_request())
            if outcome is Merge.ALREADY_FINAL:
                self.leave_index()
            if outcome is not Merge.WRITE:
                return outcome
            for path, text in (files or {}).items():
                self.write_text(path, text)
            if old is not None and status.same_as(old):
                return outcome
            if old is None and os.path.lexists(self.path["status"]):
                self.keep_untrusted()
            status.updated_at = now_ms()
            self.write_json(self.path["status"], status.to_dict())
            if status.final:
                if retry.due(status)[0]:  # taken up by every watcher pass until decided (open_index.RETRY)
                    with contextlib.suppress(OSError, RecordError):
                        open_index.add(self.dir, open_index.RETRY)
                self.leave_index()
            elif old is None:  # a record rebuilt or repaired: open again, so the watcher and reconcile see it
                with contextlib.suppress(OSError, RecordError):
                    open_index.add(self.dir)
        return outcome

    def retry_decided(self):
        """Out of the pending retries (open_index.RETRY): its next attempt is submitted, or a person decides."""
        with contextlib.suppress(OSError):
            open_index.remove(self.dir, open_index.RETRY)

    def leave_index(self):
        """Out of the open records' index (open_index): best effort, a reader removes an entry left behind."""
        with contextlib.suppress(OSError):
            open_index.remove(self.dir)

    def keep_untrusted(self):
        """Copy the untrusted status.json aside (its bytes; a symlink is kept as a link, never followed)."""
        # Called under the status lock: a name nothing has yet stays free until it is written.
        keep = base = f"{self.path['status']}{UNTRUSTED_SUFFIX}{now_ms()}"
        count = 0
        while os.path.lexists(keep):  # two in one millisecond: each is kept
            count += 1
            keep = f"{base}-{count}"
        if os.path.islink(self.path["status"]):
            os.symlink(os.readlink(self.path["status"]), keep)
            return
        try:
            raw = read_small(self.path["status"], STATUS_CAP)
        except UnsafeFile:  # a FIFO, a device, a huge file: moved aside as it is (never opened)
            os.rename(self.path["status"], keep)
            return
        if raw is not None:
            write_text(keep, raw)

    def request_stop(self, reason):
        """Leave a stop's reason in the record before Ray is asked; best effort, a stop never waits on it."""
        try:
            write_text(self.path["stop_request"], reason + "\n")
        except (OSError, RecordError):
            return False
        return True

    def withdraw_stop_request(self, reason):
        """Remove this run's stop request (not one another stop of the job left meanwhile)."""
        if self.stop_request() == reason:
            with contextlib.suppress(OSError):
                os.remove(self.path["stop_request"])

    def stop_request(self):
        try:
            reason = (files.read_text(self.path["stop_request"], 4096) or "").strip()
        except (OSError, RecordError):
            return None
        # Only a reason this module gives is taken from the file (it sits on storage others can write).
        return reason if reason in conventions.OWN_STOP_REASONS else None

    def preflight(self, redact):
        """What status.json keeps of the job-written preflight.json: the fields status.json's preflight declares, each
        one of the right kind (texts cut to PREFLIGHT_TEXT_CAP), redacted; an empty Preflight when there is none or it
        cannot be used (UnsafeFile, too large)."""
        found = read_json(self.path["preflight"], base=self.dir, limit=PREFLIGHT_CAP)
        found = found if isinstance(found, dict) else {}
        kept = {}
        for f in Preflight.FIELD.fields:
            value = found.get(f.name)
            value = value[:PREFLIGHT_TEXT_CAP] if isinstance(value, str) else value
            with contextlib.suppress(model.FieldError):  # a value of another kind is left out
                if value is not None:
                    kept[f.name] = model.check(f, value, allow_nul=True)
        return Preflight.of(redact(kept) if kept else None)

    def note_cordoned(self, ips):
        """Add ips to this final record's `cordoned` (the workers a retry of it cordoned), under the status lock."""
        with record_lock(self.dir, name=STATUS_LOCK_FILE):
            status = self.read_status()
            if status is not None and not set(ips) <= set(status.cordoned):
                status.cordoned = [*status.cordoned, *(ip for ip in ips if ip not in status.cordoned)]
                self.write_json(self.path["status"], status.to_dict())

    def link_attempt(self, sid):
        """Name attempt sid in this (first) job's status.json, under the record's locks."""
        with record_lock(self.dir), record_lock(self.dir, name=STATUS_LOCK_FILE):
            try:
                status = self.read_status()
            except RecordError:
                return  # not linked: the attempt's own record names its first job (attempt_of)
            if status is not None and sid not in status.attempts:
                status.attempts = [*status.attempts, sid]
                self.write_json(self.path["status"], status.to_dict())
