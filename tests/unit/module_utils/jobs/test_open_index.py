"""The open records' index: readers find open records without reading finished ones (issue 24)."""

import os

import pytest
from ansible.module_utils.base.files import UnsafeFile
from ansible.module_utils.jobs.life import reconcile
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobs.record.status import StatusFile


def make(root, sid, final=None):
    """A record made as submit makes it (its index entry before its status); with final given, its status.json."""
    out = os.path.join(root, "jobs", sid)
    assert jr.create_exclusive(out)
    open_index.add(out)
    if final is not None:
        rec = jr.Record(out, sid)
        rec.save_status(StatusFile(sid, state="SUCCEEDED" if final else "RUNNING", final=final))
    return out


def index(root):
    return sorted(os.listdir(os.path.join(root, "jobs", open_index.INDEX)))


def test_a_record_is_listed_from_creation_until_its_status_is_final(tmp_path):
    root = str(tmp_path)
    out = make(root, "job-a", final=False)
    assert "job-a" in index(root)
    jr.Record(out, "job-a").save_status(StatusFile("job-a", state="SUCCEEDED", final=True))
    assert "job-a" not in index(root)


def test_readers_read_only_what_the_index_lists(tmp_path, monkeypatch):
    root = str(tmp_path)
    make(root, "open-1", final=False)
    for n in range(20):
        make(root, f"done-{n}", final=True)
    assert reconcile.open_records(root) == ["open-1"]  # the first reader: a full scan, then the mark
    assert open_index.COMPLETE in index(root)
    read = []
    real = jr.Record.read_status

    def counting(self):
        read.append(self.sid)
        return real(self)

    monkeypatch.setattr(jr.Record, "read_status", counting)
    assert reconcile.open_records(root) == ["open-1"]
    assert read == ["open-1"]


def test_a_shared_root_from_before_the_index_is_scanned_once(tmp_path):
    root = str(tmp_path)
    old = make(root, "old-open", final=False)
    make(root, "old-done", final=True)
    os.unlink(os.path.join(root, "jobs", open_index.INDEX, "old-open"))  # as an older version left it: no index
    os.rmdir(os.path.join(root, "jobs", open_index.INDEX))
    assert open_index.listed(os.path.join(root, "jobs")) is None
    assert reconcile.open_records(root, tidy=False) == ["old-open"]
    assert not os.path.exists(os.path.join(root, "jobs", open_index.INDEX))  # check mode writes nothing
    assert reconcile.open_records(root) == ["old-open"]
    assert index(root) == [open_index.COMPLETE, "old-open"]
    assert os.path.isdir(old)


def test_an_entry_left_behind_is_removed_by_the_next_reader_not_in_check_mode(tmp_path):
    root = str(tmp_path)
    make(root, "x", final=True)
    reconcile.open_records(root)
    open_index.add(os.path.join(root, "jobs", "x"))  # as a run killed between status.json and the index left it
    assert reconcile.open_records(root, tidy=False) == [] and "x" in index(root)
    assert reconcile.open_records(root) == [] and "x" not in index(root)


def test_only_job_ids_count_and_a_symlinked_index_is_never_followed(tmp_path):
    root = str(tmp_path)
    jobs = os.path.join(root, "jobs")
    make(root, "a", final=False)
    open_index.mark_complete(jobs)
    for name in ("..", "not an id", ".hidden"):
        if name != "..":
            open(os.path.join(jobs, open_index.INDEX, name), "w").close()
    assert open_index.listed(jobs) == ["a"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rename(os.path.join(jobs, open_index.INDEX), str(tmp_path / "moved"))
    os.symlink(str(elsewhere), os.path.join(jobs, open_index.INDEX))
    assert open_index.listed(jobs) is None
    with pytest.raises(UnsafeFile, match="not the open records' index folder"):
        open_index.add(os.path.join(jobs, "b"))
    assert os.listdir(str(elsewhere)) == []
    open_index.remove(os.path.join(jobs, "a"))  # through no symlink: nothing happens
