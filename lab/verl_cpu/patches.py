"""Run-time wrappers around verl functions that cannot work on the CPU platform as they are.

Nothing of verl is edited or copied: each wrapper calls verl's own function and only adjusts what it hands
to torch. Applying twice is harmless.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .backend import normalize_backend

# verl.utils.distributed functions that build "cpu:gloo,{device}:{backend}" and call
# torch.distributed.init_process_group with it.
PROCESS_GROUP_FUNCTIONS = ("initialize_global_process_group", "initialize_global_process_group_ray")
_MARK = "__verl_cpu_wrapped__"


@contextmanager
def normalized_init_process_group() -> Iterator[None]:
    """While active, torch.distributed.init_process_group gets its backend through normalize_backend.

    verl looks the function up on the torch.distributed module at call time, so swapping the attribute for the
    length of verl's call reaches it without changing torch for anyone else afterwards.
    """
    import torch.distributed as dist

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = normalize_backend(kwargs["backend"])
        elif args:
            args = (normalize_backend(args[0]), *args[1:])
        return original(*args, **kwargs)

    dist.init_process_group = init_process_group
    try:
        yield
    finally:
        dist.init_process_group = original


def wrap_process_group_function(func: Callable) -> Callable:
    """verl's process-group initialiser, run with normalized_init_process_group active."""
    if getattr(func, _MARK, False):
        return func

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with normalized_init_process_group():
            return func(*args, **kwargs)

    setattr(wrapper, _MARK, True)
    return wrapper


def patch_distributed() -> list[str]:
    """Wrap verl.utils.distributed's process-group initialisers; return the names of what was rebound.

    verl modules that already did `from verl.utils.distributed import initialize_global_process_group_ray` before
    this ran hold the unwrapped function: those module attributes are rebound too.
    """
    from verl.utils import distributed

    rebound = []
    for name in PROCESS_GROUP_FUNCTIONS:
        original = getattr(distributed, name)
        if getattr(original, _MARK, False):
            continue
        wrapped = wrap_process_group_function(original)
        for module_name, module in list(sys.modules.items()):
            # Only verl's modules, and through __dict__: getattr on lazy modules (transformers) imports things.
            if module_name != "verl" and not module_name.startswith("verl."):
                continue
            if getattr(module, "__dict__", {}).get(name) is original:
                setattr(module, name, wrapped)
                rebound.append(f"{module_name}.{name}")
    return rebound
