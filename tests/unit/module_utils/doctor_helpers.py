"""One node's facts as the doctor gathers them, for the doctor's tests (test_doctor.py, test_doctor_prometheus.py,
test_doctor_store.py, test_doctor_hidepid.py; the `facts` fixture over them is in conftest.py)."""

PKGS = {"ray": "2.60.0", "torch": "2.13.0+cpu", "verl": "0.9.1", "vllm": None, "sglang": None,
        "transformers": "5.10.4"}


def node(name, ip):
    return {"python": "3.11.7", "packages": dict(PKGS), "snapshots": {"verl-0.9.1": "abcd"}, "gpus_present": None,
            "iface": "eth0", "node_ip": ip, "raylet_env": {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"},
            "free_gb": 100.0, "clock": 1000.0, "probe": f"{name} nonce", "gpus_error": None,
            "py_spy": "/opt/ray/bin/py-spy", "ray_python": "/opt/ray/bin/python", "proc_hidepid": "off"}
