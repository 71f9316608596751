"""What a node has, found without changing anything: the interface that reaches an address, its GPUs, a program on
the PATH Ray's processes get. Used by ray_node (NCCL/Gloo's interface, `num_gpus: auto`) and ray_doctor (its
interface, GPU and py-spy rows), so both see the node the same way.

Hosts differ in what they ship: no iproute2 in many GPU images, nvidia-smi off the PATH an SSH session has
(/usr/local/nvidia/bin in containers), so each question has a fallback that needs only the kernel or the driver's
library. Commands run through a `run_command(argv) -> (rc, out, err)` given by the caller (AnsibleModule.run_command).
"""

import ctypes
import os
import shutil
import socket

# Where `ip` lives when the PATH of a non-interactive SSH session lacks the sbin folders.
IP_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


def resolve_ipv4(target):
    """target's IPv4 address (a name is resolved; iproute2 resolves nothing), or None when it has none."""
    if not target:
        return None
    try:
        return socket.getaddrinfo(str(target), None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
    except (OSError, UnicodeError, IndexError):
        return None


def _route_by_ip(run_command, ip_bin, addr):
    """The interface `ip route get` names for addr (for a local address, the one holding it), or None."""
    rc, out, _ = run_command([ip_bin, "route", "get", addr])
    if rc != 0:
        return None
    if out.startswith("local"):
        rc, out, _ = run_command([ip_bin, "-o", "addr", "show", "to", addr])
        fields = out.split()
        return fields[1] if rc == 0 and len(fields) > 1 else None
    words = out.split()
    return words[words.index("dev") + 1] if "dev" in words[:-1] else None


def source_address(addr):
    """The local address the kernel picks to reach addr (its routing, policy rules included): a UDP connect() only
    chooses a route and sends nothing. Raises OSError when no route reaches addr."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((addr, 9))
        return sock.getsockname()[0]


class _IfAddrs(ctypes.Structure):
    pass


# struct ifaddrs of <ifaddrs.h> (glibc and musl): the union of broadcast/destination address is one pointer.
_IfAddrs._fields_ = [("ifa_next", ctypes.POINTER(_IfAddrs)), ("ifa_name", ctypes.c_char_p),
                     ("ifa_flags", ctypes.c_uint), ("ifa_addr", ctypes.c_void_p), ("ifa_netmask", ctypes.c_void_p),
                     ("ifa_ifu", ctypes.c_void_p), ("ifa_data", ctypes.c_void_p)]


def local_addresses():
    """[(interface, IPv4 address)] of every address on this host, secondary ones too (libc's getifaddrs; the
    per-interface SIOCGIFADDR ioctl sees only each interface's first). An alias label (eth0:1) is its device."""
    libc = ctypes.CDLL(None, use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        raise OSError(ctypes.get_errno(), "getifaddrs failed")
    found = []
    try:
        node = head
        while node:
            entry = node.contents
            # sockaddr_in: the family (a native unsigned short), the port, then the address's 4 bytes.
            if entry.ifa_addr and ctypes.c_ushort.from_address(entry.ifa_addr).value == socket.AF_INET:
                address = socket.inet_ntoa(ctypes.string_at(entry.ifa_addr + 4, 4))
                found.append((entry.ifa_name.decode("utf-8", "replace").split(":")[0], address))
            node = entry.ifa_next
    finally:
        libc.freeifaddrs(head)
    return found


def interface_holding(addr):
    """The interface that holds the local address addr, or None."""
    return next((name for name, held in local_addresses() if held == addr), None)


def interface_to(run_command, target):
    """The interface this host reaches target (an address or a name) through; for its own address, the one holding
    it. None when the name does not resolve or nothing reaches it.

    iproute2 (`ip route get`) when it is here and answers; else the kernel's own choice of source address for
    target and the interface holding that address (the same interface, but for routes whose preferred source is
    another interface's address).
    """
    addr = resolve_ipv4(target)
    if addr is None:
        return None
    ip_bin = shutil.which("ip") or shutil.which("ip", path=os.pathsep.join(IP_DIRS))
    if ip_bin:
        found = _route_by_ip(run_command, ip_bin, addr)
        if found:
            return found
    try:
        return interface_holding(source_address(addr))
    except OSError:
        return None


# Where GPU drivers put nvidia-smi besides the PATH (which a non-interactive SSH session keeps short): /usr/bin (a
# distribution's driver), /usr/local/nvidia/bin (Kubernetes GPU images, GKE), /usr/local/cuda/bin (CUDA images),
# /usr/lib/wsl/lib (WSL2), /run/nvidia/driver/usr/bin (NVIDIA's GPU Operator's driver root).
NVIDIA_SMI_DIRS = ("/usr/bin", "/usr/local/nvidia/bin", "/usr/local/cuda/bin", "/usr/lib/wsl/lib",
                   "/run/nvidia/driver/usr/bin")
# The driver's management library, asked when no nvidia-smi is found (the driver ships both).
NVML_LIBRARY = "libnvidia-ml.so.1"
NVIDIA_SMI_QUERY = ("--query-gpu=index", "--format=csv,noheader")
# What nvidia-smi says, exiting non-zero, where the driver works and there is no GPU.
_NO_DEVICES = "No devices were found"


class GpuDriverError(RuntimeError):
    """The driver is here but failed to count the GPUs (one line: the command and its first error line)."""


def find_nvidia_smi():
    """nvidia-smi's path: on the PATH, else in the first of NVIDIA_SMI_DIRS that has it; None when nowhere."""
    return shutil.which("nvidia-smi") or shutil.which("nvidia-smi", path=os.pathsep.join(NVIDIA_SMI_DIRS))


def _load_nvml():
    """The NVML library, or None when the driver's library is not installed."""
    try:
        return ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return None


def _nvml_count(lib):
    def failed(step, ret):
        lib.nvmlErrorString.restype = ctypes.c_char_p
        why = (lib.nvmlErrorString(ret) or b"").decode("utf-8", "replace")
        return GpuDriverError(f"{NVML_LIBRARY} {step} failed: {why or 'error ' + str(ret)}")

    ret = lib.nvmlInit_v2()
    if ret != 0:
        raise failed("nvmlInit_v2", ret)
    try:
        count = ctypes.c_uint(0)
        ret = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        if ret != 0:
            raise failed("nvmlDeviceGetCount_v2", ret)
        return count.value
    finally:
        lib.nvmlShutdown()


NVIDIA_SMI_TIMEOUT_S = 60


def count_gpus(run_command):
    """(GPUs, how they were counted) on this node: nvidia-smi (on the PATH or in NVIDIA_SMI_DIRS), else NVML.

    GPUs is None where there is no driver at all (neither found: a CPU node), 0 where the driver works and sees no
    GPU. Raises GpuDriverError where the driver is here but fails (nvidia-smi exits non-zero, NVML errs): a GPU node
    whose GPUs nothing can use.
    """
    smi = find_nvidia_smi()
    if smi:
        # A wedged driver can keep nvidia-smi waiting for ever: coreutils' timeout ends it (rc 124), a driver fault.
        limit = shutil.which("timeout", path=os.environ.get("PATH", "") + os.pathsep + "/usr/bin:/bin")
        rc, out, err = run_command([limit, "-k", "5", str(NVIDIA_SMI_TIMEOUT_S), smi, *NVIDIA_SMI_QUERY] if limit
                                   else [smi, *NVIDIA_SMI_QUERY])
        if rc in (124, 137) and limit:
            raise GpuDriverError(f"{smi} did not answer within {NVIDIA_SMI_TIMEOUT_S} s (a hung driver?)")
        if rc == 0:
            return len([line for line in out.splitlines() if line.strip()]), smi
        lines = [line.strip() for line in f"{err}\n{out}".splitlines() if line.strip()]
        if lines and lines[0].startswith(_NO_DEVICES):
            return 0, smi
        raise GpuDriverError(f"{smi} failed (rc={rc}): {lines[0][:200] if lines else 'no output'}")
    lib = _load_nvml()
    if lib is None:
        return None, (f"nvidia-smi not found on PATH or in {', '.join(NVIDIA_SMI_DIRS)}, and no {NVML_LIBRARY}")
    return _nvml_count(lib), NVML_LIBRARY


def gpu_count(run_command, wanted):
    """The GPUs a worker offers: a whole number as given (0: a CPU worker; the lab's logical GPUs), or for "auto" the
    GPUs counted here (count_gpus), of which there must be at least one: auto means a GPU worker, and a GPU worker
    that joined with 0 GPUs would pass the readiness gate and leave every GPU job waiting.

    ValueError, one line naming the option and the fix, for anything else, no GPU or a failing driver.
    """
    text = str(wanted).strip()
    if text.isdigit() and len(text) <= 4:
        return int(text)
    if text != "auto":
        raise ValueError("num_gpus must be a whole number or auto")
    try:
        count, how = count_gpus(run_command)
    except GpuDriverError as exc:
        raise ValueError(f"num_gpus auto: {exc}; fix the GPU driver, or set ray_worker_num_gpus to the number this "
                         "worker offers (0 for a CPU worker)") from None
    if not count:
        why = how if count is None else f"{how} lists no GPU"
        raise ValueError(f"num_gpus auto found no GPU ({why}); install the driver or set ray_worker_num_gpus: 0 "
                         "for a CPU worker")
    return count


def ray_first_path(python, path):
    """A PATH with the Ray Python's folder first: the one ray_node.run_env gives `ray start`, so Ray's processes
    (its dashboard agent, jobs' entrypoints) find that Python's scripts before the system's."""
    return os.path.dirname(python) + os.pathsep + (path or "/usr/bin:/bin")


def find_on_ray_path(name, python, raylet_env=None):
    """Where Ray's processes on this node find the program name (Ray's dashboard agent runs py-spy as shutil.which
    finds it on its PATH), or None. raylet_env: a running raylet's environment, whose PATH its agent has; without one,
    the PATH `ray start` would get."""
    path = (raylet_env or {}).get("PATH") or ray_first_path(python, os.environ.get("PATH"))
    return shutil.which(name, path=path)
