"""The process-group backend rewrite, kept free of torch and verl so it can be tested anywhere.

verl 0.9.1 (verl/utils/distributed.py) always asks torch.distributed for the backend
"cpu:gloo,{device}:{collective backend}". On the CPU platform that reads "cpu:gloo,cpu:gloo", which torch rejects
("Duplicate device type cpu"). Plain "gloo" means the same thing to torch: gloo for CPU tensors.
"""

from __future__ import annotations


def parse_backend(backend: str) -> list[tuple[str, str]]:
    """"cpu:gloo,cuda:nccl" -> [("cpu", "gloo"), ("cuda", "nccl")]; a plain "gloo" -> [("", "gloo")]."""
    pairs = []
    for part in backend.split(","):
        part = part.strip()
        if not part:
            continue
        device, sep, name = part.partition(":")
        pairs.append((device.strip(), name.strip()) if sep else ("", device.strip()))
    return pairs


def normalize_backend(backend: str | None) -> str | None:
    """Collapse a device:backend list that names one device type twice into the one backend it means.

    "cpu:gloo,cpu:gloo" -> "gloo". Anything torch accepts as it is ("gloo", "cpu:gloo", "cpu:gloo,cuda:nccl",
    None) comes back unchanged, so the rewrite is harmless on a GPU host. A repeated device type with two
    different backends ("cpu:gloo,cpu:nccl") has no single meaning and raises ValueError.
    """
    if not backend or ":" not in backend:
        return backend
    pairs = parse_backend(backend)
    devices = [device for device, _ in pairs]
    if len(set(devices)) == len(devices):
        return backend
    chosen: dict[str, str] = {}
    for device, name in pairs:
        if chosen.setdefault(device, name) != name:
            raise ValueError(f"backend {backend!r} gives device type {device!r} two backends")
    names = set(chosen.values())
    if len(chosen) == 1 and len(names) == 1:
        return names.pop()
    # Several device types, one of them repeated consistently: drop the repeats, keep the order.
    return ",".join(f"{device}:{name}" for device, name in chosen.items())
