"""What the preflight decides from the probe's facts (module_utils/verl/probe.py) and the cluster's nodes.

Pure: no Ray, no process. Each check returns its problems, one line each (None or a list), and verdict() makes
them one message, every problem of one run in it.
"""

from ansible.module_utils.verl import probe as verl_probe

_ACTOR = "actor_rollout_ref.model.override_config.attn_implementation"
_CRITIC = "critic.model.override_config.attn_implementation"
# Where verl 0.9.1 reads each model's attention implementation (verl/workers/config/model.py, HFModelConfig:
# override_config.get("attn_implementation", "flash_attention_2")), per workload. ppo's critic is loaded by
# verl/utils/model.py load_valuehead_model, which passes attn_implementation="flash_attention_2" itself.
ATTENTION_KEYS = {"sft": ("model.override_config.attn_implementation",),
                  "grpo": (_ACTOR,),
                  "ppo": (_ACTOR, _CRITIC)}
VALUEHEAD = ("ppo",)  # workloads with a critic (adv_estimator gae)
# The engine that loads each model: only FSDP's goes through transformers and its attn_implementation (Megatron and
# verl's other engines have attention of their own, and never import flash_attn for it).
STRATEGY_KEYS = {"model.override_config.attn_implementation": "engine.strategy",
                 _ACTOR: "actor_rollout_ref.actor.strategy", _CRITIC: "critic.strategy"}
_HF_STRATEGIES = (None, "fsdp", "fsdp2")
# Which of verl's pool classes places a trainer's GPU workers, and so how many CPUs each GPU bundle asks:
# sft_trainer_ray builds a RayResourcePool itself (its default max_colocate_count: 10 in verl 0.9.1), main_ppo a
# ResourcePoolManager (3); the probe reads both defaults from the job's own verl.
POOL_CLASS = {"sft": "RayResourcePool", "ppo": "ResourcePoolManager", "grpo": "ResourcePoolManager"}
TRAINER = {"sft": "sft_trainer_ray", "ppo": "main_ppo", "grpo": "main_ppo"}
_LISTED = 6  # nodes named in a message at most
_LISTED_PATHS = 3  # places of a setting named in a message at most


def request(workload):
    """What the probe is asked for a workload (its first argument, as JSON)."""
    keys = ATTENTION_KEYS.get(workload, ())
    return {"attn_keys": list(keys), "valuehead": workload in VALUEHEAD,
            "strategy_keys": {key: STRATEGY_KEYS[key] for key in keys}}


def _transformers(facts, key):
    """Whether the model behind an attention key loads through transformers (FSDP): an unknown engine (an older
    probe, an interpolation) counts as FSDP, verl's default."""
    strategy = (facts.get("strategies") or {}).get(key)
    return strategy in _HF_STRATEGIES or not isinstance(strategy, str) or strategy.startswith("${")


def attention(workload, facts, where):
    """None, or why the job would fail at model load: flash_attention_2 without flash_attn in the job's Python."""
    error = facts.get("flash_attn_error")
    if not error:
        return None
    flash = [key for key, value in (facts.get("attention") or {}).items()
             if value in (None, verl_probe.FLASH) and not (key == _CRITIC and workload in VALUEHEAD)
             and _transformers(facts, key)]
    critic = workload in VALUEHEAD and facts.get("valuehead_flash") and _transformers(facts, _CRITIC)
    if not flash and not critic:
        return None
    asks = []
    if flash:
        asks.append(", ".join(flash) + " (unset is verl's default, flash_attention_2)")
    if critic:
        asks.append("ppo's critic (verl 0.9.1's load_valuehead_model loads it with flash_attention_2 whatever "
                    "critic.model.override_config says)")
    overrides = " ".join(f"++{key}=sdpa" for key in flash)
    if not critic:
        fixes = f"install flash-attn into the job's Python, or add the override(s) {overrides}"
    else:
        fixes = "install flash-attn into the job's Python (no override spares the critic)"
        fixes += f"; the override(s) {overrides} put the other models on sdpa" if flash else ""
    python = facts.get("python") or "the job's Python"
    return (f"flash attention is asked by {'; '.join(asks)}, but {python} on {where} cannot import flash_attn "
            f"({error}): {fixes}")


def bundle(workload, facts):
    """One GPU worker's placement-group bundle, built as verl builds it (RayResourcePool.get_placement_groups):
    {"CPU": max_colocate_count} then the platform's resource set to 1, which a CPU platform's "CPU" overwrites."""
    cpus = (facts.get("cpus_per_bundle") or {}).get(POOL_CLASS.get(workload))
    resource = facts.get("resource")
    if not isinstance(cpus, (int, float)) or not isinstance(resource, str):
        return None
    shape = {"CPU": cpus}
    shape[resource] = 1
    return shape


def _has(node, resource):
    return float((node.get("resources_total") or {}).get(resource, 0) or 0)


def _amount(value):
    return int(value) if float(value).is_integer() else value


def _describe(node, names):
    parts = [f"{_amount(_has(node, name))} {name}" for name in names]
    return f"{node.get('node_ip')} has {', '.join(parts)}"


def placement(workload, facts, resources, nodes):
    """None, or why verl's placement groups could never be placed: fewer than nnodes ALIVE nodes can each hold
    n_gpus_per_node bundles. Judged on the nodes' totals: a busy cluster only makes the job wait."""
    shape = bundle(workload, facts)
    if shape is None or nodes is None:
        return None
    per_gpu = resources.n_gpus_per_node
    need = {name: amount * per_gpu for name, amount in shape.items()}
    alive = sorted((n for n in nodes if n.get("state") == "ALIVE"), key=lambda n: str(n.get("node_ip")))
    fit = [n for n in alive if all(_has(n, name) >= amount for name, amount in need.items())]
    if len(fit) >= resources.nnodes:
        return None
    # The nodes worth naming hold the accelerator (a 0-CPU head, for one, is no candidate).
    accelerator = facts["resource"]
    short = [n for n in alive if n not in fit and _has(n, accelerator) > 0]
    names = list(dict.fromkeys(["CPU", accelerator]))
    listed = "; ".join(_describe(n, names) for n in short[:_LISTED])
    if len(short) > _LISTED:
        listed += f"; and {len(short) - _LISTED} more"
    asks = ", ".join(f"{_amount(v)} {k}" for k, v in need.items())
    each = ", ".join(f"{k}: {_amount(v)}" for k, v in shape.items())
    return (f"verl's {TRAINER.get(workload, workload)} asks {resources.nnodes} node(s) for "
            f"{per_gpu} bundle(s) of {{{each}}} each ({asks} a node), and {len(fit)} ALIVE node(s) can hold that"
            f"{': ' + listed if listed else ' (no ALIVE node has ' + accelerator + ')'}: give the workers more CPUs "
            f"(ray_worker_num_cpus) or ask fewer GPUs per node (resources.n_gpus_per_node)")


def _strings(value):
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _verl(facts):
    version = facts.get("verl_version")
    return f"verl {version}" if isinstance(version, str) and version else "verl"


def refused(facts):
    """One line per override verl's hydra refused (the probe's `refused`), each with where this verl keeps the same
    setting when its config has it elsewhere: never hydra's hint to add the key with +, which for a key that moved
    makes the compose pass while the setting does nothing."""
    verl, lines = _verl(facts), []
    for item in facts.get("refused") if isinstance(facts.get("refused"), list) else ():
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            continue
        key, kind = item["key"], item.get("kind")
        if kind == "exists":
            lines.append(f"override +{key}: {verl}'s config has {key} already: set it without the +")
            continue
        if kind == "error":
            lines.append(f"override {key}: {verl} refuses it: {item.get('error')}")
            continue
        moved = _strings(item.get("same_setting"))
        parent, _, leaf = key.rpartition(".")
        if len(moved) == 1:
            lines.append(f"override {key}: not in {verl}'s config, which has the same setting at {moved[0]}: "
                         f"set that instead")
        elif moved:
            more = f" and {len(moved) - _LISTED_PATHS} more" if len(moved) > _LISTED_PATHS else ""
            lines.append(f"override {key}: not in {verl}'s config, which has a setting of that name at "
                         f"{', '.join(moved[:_LISTED_PATHS])}{more}: set the one meant instead")
        elif close := _strings(item.get("close")):
            lines.append(f"override {key}: not in {verl}'s config, which has {' or '.join(close)} (misspelt?)")
        elif item.get("open_parent"):
            lines.append(f"override {key}: not in {verl}'s config, where {parent} is an empty mapping: to add the "
                         f"key there, write it +{key}=...")
        else:
            lines.append(f"override {key}: not in {verl}'s config, nor any setting named {leaf}: remove it (a + "
                         f"would add it whether {verl} reads it or not)")
    return lines


def compose_error(facts):
    """None, or what verl's hydra said of an error no override explains (after those it refused)."""
    error = facts.get("compose_error")
    return f"verl rejected the job's config: {error}" if isinstance(error, str) and error else None


def startup(facts):
    """One line per start-up check of verl's own that refuses the composed config (the probe's `startup`)."""
    return [f"{_verl(facts)}'s start-up checks would refuse the config: {error}"
            for error in _strings(facts.get("startup")) if error]


def verdict(sid, where, problems):
    """None, or the one-line message of every problem found: one as it is, several numbered."""
    problems = [problem for problem in problems if problem]
    if not problems:
        return None
    if len(problems) == 1:
        return f"{sid}: the preflight on {where}: {problems[0]} (nothing submitted)"
    listed = "; ".join(f"({n}) {problem}" for n, problem in enumerate(problems, 1))
    return f"{sid}: the preflight on {where} found {len(problems)} problems (nothing submitted): {listed}"
