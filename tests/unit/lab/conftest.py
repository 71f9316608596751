"""Every lab unit test runs with the folders lab-up brings about on the machine (/private, /run/netns) and its notes of
them faked under tmp_path: a test that runs `lab.main(["down"])` once took the real /private away, and with it the
shared root of a lab that was up (removing a folder detaches the mounts on it in every namespace)."""

import pytest

import lab


@pytest.fixture(autouse=True)
def no_machine_folders(monkeypatch, tmp_path):
    made = tmp_path / "machine"
    monkeypatch.setattr(lab, "SHARED_ROOT_MOUNT", made / "private")
    monkeypatch.setattr(lab, "MADE_DIRS", {made / "private": False, made / "netns": True})
    monkeypatch.setattr(lab, "MADE_NOTES", made / "notes")
