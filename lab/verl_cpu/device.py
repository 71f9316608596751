"""Stand-in for a `torch.<accelerator>` module (torch.cuda, torch.npu) when the "device" is the CPU.

verl calls the platform's device module for things torch.cpu lacks (memory_reserved, get_device_name,
get_rng_state, mem_get_info, ...). Each stand-in here answers for the one CPU "device" of the process:
memory figures are the process's resident set (max_* its peak, from getrusage), so verl's
perf/max_memory_allocated_gb metric reports the worker's peak RSS; RNG state is torch's default CPU generator;
cache, allocator and device selection calls have nothing to do and do nothing.
"""

from __future__ import annotations

import os
import platform as _platform
import resource
from types import SimpleNamespace

import torch

# Streams and events: torch.cpu has no-op versions with the torch.cuda signatures.
Stream = torch.cpu.Stream
Event = torch.cpu.Event
StreamContext = torch.cpu.StreamContext
stream = torch.cpu.stream
current_stream = torch.cpu.current_stream

_CPU = torch.device("cpu")


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> torch.device:
    # A torch.device, not an int: verl moves tensors with .to(current_device()), and an int index means "the
    # current accelerator", which fails on a CPU-only build ("Cannot access accelerator device").
    return _CPU


def set_device(device=None) -> None:
    """One CPU device per process: nothing to select."""


def synchronize(device=None) -> None:
    """CPU work is synchronous."""


def empty_cache() -> None:
    """No caching allocator on the CPU."""


def ipc_collect() -> None:
    pass


def set_per_process_memory_fraction(fraction, device=None) -> None:
    pass


def reset_peak_memory_stats(device=None) -> None:
    """Peak RSS cannot be reset; max_memory_* keep reporting the process's lifetime peak."""


def reset_accumulated_memory_stats(device=None) -> None:
    pass


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    torch.manual_seed(seed)


def get_rng_state(device=None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    torch.set_rng_state(new_state)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_allocated(device=None) -> int:
    return _rss_bytes()


def memory_reserved(device=None) -> int:
    return _rss_bytes()


def max_memory_allocated(device=None) -> int:
    return peak_rss_bytes()


def max_memory_reserved(device=None) -> int:
    return peak_rss_bytes()


def memory_stats(device=None) -> dict:
    return {}


def _meminfo() -> dict[str, int]:
    info = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                fields = rest.split()
                if fields:
                    info[key] = int(fields[0]) * 1024
    except (OSError, ValueError):
        pass
    return info


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of system memory, like torch.cuda.mem_get_info for a GPU."""
    info = _meminfo()
    total = info.get("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    free = info.get("MemAvailable", info.get("MemFree", 0))
    return free, total


def get_device_name(device=None) -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "CPU " + line.partition(":")[2].strip()
    except OSError:
        pass
    return "CPU " + (_platform.processor() or _platform.machine())


def get_device_capability(device=None) -> tuple[None, None]:
    return None, None


def get_device_properties(device=None) -> SimpleNamespace:
    return SimpleNamespace(name=get_device_name(), total_memory=mem_get_info()[1], major=None, minor=None,
                           multi_processor_count=os.cpu_count() or 1)
