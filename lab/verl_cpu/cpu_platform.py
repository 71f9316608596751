"""verl platform "cpu": what verl's platform layer (verl.plugin.platform) needs to train on the CPU alone."""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from . import device as cpu_device

NAME = "cpu"


@PlatformRegistry.register(platform=NAME)
class PlatformCPU(PlatformBase):
    """The CPU as verl's one "device" per process, with gloo for collectives and Ray CPUs for scheduling."""

    @property
    def device_name(self) -> str:
        # Used as a torch device type (tensor.to("cpu"), init_device_mesh("cpu", ...)) and as trainer.device.
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        # torch.cpu lacks memory_reserved, get_device_name, get_rng_state and friends that verl calls.
        return cpu_device

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        # Never picked by auto-detection, so loading the plugin on a GPU host changes nothing:
        # the CPU platform is chosen only by VERL_PLATFORM=cpu.
        return False

    def current_device(self) -> torch.device:
        return cpu_device.current_device()

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        cpu_device.set_device(device_index)

    def synchronize(self, device_index: int | None = None) -> None:
        cpu_device.synchronize(device_index)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        # "expandable_segments:..." is a CUDA caching-allocator setting; the CPU allocator has none.
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # verl's Worker copies this variable around; a CPU build of torch ignores it, and keeping the name
        # Ray and verl already handle avoids inventing one.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # RayResourcePool builds each bundle as {"CPU": max_colocate_count, <this name>: 1}: naming "CPU" here
        # overwrites the first key, so a bundle asks for exactly {"CPU": 1} and no GPU.
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        # Ray refuses "CPU" inside resources={...}; the fraction of a bundle a worker takes is num_cpus.
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
