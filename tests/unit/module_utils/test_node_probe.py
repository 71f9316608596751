"""module_utils/node/probe.py: the interface to an address with and without iproute2, GPUs counted where drivers put
them (fake nvidia-smi scripts, a fake NVML), a program on the PATH Ray's processes get."""

import ast
import os
import pathlib
import socket
import subprocess

import pytest
from ansible.module_utils.node import probe as node_probe


def real_run(argv):
    """run_command as AnsibleModule gives it: the command really runs (a fake script in tmp_path)."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def script(folder, name, body):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def no_ip(monkeypatch, tmp_path):
    """A host without iproute2: neither on the PATH nor in the sbin folders."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(node_probe, "IP_DIRS", (str(empty),))


def never_run(argv):
    raise AssertionError(f"no command should run, ran {argv}")


def test_without_ip_loopback_and_its_other_addresses_are_lo(no_ip):
    assert node_probe.interface_to(never_run, "127.0.0.1") == "lo"
    # 127.0.0.2 is the address doctor.yml's `ip route get` failed on: the kernel reaches it from 127.0.0.1, on lo.
    assert node_probe.interface_to(never_run, "127.0.0.2") == "lo"


def test_without_ip_a_dns_name_is_resolved_first(no_ip):
    assert node_probe.interface_to(never_run, "localhost") == "lo"


def test_without_ip_the_nodes_own_address_is_the_interface_holding_it(no_ip, monkeypatch):
    real = [(name, addr) for name, addr in node_probe.local_addresses() if name != "lo"]
    if real:  # this machine's own first non-loopback address, found by the kernel
        assert node_probe.interface_to(never_run, real[0][1]) == real[0][0]
    # A secondary address (an alias label is its device): the kernel picks the address itself as the source.
    monkeypatch.setattr(node_probe, "local_addresses", lambda: [("lo", "127.0.0.1"), ("ens5", "10.0.0.5"),
                                                                ("ens5", "10.0.0.11")])
    monkeypatch.setattr(node_probe, "source_address", lambda addr: addr)
    assert node_probe.interface_to(never_run, "10.0.0.11") == "ens5"


def test_the_local_addresses_include_loopback_and_drop_alias_labels():
    found = node_probe.local_addresses()
    assert ("lo", "127.0.0.1") in found and all(":" not in name for name, _ in found)


def test_a_failing_ip_falls_back_to_the_kernels_choice(tmp_path, monkeypatch):
    ip = script(tmp_path / "bin", "ip", 'echo "$*" >> "$0.log"; echo "RTNETLINK answers: Operation not permitted" >&2; '
                                      "exit 2")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert node_probe.interface_to(real_run, "localhost") == "lo"
    # iproute2 resolves no name: it was asked for the address.
    with open(ip + ".log", encoding="utf-8") as handle:
        assert handle.read() == "route get 127.0.0.1\n"


def test_ip_is_used_when_it_answers_also_from_sbin_off_the_path(tmp_path, monkeypatch):
    script(tmp_path / "sbin", "ip", 'case "$*" in "route get 10.0.0.10") echo "10.0.0.10 dev eth0 src 10.0.0.11";; '
                                    '"route get 10.0.0.11") echo "local 10.0.0.11 dev lo table local src 10.0.0.11";; '
                                    '"-o addr show to 10.0.0.11") echo "2: ens5    inet 10.0.0.11/24 brd x";; '
                                    "*) exit 2;; esac")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setattr(node_probe, "IP_DIRS", (str(tmp_path / "sbin"),))
    assert node_probe.interface_to(real_run, "10.0.0.10") == "eth0"
    assert node_probe.interface_to(real_run, "10.0.0.11") == "ens5"


def test_an_unknown_name_or_an_unreachable_address_is_none(no_ip, monkeypatch):
    def unresolvable(*args):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(node_probe.socket, "getaddrinfo", unresolvable)
    assert node_probe.interface_to(never_run, "head.example.invalid") is None
    assert node_probe.resolve_ipv4("") is None
    monkeypatch.undo()
    monkeypatch.setattr(node_probe, "source_address", lambda addr: (_ for _ in ()).throw(OSError(101, "unreachable")))
    monkeypatch.setattr(node_probe, "IP_DIRS", ())
    monkeypatch.setenv("PATH", "")
    assert node_probe.interface_to(never_run, "10.9.9.9") is None


@pytest.fixture
def no_driver(monkeypatch, tmp_path):
    """A host with no nvidia-smi anywhere and no NVML: each test adds what it needs."""
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setattr(node_probe, "NVIDIA_SMI_DIRS", (str(tmp_path / "driver"),))
    monkeypatch.setattr(node_probe, "NVML_LIBRARY", "libnvidia-ml-absent-for-tests.so.1")
    return tmp_path


def test_a_number_is_taken_as_given_without_looking(no_driver):
    assert node_probe.gpu_count(never_run, "4") == 4 and node_probe.gpu_count(never_run, 0) == 0
    for bad in ("-1", "1.5", "4; rm -rf /", "99999", "", "AUTO "):
        with pytest.raises(ValueError, match="^num_gpus must be a whole number or auto$"):
            node_probe.gpu_count(never_run, bad)


def test_nvidia_smi_on_the_path_counts_the_gpus(no_driver):
    smi = script(no_driver / "path", "nvidia-smi", 'echo "$*" > "$0.args"; printf "0\\n1\\n2\\n"')
    assert node_probe.count_gpus(real_run) == (3, smi)
    assert node_probe.gpu_count(real_run, "auto") == 3
    with open(smi + ".args", encoding="utf-8") as handle:
        assert handle.read() == "--query-gpu=index --format=csv,noheader\n"


def test_nvidia_smi_off_the_path_is_found_in_the_drivers_folder(no_driver):
    smi = script(no_driver / "driver", "nvidia-smi", 'printf "0\\n"')
    assert node_probe.find_nvidia_smi() == smi
    assert node_probe.gpu_count(real_run, "auto") == 1


def test_a_failing_driver_is_an_error_naming_the_command_and_its_first_line(no_driver):
    smi = script(no_driver / "driver", "nvidia-smi",
                 "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\" >&2; "
                 "echo 'Make sure that the latest NVIDIA driver is installed and running.' >&2; exit 9")
    with pytest.raises(node_probe.GpuDriverError) as failed:
        node_probe.count_gpus(real_run)
    assert str(failed.value) == (f"{smi} failed (rc=9): NVIDIA-SMI has failed because it couldn't communicate with "
                                 "the NVIDIA driver.")
    with pytest.raises(ValueError, match=r"^num_gpus auto: .* failed \(rc=9\): NVIDIA-SMI has failed .*; fix the GPU "
                                         r"driver, or set ray_worker_num_gpus to the number this worker offers "
                                         r"\(0 for a CPU worker\)$"):
        node_probe.gpu_count(real_run, "auto")


def test_a_hung_driver_is_ended_and_said_never_waited_for(no_driver, monkeypatch):
    monkeypatch.setattr(node_probe, "NVIDIA_SMI_TIMEOUT_S", 1)
    smi = script(no_driver / "driver", "nvidia-smi", "exec /bin/sleep 30")
    with pytest.raises(node_probe.GpuDriverError, match=rf"^{smi} did not answer within 1 s \(a hung driver\?\)$"):
        node_probe.count_gpus(real_run)


def test_a_driver_without_gpus_counts_zero_and_auto_refuses_it(no_driver):
    smi = script(no_driver / "path", "nvidia-smi", "echo 'No devices were found'; exit 6")
    assert node_probe.count_gpus(real_run) == (0, smi)
    with pytest.raises(ValueError, match=f"^num_gpus auto found no GPU \\({smi} lists no GPU\\); install the driver"):
        node_probe.gpu_count(real_run, "auto")


def test_no_driver_at_all_is_none_and_auto_names_where_it_looked(no_driver):
    count, how = node_probe.count_gpus(never_run)
    assert count is None and how == (f"nvidia-smi not found on PATH or in {no_driver / 'driver'}, and no "
                                     "libnvidia-ml-absent-for-tests.so.1")
    with pytest.raises(ValueError) as refused:
        node_probe.gpu_count(never_run, "auto")
    assert str(refused.value) == (f"num_gpus auto found no GPU ({how}); install the driver or set "
                                  "ray_worker_num_gpus: 0 for a CPU worker")
    assert node_probe.gpu_count(never_run, "0") == 0  # the site says 0: a CPU worker


class FakeNvml:
    """libnvidia-ml.so.1 as ctypes shows it: each call returns an nvmlReturn_t (0: success)."""

    def __init__(self, gpus=2, init=0):
        self.gpus, self.init, self.calls = gpus, init, []
        self.nvmlErrorString = lambda ret: {9: b"Driver Not Loaded"}.get(ret)

    def nvmlInit_v2(self):
        self.calls.append("init")
        return self.init

    def nvmlDeviceGetCount_v2(self, ref):
        ref._obj.value = self.gpus
        return 0

    def nvmlShutdown(self):
        self.calls.append("shutdown")
        return 0


def test_without_nvidia_smi_nvml_counts_them(no_driver, monkeypatch):
    nvml = FakeNvml(gpus=8)
    monkeypatch.setattr(node_probe, "_load_nvml", lambda: nvml)
    assert node_probe.count_gpus(never_run) == (8, "libnvidia-ml-absent-for-tests.so.1")
    assert node_probe.gpu_count(never_run, "auto") == 8 and nvml.calls == ["init", "shutdown"] * 2


def test_nvml_that_cannot_start_is_a_driver_error(no_driver, monkeypatch):
    monkeypatch.setattr(node_probe, "_load_nvml", lambda: FakeNvml(init=9))
    with pytest.raises(node_probe.GpuDriverError, match="nvmlInit_v2 failed: Driver Not Loaded$"):
        node_probe.count_gpus(never_run)


def test_the_real_nvml_is_absent_here_or_answers(monkeypatch):
    # The real loader: on this CPU machine no driver library; where one is, it loads.
    lib = node_probe._load_nvml()
    assert lib is None or hasattr(lib, "nvmlInit_v2")


def test_programs_are_found_where_rays_agent_finds_them(tmp_path, monkeypatch):
    venv = tmp_path / "venv" / "bin"
    spy = script(venv, "py-spy", "exit 0")
    python = str(venv / "python")
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    assert node_probe.ray_first_path(python, "/usr/bin") == f"{venv}{os.pathsep}/usr/bin"
    assert node_probe.find_on_ray_path("py-spy", python) == spy  # ray start's PATH: the Ray Python's folder first
    # A running raylet's PATH is what its agent has: py-spy missing there is missing for Ray.
    assert node_probe.find_on_ray_path("py-spy", python, {"PATH": str(tmp_path / "elsewhere")}) is None
    other = script(tmp_path / "elsewhere", "py-spy", "exit 0")
    assert node_probe.find_on_ray_path("py-spy", "/opt/image/bin/python") == other


ROOT = pathlib.Path(__file__).resolve().parents[3]
# What running or loading the GPU driver takes: only probe.py may say it, so every GPU count is count_gpus.
DRIVER_WORDS = ("nvidia-smi", "--query-gpu", "libnvidia-ml", "nvmlInit", "nvmlDeviceGetCount")


def test_gpus_are_counted_in_one_place():
    """ray_node (num_gpus auto) and ray_doctor (its gpus row) both count through probe.count_gpus; no other product
    file runs nvidia-smi or asks NVML (words in documentation and messages aside)."""
    others = []
    for folder in ("library", "module_utils", "action_plugins", "plugin_utils", "filter_plugins", "lookup_plugins",
                   "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "module_utils" / "node" / "probe.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                        node.value in DRIVER_WORDS or node.value.startswith(DRIVER_WORDS[1:])):
                    others.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not others, others
    assert "node_probe.count_gpus(" in (ROOT / "library" / "ray_doctor.py").read_text()
    assert "node_probe.gpu_count(" in (ROOT / "module_utils" / "node" / "ray_node.py").read_text()
