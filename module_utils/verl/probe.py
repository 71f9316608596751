"""The preflight's probe: what a verl trainer job will do, asked in the job's own Python before it is submitted.

Run as `<ray_config.python> -c <this file's source> <request JSON> <trainer module> <overrides...> --cfg job`,
with the job's environment (its env vars, PYTHONPATH to its code), on the head when the head's Python has the
job's libraries, else on a worker (module_utils/jobs/preflight.py decides). Standard library only at the top:
the head's module imports this file only to read its source.

In one process, with no second import of verl or torch:
1. the libraries a trainer imports must be here (else exit MISSING_RC: this Python is not the job's);
2. verl's hydra composes the job's config (`--cfg job`: verl's own message and exit code for a bad override);
3. facts, printed as one line `<MARK> <json>` on stdout: the attention implementation each asked key resolves to,
   whether the critic's loader hard-codes flash_attention_2, whether flash_attn imports, the platform's Ray
   resource name and the CPUs verl asks per GPU bundle (its pools' own defaults).
The decisions are the head's (module_utils/jobs/preflight_checks.py).
"""

import contextlib
import importlib.util
import io
import json
import runpy
import sys

MARK = "RAY_VERL_PROBE"
MISSING_RC = 66  # this Python lacks the job's libraries: run the probe where the job's Python is
NEEDED = ("verl", "torch", "hydra")  # what `python -m verl.trainer.<trainer> --cfg job` imports first
FLASH = "flash_attention_2"


def missing_modules(names=NEEDED):
    return [name for name in names if importlib.util.find_spec(name) is None]


def lookup(config, dotted):
    """The value at a dotted key of the composed config, or None when a part is missing."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _constants(code):
    for const in code.co_consts:
        if hasattr(const, "co_consts"):
            yield from _constants(const)
        else:
            yield const


def hard_coded_flash(function):
    """Whether a function's own code names flash_attention_2 (verl 0.9.1's load_valuehead_model does, whatever the
    model's override_config says; a platform plugin may have replaced it, as the lab's verl_cpu does)."""
    code = getattr(function, "__code__", None)
    return code is not None and FLASH in set(_constants(code))


def flash_attn_error():
    """None when flash_attn imports in this Python, else the first line of why not."""
    try:
        import flash_attn  # noqa: F401 - only whether it imports
    except Exception as exc:  # noqa: BLE001 - an ABI mismatch raises other errors than ImportError
        return (f"{type(exc).__name__}: {exc}".splitlines() or ["import failed"])[0][:300]
    return None


def pool_facts():
    """The platform's Ray resource name and the CPUs verl asks per bundle, from verl's own code."""
    import dataclasses
    import inspect

    from verl.plugin.platform import get_platform
    from verl.single_controller.ray.base import RayResourcePool, ResourcePoolManager

    manager = {f.name: f.default for f in dataclasses.fields(ResourcePoolManager)}
    return {"resource": get_platform().ray_resource_name(),
            "cpus_per_bundle": {
                "RayResourcePool": inspect.signature(RayResourcePool.__init__).parameters["max_colocate_count"].default,
                "ResourcePoolManager": manager["max_colocate_count"]}}


def compose(argv):
    """Run the trainer's hydra main with `--cfg job` in this process: (exit code, the composed config's text)."""
    out = io.StringIO()
    sys.argv = list(argv)
    code = 0
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    return code, out.getvalue()


def main(argv):
    request, trainer = json.loads(argv[0]), argv[1:]
    missing = missing_modules()
    if missing:
        print(f"{MARK}-missing: {sys.executable} cannot import {', '.join(missing)}", file=sys.stderr)
        return MISSING_RC
    code, text = compose(trainer)
    if code != 0:
        sys.stdout.write(text)
        return code
    import yaml  # hydra's own dependency

    config = yaml.safe_load(text) or {}
    attention = {key: lookup(config, key) for key in request.get("attn_keys", [])}
    facts = {"python": sys.executable, "attention": attention,
             "strategies": {key: lookup(config, where) for key, where in request.get("strategy_keys", {}).items()}}
    if request.get("valuehead"):
        from verl.utils import model

        facts["valuehead_flash"] = hard_coded_flash(model.load_valuehead_model)
    if facts.get("valuehead_flash") or any(v in (None, FLASH) for v in attention.values()):
        facts["flash_attn_error"] = flash_attn_error()
    facts.update(pool_facts())
    print(f"{MARK} {json.dumps(facts, sort_keys=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
