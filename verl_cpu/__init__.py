"""verl_cpu: a verl 0.9.1 platform plugin that lets verl's SFT trainers run on the CPU alone.

Load it through verl's own hooks (see verl/__init__.py and verl/plugin/platform/platform_manager.py):

    PYTHONPATH=<folder holding verl_cpu>  VERL_USE_EXTERNAL_MODULES=verl_cpu  VERL_PLATFORM=cpu

`import verl` imports each module named in VERL_USE_EXTERNAL_MODULES (comma-separated) at its end; importing
this package then

* registers the platform "cpu" (cpu_platform.PlatformCPU) with verl's PlatformRegistry, which
  VERL_PLATFORM=cpu selects when verl first resolves its platform (auto-detection never picks it);
* wraps verl.utils.distributed's process-group initialisers so the backend "cpu:gloo,cpu:gloo" that verl builds
  for device "cpu" reaches torch as plain "gloo" (patches.py).

Still needed from the job (see README.md): VERL_ENGINE_DEVICE=cuda (verl registers its FSDP engine for
cuda/npu only; the engine itself follows the platform), trainer.device=cpu, engine.strategy=fsdp2.
"""

from .cpu_platform import NAME, PlatformCPU
from .patches import patch_distributed

__all__ = ["NAME", "PlatformCPU", "patch_distributed"]

patch_distributed()
