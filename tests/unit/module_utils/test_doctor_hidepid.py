"""doctor.proc_hidepid and its warning: the GCS store's password is on the command line of the head's GCS server and
Python workers (Ray's --redis_password), which every local user reads through /proc unless it is mounted hidepid."""

import io

import pytest
import ray_doctor
from ansible.module_utils.node import doctor
from doctor_filters import ray_doctor_report

CONTROL = {"python": "3.11.7", "ray": "2.60.0", "clock": 1000.5}
GPUS = {"10.0.0.10": 0, "10.0.0.11": 4, "10.0.0.12": 4}
STORE_ENV = {"RAY_REDIS_ADDRESS": "10.0.0.9:6380", "RAY_external_storage_namespace": "ray-verl-10-0-0-10-6379"}
SYS = "23 22 0:22 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw,fd=29,hidepid=2"


@pytest.mark.parametrize("text, expected", [
    ("22 27 0:21 / /proc rw,relatime - proc proc rw", "off"),  # this machine's
    ("22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw,hidepid=invisible,gid=27",
     "invisible"),
    ("22 27 0:21 / /proc rw,nosuid,relatime master:1 shared:5 - proc proc rw,gid=1001,hidepid=2", "invisible"),
    ("22 27 0:21 / /proc rw - proc proc rw,hidepid=1", "noaccess"),
    ("22 27 0:21 / /proc rw - proc proc rw,hidepid=ptraceable,subset=pid", "ptraceable"),
    ("22 27 0:21 / /proc rw - proc proc rw,hidepid=0", "off"),
    ("22 27 0:21 / /proc rw - proc proc rw,hidepid=" + "9" * 100, "9" * 20),  # a value no kernel writes, cut
    ("proc /proc proc rw,nosuid,nodev,noexec,relatime,hidepid=2,gid=27 0 0", "invisible"),  # /proc/mounts
    ("proc /proc proc rw,relatime 0 0", "off"),
    # mounted twice: the last one is what a process sees
    ("22 27 0:21 / /proc rw - proc proc rw,hidepid=2\n90 22 0:50 / /proc rw - proc proc rw", "off"),
    ("22 27 0:21 / /proc rw - proc proc rw\n" + SYS, "off"),  # a mount below /proc is not /proc
    ("22 27 0:21 / /host/proc rw - proc proc rw,hidepid=2", None),  # another /proc, not this node's
    ("22 27 0:21 / /proc rw - tmpfs tmpfs rw,hidepid=2", None),  # not a proc file system
    ("", None), ("garbage\n - \n\x00 - proc\n1 2 3 4 /proc", None), (None, None),
])
def test_proc_hidepid_is_read_from_mountinfo_or_mounts(text, expected):
    assert doctor.proc_hidepid(text) == expected


WARNING = ("warning: head: /proc: mounted without hidepid: other local users can read the GCS store's password from "
           "the GCS server's command line (/proc/<pid>/cmdline, Ray's --redis_password) and its Python workers' (mount "
           "/proc with hidepid=invisible,gid=<a group for monitoring tools>, or let no other user log in to this "
           "node: docs/security.md)")


def test_a_head_using_the_store_with_proc_open_to_all_is_a_warning_naming_it_and_the_fix(facts):
    facts["head"]["raylet_env"].update(STORE_ENV)
    _, _, problems, notes = doctor.compare(facts, "head", CONTROL, GPUS)
    assert problems == [] and notes == [WARNING]  # w1 and w2, hidepid off too, have no password on a command line


@pytest.mark.parametrize("hidepid", ["noaccess", "invisible", "ptraceable"])
def test_proc_that_hides_other_users_processes_is_no_warning(facts, hidepid):
    facts["head"]["raylet_env"].update(STORE_ENV)
    facts["head"]["proc_hidepid"] = hidepid
    assert doctor.compare(facts, "head", CONTROL, GPUS)[3] == []


@pytest.mark.parametrize("hidepid, seen", [(None, "no proc mount found, so hidepid is unknown"), ("9", "hidepid=9")])
def test_an_unknown_hidepid_is_a_warning_too(facts, hidepid, seen):
    facts["head"]["raylet_env"].update(STORE_ENV)
    facts["head"]["proc_hidepid"] = hidepid
    assert doctor.compare(facts, "head", CONTROL, GPUS)[3] == [WARNING.replace("mounted without hidepid", seen)]


def test_a_head_without_the_store_or_not_running_has_no_password_to_show(facts):
    assert doctor.compare(facts, "head", CONTROL, GPUS)[3] == []
    facts["head"]["raylet_env"] = None  # Ray is down there
    assert doctor.compare(facts, "head", CONTROL, GPUS)[3] == []


def test_the_report_shows_the_warning_without_failing(facts):
    facts["head"]["raylet_env"].update(STORE_ENV)
    hostvars = {host: {"doctor_facts": found, "doctor_probes": {"probes": found["probes"]}}
                for host, found in facts.items()}
    hostvars["head"]["doctor_control_clock"] = 1000.0
    report = ray_doctor_report(sorted(facts), hostvars, "head", [])
    assert report["problems"] == [] and WARNING in report["lines"]


def test_the_module_reads_this_nodes_mount_table_and_falls_back_to_mounts(monkeypatch):
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        assert ray_doctor.proc_hidepid() == doctor.proc_hidepid(handle.read())

    def mounts_only(path, *args, **kwargs):
        if path == "/proc/mounts":
            return io.StringIO("proc /proc proc rw,hidepid=invisible 0 0\n")
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ray_doctor, "open", mounts_only, raising=False)
    assert ray_doctor.proc_hidepid() == "invisible"
    monkeypatch.setattr(ray_doctor, "open", lambda *a, **k: mounts_only("/x"), raising=False)
    assert ray_doctor.proc_hidepid() is None
