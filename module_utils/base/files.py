"""Files on the shared root, read and written as data of any shape: the one home of "read a small regular file safely".

Anyone who can write the share can leave a symlink, a FIFO, a device, a huge file or odd digits where the module
(root, on the head) expects one of its files. So every file it reads there goes through read_small (the last name
never followed, a FIFO never blocks, regular files only, a cap on the size), every file it writes in a record goes
through write_atomic (a temporary file and a rename inside the record, reached without following a symlinked
directory), a record's lock files are opened by open_lock (never created through a symlink), and numbers read from
files or names go through ascii_int (ASCII digits only, a length cap). A number read from a job's files (a metric, a
step, an offset, a time) is taken only within the bounds below (bounded_number, bounded_int, bounded_step), and JSON
from a job goes through loads_bounded: Python reads an integer of any length, and float() or any arithmetic with
floats on one past 1.8e308 raises OverflowError, so an unbounded number stopped whoever read it. Standard library only.
"""

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import stat
import time
import uuid

READ_CAP = 1 << 20  # bytes read_small reads at most unless told otherwise
MAX_DIGITS = 18  # a number read from the share: at most this many ASCII digits (fits an int64)
# The bounds of numbers read from a job's files; what is outside them is left out by its reader, and noted.
STEP_MAX = 10 ** 12  # a training step: an int in 0..STEP_MAX (the console's step pattern takes 12 digits)
VALUE_MAX = 1e40  # a metric: finite, |v| <= VALUE_MAX (past fp32's and bf16's 3.4e38; sums of many stay finite)
COUNT_MAX = 2 ** 63 - 1  # an offset, a size, a count: an int in 0..COUNT_MAX (an int64, as status.json's)
MS_MAX = 10 ** 13  # a time in ms since the epoch: 0..MS_MAX (the year 2286; time.gmtime takes it)
# An integer literal in a job's JSON longer than this is read as ±infinity, so out of every bound above, and no int
# of its digits is built (Python refuses to parse one of 4300 digits, ValueError, and is quadratic below that).
_INT_LITERAL_CAP = 64
_ASCII_INT = re.compile(r"[0-9]+", re.ASCII)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RecordError(ValueError):
    """A file on the shared root that cannot be trusted; str() is one line naming the file and why (never its
    content: anyone who can write the share may have shaped it)."""


class UnsafeFile(RecordError):
    """A symlink, a FIFO or another non-regular file, a file over its cap, or a symlinked directory on the way."""


def kind(mode):
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a regular file"


def _symlink(path):
    return UnsafeFile(f"{path}: is a symlink, which is never followed (a record's files are regular files)")


def _open_parent(path, base):
    """A descriptor of path's directory. Below base (the record's directory, trusted) no directory is reached through
    a symlink; without base, the directory is opened as named (its last name not followed)."""
    parent, leaf = os.path.split(path)
    if base is None:
        start, parts = parent or ".", []
    else:
        rel = os.path.relpath(parent, base)
        if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
            raise ValueError(f"{path} is not inside {base}")
        start, parts = base, [p for p in rel.split(os.sep) if p not in ("", ".")]
    fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        walked = start
        for part in parts:
            walked = os.path.join(walked, part)
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeFile(f"{walked}: is not a directory of the record (a symlink is never followed)") \
                        from None
                raise OSError(exc.errno, exc.strerror, walked) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, leaf


def _open_leaf(leaf, flags, dir_fd, path):
    """os.open of a name in an open directory, never through a symlink (UnsafeFile names it) and never blocking on a
    FIFO; a missing file is FileNotFoundError, any other OSError names path."""
    try:
        return os.open(leaf, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _symlink(path) from None
        raise OSError(exc.errno, exc.strerror, path) from None


def _open_regular(path, base):
    """(fd, fstat) of the regular file at path, or None when there is no such file: never through a symlink, a FIFO
    never blocks (read_small says how)."""
    try:
        dir_fd, leaf = _open_parent(path, base)
    except FileNotFoundError:
        return None
    try:
        fd = _open_leaf(leaf, os.O_RDONLY | os.O_NOCTTY, dir_fd, path)
    except FileNotFoundError:
        return None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):  # as open() says it: an OSError, as a file that cannot be read
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path}: is {kind(info.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _read_upto(fd, limit):
    """At most limit + 1 bytes from fd's position: one byte past the cap tells a file that grew meanwhile."""
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(limit + 1 - size, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_small(path, limit=READ_CAP, tail=False, base=None):
    """The bytes of the regular file at path, or None when there is no such file.

    The file's name is never followed when it is a symlink (O_NOFOLLOW), a FIFO never blocks (O_NONBLOCK, then fstat:
    regular files only), and at most `limit` bytes are read: a larger file raises UnsafeFile, or, with tail=True,
    gives its last `limit` bytes (a log's tail). base: the record's directory, when path lies inside it (no directory
    below it is reached through a symlink). UnsafeFile names the file and why; other OSErrors (EACCES, EIO) pass."""
    opened = _open_regular(path, base)
    if opened is None:
        return None
    fd, info = opened
    try:
        if info.st_size > limit:
            if not tail:
                raise UnsafeFile(f"{path}: is larger than {limit} bytes")
            os.lseek(fd, info.st_size - limit, os.SEEK_SET)
        data = _read_upto(fd, limit)
        if len(data) > limit:
            if not tail:
                raise UnsafeFile(f"{path}: is larger than {limit} bytes")
            data = data[-limit:]
        return data
    finally:
        os.close(fd)


def read_from(path, offset, limit=READ_CAP, base=None):
    """(bytes from offset, at most limit of them; the file's size; its mtime in ms) of the regular file at path, read
    as read_small reads (never through a symlink, never blocking), or None when there is no such file. A file that
    got shorter than offset gives b"" and its size: the caller sees it was replaced."""
    opened = _open_regular(path, base)
    if opened is None:
        return None
    fd, info = opened
    try:
        data = b""
        if 0 <= offset < info.st_size:
            os.lseek(fd, offset, os.SEEK_SET)
            data = _read_upto(fd, limit)[:limit]
        return data, info.st_size, info.st_mtime_ns // 1_000_000
    finally:
        os.close(fd)


def read_text(path, limit=READ_CAP, tail=False, base=None):
    """read_small as text (UTF-8, undecodable bytes replaced), or None when there is no such file."""
    data = read_small(path, limit, tail, base)
    return None if data is None else data.decode("utf-8", errors="replace")


def write_atomic(path, data, base=None, mode=0o644):
    """Write bytes via a temporary file and a rename in path's directory (reached as read_small reaches it), so a
    crash never leaves half a file and a symlink at path is replaced, never written through. An OSError names path."""
    dir_fd, leaf = _open_parent(path, base)
    tmp = f".tmp-{uuid.uuid4().hex[:12]}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                os.fchmod(handle.fileno(), mode)
            os.replace(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        os.close(dir_fd)


def json_text(obj):
    """How records and state files write JSON (stable, so an unchanged object leaves its file unchanged)."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def write_json(path, obj, base=None):
    write_atomic(path, json_text(obj).encode("utf-8"), base=base)


def read_json(path, base=None, limit=READ_CAP):
    """The JSON in a small regular file (read_small), or None: none, unsafe, too large, not JSON."""
    try:
        raw = read_small(path, limit, base=base)
        return None if raw is None else json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


@contextlib.contextmanager
def open_append(path, expected_size, base=None):
    """The regular file at path opened to append, if it is expected_size bytes long (never through a symlink, a FIFO
    never blocks); RecordError when it is not what the caller expects. The data reaches the disk before it closes."""
    dir_fd, leaf = _open_parent(path, base)
    try:
        fd = _open_leaf(leaf, os.O_WRONLY | os.O_APPEND, dir_fd, path)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "ab") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size != expected_size:
            raise RecordError(f"{path}: is not the file this run expects (another size or kind)")
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


class AtomicWriter:
    """Write a file in pieces through a temporary file beside it, renamed over path on success (write_atomic for
    data too big to hold: the path is reached as write_atomic reaches it). discard() drops it; `size` is what was
    written."""

    def __init__(self, path, base=None, mode=0o644):
        self.path, self.base, self.mode, self.size, self._keep = path, base, mode, 0, True

    def __enter__(self):
        self._dir_fd, self._leaf = _open_parent(self.path, self.base)
        self._tmp = f".tmp-{uuid.uuid4().hex[:12]}"
        fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, self.mode,
                     dir_fd=self._dir_fd)
        self._handle = os.fdopen(fd, "wb")
        return self

    def write(self, data):
        self._handle.write(data)
        self.size += len(data)

    def discard(self):
        self._keep = False

    def __exit__(self, kind, value, traceback):
        try:
            if kind is None and self._keep:
                self._handle.flush()
                os.fsync(self._handle.fileno())
                os.fchmod(self._handle.fileno(), self.mode)
            self._handle.close()
            if kind is None and self._keep:
                os.replace(self._tmp, self._leaf, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
            else:
                os.unlink(self._tmp, dir_fd=self._dir_fd)
        finally:
            os.close(self._dir_fd)
        return False


def open_lock(path):
    """A descriptor of the lock file at path (created 0644 when missing) for flock: never created or opened through a
    symlink, and only a regular file (UnsafeFile otherwise, naming it)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _symlink(path) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFile(f"{path}: is {kind(info.st_mode)}, not a regular file")
    return fd


def ascii_int(text, max_digits=MAX_DIGITS):
    """The non-negative integer text holds in ASCII digits (surrounding ASCII whitespace allowed), or None: no
    Unicode digits ('²', Arabic-Indic), no sign, no more than max_digits digits."""
    if not isinstance(text, str):
        return None
    text = text.strip(" \t\r\n")
    if not 0 < len(text) <= max_digits or not _ASCII_INT.fullmatch(text):
        return None
    return int(text)


def bounded_int(value, high=COUNT_MAX, low=0):
    """value when it is an int (never a bool) in low..high, else None."""
    return value if type(value) is int and low <= value <= high else None


def bounded_step(value):
    """value when it is a step: an int in 0..STEP_MAX, else None."""
    return bounded_int(value, STEP_MAX)


def bounded_number(value):
    """value (an int or a float, as given) when it is a number within ±VALUE_MAX, else None: never a bool, NaN or an
    infinity. Comparing an int of any length with a float is exact in Python and never raises."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and -VALUE_MAX <= value <= VALUE_MAX:
        return value
    return None


def _int_literal(text):
    if len(text) > _INT_LITERAL_CAP:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


_BOUNDED_JSON = json.JSONDecoder(parse_int=_int_literal)


def loads_bounded(text):
    """json.loads of a job's JSON text, except that an integer literal of more than _INT_LITERAL_CAP characters reads
    as ±infinity (which every bound refuses); NaN and Infinity read as floats, as json.loads reads them. ValueError
    (RecursionError for deep nesting) when text is no JSON."""
    return _BOUNDED_JSON.decode(text)


def write_new(path, data, base=None, mode=0o644):
    """Write bytes at path only when nothing is there yet (reached as write_atomic reaches it): True when written,
    False when a file was there, left as it was. The file appears whole (a hard link of a finished temporary file),
    so of two writers racing one wins and the other is told."""
    dir_fd, leaf = _open_parent(path, base)
    tmp = f".tmp-{uuid.uuid4().hex[:12]}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode)
        try:
            os.link(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
        return True
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        os.close(dir_fd)


def open_parent(path, base):
    """(descriptor of path's directory, its last name): reached below base as every file of the share is (no
    directory through a symlink); the caller closes it."""
    return _open_parent(path, base)


def make_folder(path, what, mode=0o755, owned=True):
    """The folder at path (a share's folder of the project's: the cordons, the open records' index, the kept verdicts,
    an acceptance report's; a daemon's folder on a node), made with exactly `mode` whatever the umask when missing.
    Whatever else is there is refused (UnsafeFile naming `what`): a symlink, a file, and, when owned, a folder owned
    by anyone but root or the caller, who could remove or plant what is kept in it. True when this call made it."""
    try:
        os.mkdir(path, mode)
        made = True
    except FileExistsError:
        made = False
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        found = "a file" if stat.S_ISREG(info.st_mode) else kind(info.st_mode)
        raise UnsafeFile(f"{path}: is {found}, not {what} (a symlink is never followed)")
    if owned and info.st_uid not in (0, os.geteuid()):
        raise UnsafeFile(f"{path}: is owned by uid {info.st_uid}, not by root: refused as {what}")
    if made and stat.S_IMODE(info.st_mode) != mode:  # the umask took bits off
        fd = os.open(path, _DIR_FLAGS)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return made


@contextlib.contextmanager
def held_lock(path, timeout_s, busy):
    """Hold an exclusive flock on the lock file at path (open_lock), trying every 0.2 s; after timeout_s, raise what
    busy() gives (the caller's one line: who holds it, is it stuck)."""
    fd = open_lock(path)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise busy() from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)
