"""module_utils/base/files.py: files on the shared root read, written and locked as data of any shape (issue 22,
class 3): no symlink followed, a FIFO never blocks, regular files only, a cap on what is read, ASCII numbers."""

import os
import stat

import pytest
from ansible.module_utils.base import files
from blocking import within


def test_read_small_reads_a_regular_file_and_none_when_missing(tmp_path):
    (tmp_path / "a").write_bytes(b"12\n")
    assert files.read_small(str(tmp_path / "a")) == b"12\n"
    assert files.read_small(str(tmp_path / "missing")) is None
    assert files.read_text(str(tmp_path / "a")) == "12\n"


def test_read_small_never_follows_a_symlink(tmp_path):
    secret = tmp_path / "head-only"
    secret.write_text("root's\n")
    os.symlink(secret, tmp_path / "link")
    with pytest.raises(files.UnsafeFile, match=r"link: is a symlink"):
        files.read_small(str(tmp_path / "link"))


def test_read_small_never_blocks_on_a_fifo(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    result = within(5, lambda: files.read_small(fifo), fifo)
    assert isinstance(result.get("error"), files.UnsafeFile) and "is a FIFO" in str(result["error"])


def test_read_small_caps_what_it_reads_and_tail_gives_the_end(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 100 + b"END")
    with pytest.raises(files.UnsafeFile, match="larger than 10 bytes"):
        files.read_small(str(tmp_path / "big"), 10)
    assert files.read_small(str(tmp_path / "big"), 5, tail=True) == b"xxEND"


def test_nothing_is_read_or_written_through_a_symlinked_directory_of_the_record(tmp_path):
    record, head = tmp_path / "record", tmp_path / "head"
    record.mkdir()
    head.mkdir()
    (head / "driver.log").write_text("head-only\n")
    os.symlink(head, record / "logs")
    with pytest.raises(files.UnsafeFile, match="logs: is not a directory of the record"):
        files.read_small(str(record / "logs" / "driver.log"), base=str(record))
    with pytest.raises(files.UnsafeFile, match="logs: is not a directory of the record"):
        files.write_atomic(str(record / "logs" / "failure.txt"), b"job text\n", base=str(record))
    assert sorted(os.listdir(head)) == ["driver.log"]


def test_write_atomic_replaces_a_symlink_and_never_writes_its_target(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep\n")
    os.symlink(target, tmp_path / "status.json")
    files.write_atomic(str(tmp_path / "status.json"), b"{}\n", base=str(tmp_path))
    assert target.read_text() == "keep\n" and not os.path.islink(tmp_path / "status.json")
    assert (tmp_path / "status.json").read_bytes() == b"{}\n"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


@pytest.mark.parametrize("dangling", [True, False])
def test_open_lock_never_creates_or_opens_through_a_symlink(tmp_path, dangling):
    target = tmp_path / "etc-file"
    if not dangling:
        target.write_text("root's\n")
    os.symlink(target, tmp_path / ".submit.lock")
    with pytest.raises(files.UnsafeFile, match=r"\.submit\.lock: is a symlink"):
        files.open_lock(str(tmp_path / ".submit.lock"))
    assert os.path.exists(target) is not dangling
    fd = files.open_lock(str(tmp_path / ".status.lock"))
    os.close(fd)


@pytest.mark.parametrize(("text", "value"), [("12", 12), (" 7\n", 7), ("0", 0), ("²", None), ("٣", None),
                                             ("３", None), ("9" * 5000, None), ("9" * 19, None), ("-1", None),
                                             ("+1", None), ("1_0", None), ("", None), (None, None)])
def test_ascii_int_takes_ascii_digits_within_range_only(text, value):
    assert files.ascii_int(text) == value


def test_read_from_reads_from_an_offset_up_to_a_limit_with_the_size_and_mtime(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"0123456789")
    os.utime(path, ns=(1_735_787_045_123_456_789, 1_735_787_045_123_456_789))
    assert files.read_from(str(path), 0) == (b"0123456789", 10, 1_735_787_045_123)
    assert files.read_from(str(path), 4, 3)[:2] == (b"456", 10)
    assert files.read_from(str(path), 10)[:2] == (b"", 10)  # nothing new
    assert files.read_from(str(path), 25)[:2] == (b"", 10)  # shorter than the offset: the caller starts again
    assert files.read_from(str(tmp_path / "missing"), 0) is None


def test_read_from_never_follows_a_symlink_nor_blocks_on_a_fifo(tmp_path):
    (tmp_path / "head-only").write_text("root's\n")
    os.symlink(tmp_path / "head-only", tmp_path / "link")
    with pytest.raises(files.UnsafeFile, match=r"link: is a symlink"):
        files.read_from(str(tmp_path / "link"), 0)
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    result = within(5, lambda: files.read_from(fifo, 0), fifo)
    assert isinstance(result.get("error"), files.UnsafeFile) and "is a FIFO" in str(result["error"])


def test_make_folder_makes_the_mode_asked_whatever_the_umask_and_takes_its_own_again(tmp_path):
    where = tmp_path / "cordons"
    old = os.umask(0o077)
    try:
        assert files.make_folder(str(where), "the cordons folder", mode=0o755) is True
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(where).st_mode) == 0o755
    assert files.make_folder(str(where), "the cordons folder") is False  # already there: taken as it is


def test_make_folder_refuses_a_symlink_a_file_and_a_stranger_s_folder(tmp_path, monkeypatch):
    os.mkdir(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(files.UnsafeFile, match=r"link: is a symlink, not the kept verdicts' folder"):
        files.make_folder(str(tmp_path / "link"), "the kept verdicts' folder")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(files.UnsafeFile, match=r"plain: is a file, not the index"):
        files.make_folder(str(tmp_path / "plain"), "the index")
    os.mkdir(tmp_path / "theirs")
    if os.geteuid() == 0:
        os.chown(tmp_path / "theirs", 4242, -1)
    else:  # the folder is ours: the caller is made someone else
        monkeypatch.setattr(files.os, "geteuid", lambda: os.getuid() + 1)
    owner = os.lstat(tmp_path / "theirs").st_uid
    with pytest.raises(files.UnsafeFile, match=rf"theirs: is owned by uid {owner}, not by root: refused as a report"):
        files.make_folder(str(tmp_path / "theirs"), "a report")
    assert files.make_folder(str(tmp_path / "theirs"), "a daemon's folder", owned=False) is False
    assert os.listdir(tmp_path / "elsewhere") == []
