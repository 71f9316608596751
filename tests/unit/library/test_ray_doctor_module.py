"""library/ray_doctor.py on a host like the H200 one: no iproute2, nvidia-smi only in a driver folder, a Ray Python
given as `existing` without py-spy. The node's facts come back (no crash), found the way ray_node finds them."""

import json

import pytest
import ray_doctor
from ansible.module_utils.node import probe as node_probe
from ansible.module_utils.node import ray_node
from ansible.module_utils.testing import patch_module_args

VERSIONS = {"python": "3.12.3", "packages": {"ray": "2.60.0"}}


def script(path, body):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def bare_host(tmp_path, monkeypatch):
    """No `ip` anywhere, an empty PATH, a driver folder of our own, no raylet, a Ray Python that prints versions."""
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setattr(node_probe, "IP_DIRS", (str(tmp_path / "sbin"),))
    monkeypatch.setattr(node_probe, "NVIDIA_SMI_DIRS", (str(tmp_path / "nvidia" / "bin"),))
    monkeypatch.setattr(node_probe, "NVML_LIBRARY", "libnvidia-ml-absent-for-tests.so.1")
    monkeypatch.setattr(ray_node, "find_raylets", list)  # a lab's raylet on this machine is none of ours
    python = script(tmp_path / "image" / "bin" / "python", f"echo '{json.dumps(VERSIONS)}'")
    (tmp_path / "private").mkdir()
    return tmp_path, {"python": python, "shared_root": str(tmp_path / "private"), "head_ip": "127.0.0.2",
                      "node_ip": "127.0.0.1", "node_name": "gpu1", "run_id": "doctor-1"}


def facts(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ray_doctor.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0, out
    return out


def test_without_iproute2_the_route_to_the_head_and_the_gpus_are_found(bare_host, capsys):
    tmp_path, args = bare_host
    script(tmp_path / "nvidia" / "bin" / "nvidia-smi", 'printf "0\\n"')
    out = facts(capsys, args)
    assert out["iface"] == "lo" and out["gpus_present"] == 1 and out["gpus_error"] is None, out
    assert out["py_spy"] is None and out["ray_python"] == args["python"] and out["python"] == "3.12.3"
    assert out["proc_hidepid"] == ray_doctor.proc_hidepid() and out["proc_hidepid"] is not None  # a Linux /proc


def test_a_failing_driver_and_py_spy_beside_the_ray_python_are_reported(bare_host, capsys):
    tmp_path, args = bare_host
    smi = script(tmp_path / "nvidia" / "bin" / "nvidia-smi",
                 "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2; exit 9")
    spy = script(tmp_path / "image" / "bin" / "py-spy", "exit 0")
    out = facts(capsys, args)
    assert out["gpus_present"] is None and out["py_spy"] == spy
    assert out["gpus_error"] == f"{smi} failed (rc=9): NVIDIA-SMI has failed because it could not communicate with " \
                               "the NVIDIA driver."


def test_a_cpu_node_has_no_driver_and_no_count(bare_host, capsys):
    out = facts(capsys, bare_host[1])
    assert out["gpus_present"] is None and out["gpus_error"] is None
