"""roles/code_snapshot/files/acceptance_probe.py's result writer: the measuring job runs as Ray's user (root on the
lab) and writes into its record's checkpoints/, which every user may write (1777: the sticky bit keeps them from
renaming the job's files, not from planting new names). A symlink or a folder someone else planted there must never
be written through. The writer is standard library only (the probe imports Ray and torch lazily), so these run in the
project's venv."""

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FILES = os.path.join(ROOT, "roles", "code_snapshot", "files")
if FILES not in sys.path:
    sys.path.insert(0, FILES)

import acceptance_probe  # from the code snapshot's folder, put on the path above

RESULT = {"version": 1, "phase": "done", "nodes": [], "allreduce": None, "error": None}


@pytest.fixture
def checkpoints(tmp_path):
    """A record's checkpoints/ as ensure_layout leaves it: every user may write it."""
    folder = tmp_path / "jobs" / "acc-measure" / "checkpoints"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    return folder


@pytest.fixture
def target(tmp_path):
    """A file the planted symlinks point at (/etc/shadow, say): its content must stay as it is."""
    path = tmp_path / "target"
    path.write_text("precious\n")
    return path


def out_path(checkpoints):
    return str(checkpoints / "acceptance" / "acceptance.json")


def test_the_result_is_written_whole_in_a_folder_only_its_user_may_write(checkpoints):
    path = out_path(checkpoints)
    acceptance_probe.write_result(path, RESULT)
    assert json.loads((checkpoints / "acceptance" / "acceptance.json").read_text()) == RESULT
    folder = os.lstat(checkpoints / "acceptance")
    assert oct(folder.st_mode & 0o7777) == "0o755" and folder.st_uid == os.geteuid()
    assert oct(os.lstat(path).st_mode & 0o7777) == "0o644"
    assert os.listdir(checkpoints / "acceptance") == ["acceptance.json"]  # no temporary file left
    acceptance_probe.write_result(path, {**RESULT, "phase": "again"})  # a folder of its own already there: reused
    assert json.loads((checkpoints / "acceptance" / "acceptance.json").read_text())["phase"] == "again"


def test_symlinks_at_the_old_names_are_never_written_through(checkpoints, target):
    """The old writer opened checkpoints/acceptance.json.tmp-<pid> with open(..., "w"): a symlink planted there made
    root write wherever it pointed. Symlinks at every old name and the new file's temporary name change nothing."""
    for name in ("acceptance.json", f"acceptance.json.tmp-{os.getpid()}"):
        os.symlink(target, checkpoints / name)
    acceptance_probe.write_result(out_path(checkpoints), RESULT)
    assert target.read_text() == "precious\n"
    assert os.readlink(checkpoints / "acceptance.json") == str(target)


def test_a_symlink_at_the_new_folder_is_refused_and_nothing_written(checkpoints, tmp_path, target):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(target, elsewhere / "acceptance.json")
    os.symlink(elsewhere, checkpoints / "acceptance")
    with pytest.raises(acceptance_probe.ResultError, match=r"acceptance: is not a directory \(a symlink is never "
                                                           r"followed\): refused$"):
        acceptance_probe.write_result(out_path(checkpoints), RESULT)
    assert os.listdir(elsewhere) == ["acceptance.json"] and target.read_text() == "precious\n"
    # A symlink to a file there: the same.
    os.remove(checkpoints / "acceptance")
    os.symlink(target, checkpoints / "acceptance")
    with pytest.raises(acceptance_probe.ResultError, match="is not a directory"):
        acceptance_probe.write_result(out_path(checkpoints), RESULT)
    assert target.read_text() == "precious\n"


def test_a_symlink_at_the_new_path_inside_its_own_folder_is_replaced_not_followed(checkpoints, target):
    folder = checkpoints / "acceptance"
    folder.mkdir(mode=0o755)
    os.symlink(target, folder / "acceptance.json")
    acceptance_probe.write_result(out_path(checkpoints), RESULT)
    assert target.read_text() == "precious\n"
    assert not os.path.islink(folder / "acceptance.json")
    assert json.loads((folder / "acceptance.json").read_text()) == RESULT


def test_a_folder_others_may_write_or_another_user_owns_is_refused(checkpoints, monkeypatch):
    folder = checkpoints / "acceptance"
    folder.mkdir()
    os.chmod(folder, 0o777)  # planted by a local user for the job to write into: they could swap its file
    with pytest.raises(acceptance_probe.ResultError, match=r"with mode 0777, not to this job's uid \d+ alone: "
                                                           "refused$"):
        acceptance_probe.write_result(out_path(checkpoints), RESULT)
    os.chmod(folder, 0o755)
    mine = os.geteuid()
    monkeypatch.setattr(acceptance_probe.os, "geteuid", lambda: mine + 1)  # the folder is then another user's
    with pytest.raises(acceptance_probe.ResultError, match=f"belongs to uid {mine} with mode 0755, not to this "
                                                           f"job's uid {mine + 1} alone"):
        acceptance_probe.write_result(out_path(checkpoints), RESULT)
    assert os.listdir(folder) == []


def test_the_folder_renamed_while_the_job_writes_still_gets_the_file_not_the_symlink_put_in_its_place(
        checkpoints, target, monkeypatch):
    """checkpoints/ has no sticky bit, so anyone may rename the job's folder and put a symlink at its name. The writer
    holds the folder it checked open and writes through that descriptor alone."""
    real_open = os.open

    def swap_after_the_folder_is_opened(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        if path == "acceptance" and flags & os.O_DIRECTORY:
            os.rename(checkpoints / "acceptance", checkpoints / "moved")
            os.symlink(target.parent, checkpoints / "acceptance")
        return fd

    monkeypatch.setattr(acceptance_probe.os, "open", swap_after_the_folder_is_opened)
    acceptance_probe.write_result(out_path(checkpoints), RESULT)
    assert json.loads((checkpoints / "moved" / "acceptance.json").read_text()) == RESULT
    assert target.read_text() == "precious\n" and not (target.parent / "acceptance.json").exists()
