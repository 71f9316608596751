"""The preflight's probe: what a verl trainer job will do, asked in the job's own Python before it is submitted.

Run as `<ray_config.python> -c <this file's source> <request JSON> <trainer module> <overrides...> --cfg job`,
with the job's environment (its env vars, PYTHONPATH to its code), on the head when the head's Python has the
job's libraries, else on a worker (module_utils/jobs/submission/preflight.py decides). Standard library only at the top:
the head's module imports this file only to read its source.

In one process, with no second import of verl or torch:
1. the libraries a trainer imports must be here (else exit MISSING_RC: this Python is not the job's);
2. verl's hydra composes the job's config (`--cfg job`); each override hydra refuses (a key verl's config lacks,
   a `+` on a key it has) is noted, with where the same setting is in the key's own component of this verl's
   config (component()), and left out of the next compose, so one run names every one of them (`refused`); an
   error no override explains is verl's message (`compose_error`);
3. verl's own start-up checks on the composed config, those its trainer runs before it places a worker
   (`startup`: each one that refuses, as verl says it);
4. facts, printed as one line `<MARK> <json>` on stdout: the attention implementation each asked key resolves to,
   the engine each asked section instantiates (`engines`), the resolved values of the asked keys (`values`: batch
   sizes, parallel sizes, the placement), whether the critic's loader hard-codes flash_attention_2, whether
   flash_attn imports, the platform's Ray resource name and the CPUs verl asks per GPU bundle (its pools' own
   defaults).
The decisions are the head's (module_utils/jobs/submission/preflight.py).
"""

import contextlib
import difflib
import importlib.util
import inspect
import io
import json
import os
import re
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


# Hydra's messages for an override it refuses, each naming the override's key: one verl's config lacks (`key=v`),
# one it has (`+key=v`), a value it cannot merge (quoted whole: `Error merging override key=v`), and a config
# group's option that is not there (`group=option`: `Could not find 'group/option'`).
_REFUSED = ((re.compile(r"Could not override '([^']+)'"), "missing"),
            (re.compile(r"An item is already at '([^']+)'"), "exists"))
_MERGING = re.compile(r"Error merging override (.+)")
_NO_OPTION = re.compile(r"Could not find '(.+)/([^/']+)'")


def override_key(arg):
    """The config key an override sets: `+a.b=1`, `++a.b=1` and `a.b=1` all set a.b."""
    return arg.partition("=")[0].lstrip("~+").partition("@")[0]


def refused_override(message, args):
    """(index in args, kind) of the override hydra's message refuses, or None when no override explains it."""
    overrides = [(i, arg) for i, arg in enumerate(args) if i and "=" in arg and not arg.startswith("-")]
    for pattern, kind in _REFUSED:
        found = pattern.search(message)
        for i, arg in overrides if found else ():
            adds = arg.startswith("+") and not arg.startswith("++")
            if override_key(arg) == found.group(1) and (kind == "missing" or adds):
                return i, kind
    found = _MERGING.search(message)
    for i, arg in overrides if found else ():
        if arg == found.group(1).strip():
            return i, "error"
    found = _NO_OPTION.search(message)
    for i, arg in overrides if found else ():
        if override_key(arg).replace(".", "/") == found.group(1) and arg.partition("=")[2] == found.group(2):
            return i, "error"
    return None


def one_line(message, limit=400):
    """Hydra's multi-line message as one line, without its config search path."""
    lines = []
    for line in message.splitlines():
        if line.strip().startswith("Config search path"):
            break
        lines.extend([line.strip()] if line.strip() else [])
    return " | ".join(lines)[:limit]


def _paths(tree, prefix=()):
    for key, value in tree.items():
        path = (*prefix, str(key))
        yield path
        if isinstance(value, dict):
            yield from _paths(value, path)


def _shared(a, b, step):
    """How many parts a and b share from their start (step 1) or their end (step -1)."""
    pairs = zip(a[::step], b[::step])
    return next((n for n, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))


# verl's config sections that group several workers' components: the hybrid worker's actor, rollout, ref and model
# under actor_rollout_ref. A key's component is that section's child there, else the key's top-level section.
GROUPS = ("actor_rollout_ref",)


def component(key):
    """The parts of a key's component: actor_rollout_ref.actor.x -> (actor_rollout_ref, actor), critic.x ->
    (critic,)."""
    parts = tuple(key.split("."))
    return parts[:2] if parts[0] in GROUPS and len(parts) > 2 else parts[:1]


def same_setting(tree, key):
    """Where a composed config keeps the setting a key it lacks names, only in the key's own component (never the
    rollout's setting for the actor's): the paths under the component ending in the key's last part, or, when this
    config has no such component (it moved whole), the paths ending in the component's name and the rest of the
    key; of those, the most last parts shared, then the most first parts; every path tied best, or []."""
    want = tuple(key.split("."))
    own = component(key)
    node = lookup(tree, ".".join(own))
    if isinstance(node, dict):
        found = [(*own, *path) for path in _paths(node) if path[-1] == want[-1]]
    else:  # a key that is its own component (`lr`) has nothing of it to find elsewhere
        tail = want[len(own) - 1:]
        found = [path for path in _paths(tree) if path[-len(tail):] == tail] if len(tail) > 1 else []
    scored = {".".join(path): (_shared(path, want, -1), _shared(path, want, 1)) for path in found if path != want}
    best = max(scored.values(), default=None)
    return sorted(path for path, score in scored.items() if score == best)


def where_else(tree, key):
    """What a composed config has instead of a key it lacks: the same setting elsewhere in its component
    (same_setting, with the component and whether this config has it), the keys beside it spelled like it (close),
    and whether its parent is an empty mapping, one to add keys to (open_parent)."""
    parent_key, _, leaf = key.rpartition(".")
    parent = lookup(tree, parent_key) if parent_key else tree
    beside = [str(name) for name in parent] if isinstance(parent, dict) else []
    close = difflib.get_close_matches(leaf, beside, n=3, cutoff=0.85)  # 0.8 takes grad_offload for param_offload
    own = ".".join(component(key))
    return {"same_setting": same_setting(tree, key), "open_parent": parent == {}, "component": own,
            "component_here": isinstance(lookup(tree, own), dict),
            "close": [f"{parent_key}.{name}" if parent_key else name for name in close]}


def compose(argv):
    """Run the trainer's hydra main with `--cfg job` in this process: (exit code, the composed config's text, the
    error's text or None). HYDRA_FULL_ERROR makes hydra raise its errors here instead of printing them."""
    out = io.StringIO()
    sys.argv = list(argv)
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # argparse's usage errors; a trainer that exits
        if exc.code in (None, 0):
            return 0, out.getvalue(), None
        return (exc.code if isinstance(exc.code, int) else 1), out.getvalue(), str(exc.code)
    except Exception as exc:  # noqa: BLE001 - hydra's errors and the trainer module's own, as verl's message
        return 1, out.getvalue(), error_text(exc)
    return 0, out.getvalue(), None


def error_text(exc):
    """An error as hydra prints it (its message, then an OmegaConf cause's); other errors with their type."""
    text = str(exc) if type(exc).__module__.startswith("hydra.") else f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    if cause is not None and type(cause).__module__.startswith("omegaconf"):
        text += "\n" + str(cause)
    return text


def compose_all(argv):
    """Compose; while hydra refuses an override, note it and compose again without it, so one run names them all:
    (exit code, config text, refused overrides, the error no override explains or None). Each round drops an
    override, so it ends."""
    args, refused = list(argv), []
    while True:
        code, text, error = compose(args)
        found = refused_override(error, args) if error else None
        if found is None:
            return code, text, refused, error
        index, kind = found
        refused.append({"override": args[index], "key": override_key(args[index]), "kind": kind,
                        "error": one_line(error) if kind == "error" else None})
        del args[index]


def _ppo_startup(config):
    """main_ppo's own checks before it places a worker, on its driver: main() sets the device and runs
    validate_config (the batch sizes against the GPUs, each micro-batch pair, the actor's and the critic's typed
    configs and their validate(); the critic's builds its HFModelConfig, which reads the tokenizer and HF config at
    critic.model.path, as the driver does); TaskRunnerV1.run resolves every interpolation; and the rollout's typed
    config (RolloutConfig.__post_init__: a removed `mode: sync`, pipeline parallel on vllm), which verl builds on
    the GPU worker at its start but needs no GPU. Left out: the trainer class's lookup (trainer.v1.trainer_mode,
    some 2 s of imports), the trainer's constructor and init (the tokenizer, data sets and loaders from the files,
    the resource pools, which place workers) and everything on the workers (engines, models, NCCL)."""
    from omegaconf import OmegaConf

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    inspect.signature(validate_config).bind(config, use_reference_policy=True, use_critic=True)
    rollout = config.actor_rollout_ref.rollout
    return [lambda: auto_set_device(config),
            lambda: validate_config(config, use_reference_policy=need_reference_policy(config),
                                    use_critic=need_critic(config)),
            lambda: OmegaConf.resolve(config),
            *([lambda: omega_conf_to_dataclass(rollout)] if "_target_" in rollout else [])]


def _sft_startup(config):
    """sft_trainer_ray's own checks before it places a worker: main() sets the device; SFTTrainer._build_config
    builds the typed engine, optimizer, checkpoint and profiler configs. Left out: the model's (HFModelConfig reads
    the tokenizer and HF config at model.path, on the node the driver runs on), the profile interval's asserts (a
    private method), the data sets (the files) and the worker group (placement)."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.device import auto_set_device

    sections = [config[name] for name in ("engine", "optim", "checkpoint", "profiler")
                if name in config and "_target_" in config[name]]
    return [lambda: auto_set_device(config), *(lambda s=s: omega_conf_to_dataclass(s) for s in sections)]


# Per trainer module, its checks as steps: what builds them fails only in a verl they do not fit (another version:
# nothing is checked then); each step that raises is a refusal in verl's words.
STARTUP = {"verl.trainer.main_ppo": _ppo_startup, "verl.trainer.sft_trainer_ray": _sft_startup}


def startup_errors(module, text):
    """(each of verl's own start-up checks (STARTUP) that refuses the composed config, in one line; why none could
    run in this verl, or None)."""
    from omegaconf import OmegaConf

    config = OmegaConf.create(text)
    OmegaConf.set_struct(config, True)  # as hydra hands it to the trainer's main
    try:
        steps = STARTUP[module](config) if module in STARTUP else []
    except Exception as exc:  # noqa: BLE001 - a verl whose functions differ: not a refusal
        return [], f"{type(exc).__name__}: {exc}"[:300]
    errors = []
    with contextlib.redirect_stdout(sys.stderr):  # verl prints its progress; stdout is the facts' line
        for step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - verl's refusal, whatever it raises (ValueError, AssertionError)
                errors.append(failure_line(exc))
    return list(dict.fromkeys(errors)), None  # one cause may fail two steps alike


def failure_line(exc):
    """verl's refusal in one line: hydra's instantiate wraps a dataclass's own error (its cause) with where."""
    cause = exc.__cause__ if type(exc).__name__ == "InstantiationException" and exc.__cause__ else exc
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    where = [line for line in str(exc).splitlines() if line.startswith("full_key: ")]
    text = f"{type(cause).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return (text + (f" ({where[-1]})" if cause is not exc and where else ""))[:600]


_SCALARS = (bool, int, float, str, type(None))


def resolved(conf, key):
    """The value at a dotted key with its interpolations resolved (as verl reads it), a scalar, or None when it is
    missing, not a scalar, or does not resolve."""
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(conf, key, default=None, throw_on_resolution_failure=False)
    except Exception:  # noqa: BLE001 - a key of another shape (a list indexed by name): not there
        return None
    return value if isinstance(value, _SCALARS) else None


def engine_strategy(conf, section):
    """The training engine a config section instantiates: its `strategy` as resolved, else the default `strategy` of
    the class its `_target_` names (verl 0.9.1's megatron engine config says none: McoreEngineConfig's is
    "megatron"); None when neither says (an older verl, a target that does not import)."""
    import dataclasses

    strategy = resolved(conf, f"{section}.strategy")
    if isinstance(strategy, str) and strategy != "???":
        return strategy
    target = resolved(conf, f"{section}._target_")
    if not isinstance(target, str):
        return None
    try:
        from hydra.utils import get_class

        fields = {field.name: field for field in dataclasses.fields(get_class(target))}
    except Exception:  # noqa: BLE001 - not a dataclass, or not importable here: the engine is not known
        return None
    default = fields["strategy"].default if "strategy" in fields else None
    return default if isinstance(default, str) and default != "???" else None


def main(argv):
    request, trainer = json.loads(argv[0]), argv[1:]
    missing = missing_modules()
    if missing:
        print(f"{MARK}-missing: {sys.executable} cannot import {', '.join(missing)}", file=sys.stderr)
        return MISSING_RC
    code, text, refused, error = compose_all(trainer)
    if error is not None and not refused:
        sys.stdout.write(text)
        print(error, file=sys.stderr)
        return code or 1
    import yaml  # hydra's own dependency

    import verl

    facts = {"python": sys.executable, "verl_version": getattr(verl, "__version__", None), "refused": refused}
    if error is not None:  # what no override explains, after those that are: verl's message, with them
        facts["compose_error"] = one_line(error, 1200)
        print(f"{MARK} {json.dumps(facts, sort_keys=True)}")
        return 0
    config = yaml.safe_load(text) or {}
    for item in refused:
        if item["kind"] == "missing":
            item.update(where_else(config, item["key"]))
    facts["startup"], facts["startup_skipped"] = startup_errors(trainer[0], text)
    attention = {key: lookup(config, key) for key in request.get("attn_keys", [])}
    from omegaconf import OmegaConf

    conf = OmegaConf.create(text)
    facts.update({"attention": attention,
                  "engines": {section: engine_strategy(conf, section) for section in request.get("engines", [])},
                  "values": {key: resolved(conf, key) for key in request.get("values", [])}})
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
