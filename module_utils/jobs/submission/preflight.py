"""The preflight of a verl trainer job, before it is submitted: the probe (module_utils/verl/probe.py) in the job's
own Python, then its checks (below).

Where the probe runs: on the head, with ray_config.python and the job's environment, as the compose always ran (no
second process, so no time added); when that Python cannot import the job's libraries (the probe says so with
verl_probe.MISSING_RC before importing anything, in a few milliseconds) or does not exist, on one ALIVE worker: a
Ray task there (0 CPUs, pinned to the node, the job's own runtime_env) runs the same command and returns its exit
code and output. The task's driver joins the cluster in a namespace under Ray's `_ray_internal_` prefix, whose
drivers Ray's job list (job API and state API alike) leaves out, so no entry is added beside the jobs the records
are keyed by.

The checks: what the preflight decides from the probe's facts (module_utils/verl/probe.py) and the cluster's nodes.

Pure: no Ray, no process. Each check returns its problems, one line each (None or a list), and verdict() makes
them one message, every problem of one run in it.
"""

import contextlib
import inspect
import json
import os
import shlex
import sys
import tempfile

from ansible.module_utils.base.redaction import secret_names
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.submission import verdicts
from ansible.module_utils.jobspec import render
from ansible.module_utils.jobspec.model import as_ray_config
from ansible.module_utils.verl import probe as verl_probe

REMOTE_TIMEOUT_S = 300  # a worker's import of torch and verl and the compose: about 20 s on a busy GPU host
# Ray leaves drivers of a namespace under this prefix (ray._raylet.RAY_INTERNAL_NAMESPACE_PREFIX, "_ray_internal_")
# out of its job list; a unit test holds the two together.
NAMESPACE = "_ray_internal_ray_verl_preflight"
_OUTPUT_LINES = 6


def source():
    """The probe's source, passed to the job's Python with -c (nothing of it needs to be installed there)."""
    return inspect.getsource(verl_probe)


def job_env(runtime_env):
    env = dict(os.environ)
    env.update(runtime_env.get("env_vars", {}))
    env.pop("RAY_ADDRESS", None)
    return env


def run(module, spec, config, runtime_env, resume_path=None, nodes=None):
    """Compose the job's config and check it, in the job's Python; raise Failed with one line, or return the facts
    (`kept`: they are an earlier run's for the same code, trainer, overrides, env and files read: verdicts.py)."""
    compose = render.compose_command(spec, config, resume_path)
    if compose is None:
        return None
    ray_config = as_ray_config(config)
    python = shlex.split(ray_config.python)
    probe = [*python, "-c", source(), json.dumps(request(spec.workload)), *compose[len(python) + 1:]]
    keyed = verdicts.key(spec, config, resume_path, probe[len(python):len(python) + 3],
                         secret_names(ray_config.secret_env_names))
    kept = keyed and verdicts.Kept(ray_config.shared_root, keyed)
    facts = kept and kept_facts(spec, kept, nodes, compose, module.check_mode)
    if facts:
        return facts
    answer = on_head(module, probe, job_env(runtime_env))
    if isinstance(answer, str):
        answer = on_worker(config, probe, runtime_env, nodes, spec.submission_id, answer)
    facts, problem, local = judge(spec, answer, nodes, compose)
    if local and facts["where"] == "the head" and not carries_work(nodes) and pick_worker(nodes):
        # The verdict came from the head's own libraries and files (flash_attn, verl's platform, the model verl's
        # checks read), which need not be the workers': a worker, where the job runs, decides before anything is
        # refused. Overrides verl's config refuses are the job's verl's wherever it runs.
        answer = on_worker(config, probe, runtime_env, nodes, spec.submission_id,
                           f"it would refuse the job ({problem.split(': ', 1)[-1][:120]}...), and jobs run on workers")
        facts, problem, local = judge(spec, answer, nodes, compose)
    if problem:
        raise Failed(problem, compose_cmd=" ".join(compose))
    # Only the head's answer: the key sees the head's files, which need not be a worker's.
    if kept and facts["where"] == "the head" and not module.check_mode:  # --check changes nothing, on the share neither
        kept.keep(facts)
    return facts


def kept_facts(spec, kept, nodes, compose, check_mode):
    """The facts of a kept answer that still passes the checks, or None (then the probe runs)."""
    found = kept.facts()
    if found is None:
        return None
    try:
        facts, problem, _ = judge(spec, (0, f"{verl_probe.MARK} {json.dumps(found[0])}", "", found[1]), nodes, compose)
    except Exception:  # noqa: BLE001 - kept facts of a shape the checks break on are a miss, never an error
        problem = "unusable"
    if not problem:
        return dict(facts, kept=True)
    if not check_mode:
        kept.forget()  # what passed then does not now (the cluster changed): the probe decides afresh
    return None


def judge(spec, answer, nodes, compose):
    """(facts, the one-line refusal of every problem found or None, whether one of them depends on the node the
    probe ran on) from one run of the probe; Failed when verl refused the config and no override explains it."""
    rc_, out, err, where = answer
    if rc_ != 0:
        lines = [line.strip() for line in (err or out or "").strip().splitlines() if line.strip()]
        raise Failed(f"{spec.submission_id}: verl rejected the job's config on {where} (nothing submitted): "
                     f"{' | '.join(lines[-_OUTPUT_LINES:])}", compose_cmd=" ".join(compose))
    facts = parse(out)
    if facts is None:
        raise Failed(f"{spec.submission_id}: the preflight on {where} printed no {verl_probe.MARK} line "
                     f"(nothing submitted); -e preflight=false skips it", compose_cmd=" ".join(compose))
    facts["where"] = where
    config = [*refused(facts), compose_error(facts), *batches(spec.workload, facts)]
    local = [*startup(facts), attention(spec.workload, facts, where),
             placement(spec.workload, facts, spec.resources, nodes)]
    return facts, verdict(spec.submission_id, where, config + local), any(local)


def parse(out):
    """The probe's facts (its last MARK line), or None."""
    for line in reversed((out or "").splitlines()):
        if line.startswith(verl_probe.MARK + " "):
            try:
                facts = json.loads(line[len(verl_probe.MARK) + 1:])
            except ValueError:
                return None
            return facts if isinstance(facts, dict) else None
    return None


def on_head(module, probe, env):
    """(rc, out, err, "the head"), or a string saying why the head's Python is not the job's."""
    with tempfile.TemporaryDirectory(prefix="verl-compose-") as cwd:
        try:
            rc_, out, err = module.run_command(probe, cwd=cwd, environ_update=env, handle_exceptions=False)
        except OSError as exc:
            return f"{probe[0]}: {exc.strerror or exc}"
    if rc_ == verl_probe.MISSING_RC:
        lines = [line for line in (err or "").splitlines() if line.startswith(verl_probe.MARK + "-missing: ")]
        return lines[-1].split(": ", 1)[1] if lines else f"{probe[0]} lacks the job's libraries"
    return rc_, out, err, "the head"


def _workers(nodes):
    """The ALIVE nodes jobs run on: those carrying worker_node (a one-box site's head among them)."""
    return [n for n in nodes or () if n.get("state") == "ALIVE" and "worker_node" in (n.get("resources_total") or {})]


def carries_work(nodes):
    """Whether the head is one of them (a one-box site): its verdict is then a worker's."""
    return any(n.get("is_head_node") for n in _workers(nodes))


def pick_worker(nodes):
    """The ALIVE worker the probe runs on: the first by IP, or None."""
    return min(_workers(nodes), key=lambda n: str(n.get("node_ip")), default=None)


def on_worker(config, probe, runtime_env, nodes, sid, why, timeout_s=REMOTE_TIMEOUT_S, ray_module=None):
    """Run the probe on a worker as a Ray task; (rc, out, err, "worker <ip>")."""
    node = pick_worker(nodes)
    if node is None:
        raise Failed(f"{sid}: the head cannot compose the job's config ({why}) and no ALIVE worker can: "
                     "run up.yml, or -e preflight=false to skip the preflight (nothing submitted)")
    where = f"{'the head, a worker here,' if node.get('is_head_node') else 'worker'} {node.get('node_ip')}"
    late = (f"{sid}: the preflight on {where} did not finish in {timeout_s} s (the head's Python cannot: {why}): "
            "is the node busy or its Python slow to import verl? -e preflight=false skips it (nothing submitted)")
    ray = ray_module or _import_ray()
    with contextlib.redirect_stdout(sys.stderr):  # the module's stdout is its JSON answer
        try:
            ray.init(address=as_ray_config(config).address, namespace=NAMESPACE, log_to_driver=False,
                     logging_level="ERROR")
            # coreutils' timeout ends the probe itself (a cancelled task would leave its child running).
            ref = _remote_run(ray, node, runtime_env).remote(
                ["timeout", "-k", "10", str(timeout_s), *probe], capture_output=True, text=True, cwd="/")
            try:
                done = ray.get(ref, timeout=timeout_s + 60)  # + the task's placement and its runtime_env
            except ray.exceptions.GetTimeoutError:
                ray.cancel(ref, force=True)
                raise Failed(late) from None
        except Failed:
            raise
        except Exception as exc:  # noqa: BLE001 - Ray's own errors, one line each
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
            raise Failed(f"{sid}: the preflight could not run on {where} (the head's Python cannot: {why}): "
                         f"{type(exc).__name__}: {first}; -e preflight=false skips it (nothing submitted)") from None
        finally:
            with contextlib.suppress(Exception):
                ray.shutdown()
    if done.returncode in (124, 137):
        raise Failed(late)
    return done.returncode, done.stdout, done.stderr, where


def _import_ray():
    import ray.exceptions  # binds ray; ray.exceptions.GetTimeoutError is caught above

    return ray


def _remote_run(ray, node, runtime_env):
    """subprocess.run as a Ray task on `node`: it needs nothing of ours on the worker (pickled by reference), holds
    no CPU (a busy worker still answers), and runs in the job's runtime_env (its env vars, PYTHONPATH)."""
    import subprocess

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(subprocess.run).options(
        num_cpus=0, max_retries=0, runtime_env=runtime_env,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False))


# What the preflight decides: pure, no Ray, no process.
_ACTOR = "actor_rollout_ref.model.override_config.attn_implementation"
_CRITIC = "critic.model.override_config.attn_implementation"
# Where verl 0.9.1 reads each model's attention implementation (verl/workers/config/model.py, HFModelConfig:
# override_config.get("attn_implementation", "flash_attention_2")), per workload. ppo's critic is loaded by
# verl/utils/model.py load_valuehead_model, which passes attn_implementation="flash_attention_2" itself.
ATTENTION_KEYS = {"sft": ("model.override_config.attn_implementation",),
                  "grpo": (_ACTOR,),
                  "ppo": (_ACTOR, _CRITIC)}
VALUEHEAD = ("ppo",)  # workloads with a critic (adv_estimator gae)
# The config section whose instantiated engine loads each model (the probe reports the strategy it instantiates:
# its own `strategy`, else its `_target_` class's default). Only FSDP's goes through transformers and its
# attn_implementation (Megatron and verl's other engines have attention of their own, and never import flash_attn).
ENGINE_OF = {"model.override_config.attn_implementation": "engine",
             _ACTOR: "actor_rollout_ref.actor", _CRITIC: "critic"}
ENGINES = {"sft": ("engine",), "grpo": ("actor_rollout_ref.actor",), "ppo": ("actor_rollout_ref.actor", "critic")}
_HF_STRATEGIES = (None, "fsdp", "fsdp2")
# Which of verl's pool classes places a trainer's GPU workers, and so how many CPUs each GPU bundle asks:
# sft_trainer_ray builds a RayResourcePool itself (its default max_colocate_count: 10 in verl 0.9.1), main_ppo a
# ResourcePoolManager (3); the probe reads both defaults from the job's own verl.
POOL_CLASS = {"sft": "RayResourcePool", "ppo": "ResourcePoolManager", "grpo": "ResourcePoolManager"}
TRAINER = {"sft": "sft_trainer_ray", "ppo": "main_ppo", "grpo": "main_ppo"}
_LISTED = 6  # nodes named in a message at most
_LISTED_PATHS = 3  # places of a setting named in a message at most

# How a component's engine splits its ranks, in verl 0.9.1 (data_parallel() below): per engine section, its FSDP
# sequence-parallel keys (the deprecated one first: FSDPActorConfig and FSDPCriticConfig copy it over the engine's
# when > 1) and its Megatron section.
PARALLEL = {"engine": (("engine.ulysses_sequence_parallel_size",), "engine"),
            "actor_rollout_ref.actor": (("actor_rollout_ref.actor.ulysses_sequence_parallel_size",
                                         "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"),
                                        "actor_rollout_ref.actor.megatron"),
            "critic": (("critic.ulysses_sequence_parallel_size", "critic.fsdp.ulysses_sequence_parallel_size"),
                       "critic.megatron")}
_MEGATRON = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
_ROLLOUT = tuple(f"actor_rollout_ref.rollout.{name}" for name in
                 ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"))
_SYNC_MODES = ("sync", "colocate_async", "separate_async")  # trainer.v1.trainer_mode's choices in verl 0.9.1
_WORLD = ("trainer.nnodes", "trainer.n_gpus_per_node")
_BATCH_KEYS = {
    "sft": ("data.train_batch_size", "data.use_dynamic_bsz", "data.micro_batch_size_per_gpu"),
    "grpo": ("data.train_batch_size", "trainer.use_v1", "trainer.v1.trainer_mode", "actor_rollout_ref.rollout.n",
             "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.use_dynamic_bsz",
             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", *_ROLLOUT,
             *(f"trainer.v1.{mode}.parameter_sync_step" for mode in _SYNC_MODES)),
}
_BATCH_KEYS["ppo"] = (*_BATCH_KEYS["grpo"], "critic.ppo_mini_batch_size", "critic.enable", "algorithm.adv_estimator")
# The verl versions whose code the batch rules below were read from; another verl's are not judged by them.
BATCH_RULES_VERL = ("0.9.",)


def uses_critic(workload, values):
    """Whether verl 0.9.1 builds a critic for this job (verl.trainer.ppo.utils.need_critic): critic.enable when set,
    else adv_estimator gae. A ppo spec may run another estimator (rloo, remax, ...: the importer keeps it), which has
    none; values without the keys (an older probe's answer) read as verl's defaults: gae, a critic."""
    if workload not in VALUEHEAD:
        return False
    values = values if isinstance(values, dict) else {}
    if values.get("critic.enable") is not None:
        return bool(values["critic.enable"])
    return values.get("algorithm.adv_estimator") in (None, "gae")


def _parallel_keys(section):
    sequence, megatron = PARALLEL[section]
    return (*sequence, *(f"{megatron}.{name}" for name in (*_MEGATRON, "dynamic_context_parallel")))


def request(workload):
    """What the probe is asked for a workload (its first argument, as JSON): the attention keys, whether a critic
    loads through the value-head loader, the engine sections whose instantiated strategy it reports, and the
    resolved values of the keys the batch checks read."""
    keys = ATTENTION_KEYS.get(workload, ())
    engines = ENGINES.get(workload, ())
    values = [*_WORLD, *_BATCH_KEYS.get(workload, ()), *(key for section in engines for key in _parallel_keys(section))]
    return {"attn_keys": list(keys), "valuehead": workload in VALUEHEAD, "engines": list(engines),
            "values": list(dict.fromkeys(values))}


def _transformers(facts, key):
    """Whether the model behind an attention key loads through transformers (FSDP), judged by the strategy its
    engine section instantiates; an unknown engine (an older probe, a target that does not import) counts as
    FSDP, verl's default."""
    strategy = (facts.get("engines") or {}).get(ENGINE_OF.get(key))
    return strategy in _HF_STRATEGIES or not isinstance(strategy, str)


def attention(workload, facts, where):
    """None, or why the job would fail at model load: flash_attention_2 without flash_attn in the job's Python."""
    error = facts.get("flash_attn_error")
    if not error:
        return None
    flash = [key for key, value in (facts.get("attention") or {}).items()
             if value in (None, verl_probe.FLASH) and not (key == _CRITIC and workload in VALUEHEAD)
             and _transformers(facts, key)]
    critic = (uses_critic(workload, facts.get("values")) and facts.get("valuehead_flash")
              and _transformers(facts, _CRITIC))
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


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _model_parallel(facts, section):
    """(ranks one model replica spans, the settings that make it as "key=value") of a component's engine as verl
    0.9.1 counts them: FSDP's data-parallel size is the world over Ulysses' sequence parallel
    (workers/engine/fsdp/transformer_impl.py get_data_parallel_size), Megatron's over tensor x pipeline x context
    parallel (megatron's mpu); None for another engine (its own rules), Megatron's dynamic context parallel (one
    data-parallel rank whatever the world), or sizes that are not plain integers. An unset size is verl's default, 1."""
    values, strategy = facts["values"], (facts.get("engines") or {}).get(section)
    sequence, megatron = PARALLEL[section]
    if strategy in ("fsdp", "fsdp2"):
        sizes = [(key, values.get(key)) for key in sequence]
        if any(value is not None and not _int(value) for _, value in sizes):
            return None
        key, size = next(((key, value) for key, value in sizes if value and value > 1), (None, 1))
        return size, ([f"{key}={size}"] if key else [])
    if strategy != "megatron" or values.get(f"{megatron}.dynamic_context_parallel") is True:
        return None
    sizes = [(f"{megatron}.{name}", 1 if values.get(f"{megatron}.{name}") is None
              else values.get(f"{megatron}.{name}")) for name in _MEGATRON]
    if not all(_int(size) and size > 0 for _, size in sizes):
        return None
    product = 1
    for _, size in sizes:
        product *= size
    return product, [f"{key}={size}" for key, size in sizes if size != 1]


def _over(settings, product, world, placed):
    """A model replica's ranks that do not divide the world, in one line."""
    return (f"{' x '.join(settings)} makes a model replica {product} ranks, which does not divide the {world} ranks "
            f"verl places ({placed}): verl cannot lay the replicas out")


def batches(workload, facts):
    """One line per batch size verl 0.9.1's trainers split over their ranks, or over micro-batches, only after
    placing their workers (each an assertion there), that the composed config and the placement (trainer.nnodes x
    trainer.n_gpus_per_node) already show cannot split evenly. Nothing for another verl, an engine these rules do not
    know, or a value that is not a plain integer."""
    values = facts.get("values")
    version = facts.get("verl_version")
    if not isinstance(values, dict) or not isinstance(version, str) or not version.startswith(BATCH_RULES_VERL):
        return []
    nodes, per_node = (values.get(key) for key in _WORLD)
    if not (_int(nodes) and _int(per_node) and nodes > 0 and per_node > 0):
        return []
    world, placed = nodes * per_node, f"trainer.nnodes={nodes} x trainer.n_gpus_per_node={per_node}"
    lines = []

    def ranks(section, who):
        """The data-parallel ranks of a component, its description, or None (a line added when it cannot be)."""
        split = _model_parallel(facts, section)
        if split is None:
            return None, None
        product, settings = split
        if world % product:
            lines.append(_over(settings, product, world, placed))
            return None, None
        over = f" over {' x '.join(settings)}" if settings else ""
        return world // product, f"{who}{world // product} data-parallel rank(s) ({placed}{over})"

    batch = values.get("data.train_batch_size")
    if workload == "sft":
        dp, where = ranks("engine", "the ")
        if dp and _int(batch) and batch % dp:
            lines.append(f"data.train_batch_size={batch} does not split evenly over {where}: verl's sft_trainer_ray "
                         f"gives each an equal share of every batch, and asserts it only once its workers are placed "
                         f"(AssertionError: {batch} % {dp} != 0); make it a multiple of {dp}")
        micro = values.get("data.micro_batch_size_per_gpu")
        if dp and _int(batch) and not batch % dp and values.get("data.use_dynamic_bsz") is False and _int(micro) \
                and micro > 0 and (batch // dp) % micro:
            lines.append(f"data.train_batch_size={batch} over {where} is {batch // dp} a rank, not a multiple of "
                         f"data.micro_batch_size_per_gpu={micro} (data.use_dynamic_bsz=False): verl's engine splits "
                         f"each rank's share into micro-batches of that size once its workers are placed")
        return lines
    if values.get("trainer.use_v1") is not True:  # the rules are the V1 trainer's, verl 0.9.1's default
        return lines
    n = values.get("actor_rollout_ref.rollout.n")
    members = [("actor_rollout_ref.actor", "the actor's ", "actor_rollout_ref.actor.ppo_mini_batch_size")]
    if uses_critic(workload, values):
        members.append(("critic", "the critic's ", "critic.ppo_mini_batch_size"))
    for section, who, key in members:
        dp, where = ranks(section, who)
        mini = values.get(key)
        if not (dp and _int(mini) and _int(n) and mini > 0 and n > 0):
            continue
        rows = mini * n
        if rows % dp:
            lines.append(f"{key}={mini} x actor_rollout_ref.rollout.n={n} = {rows} rows a mini-batch, which do not "
                         f"split evenly over {where}: verl's engine workers assert it at their first update, once "
                         f"placed (train_mini_batch); make the product a multiple of {dp}")
            continue
        micro = values.get(f"{section}.ppo_micro_batch_size_per_gpu")
        # The critic's engine ignores its ppo_micro_batch_size_per_gpu in verl 0.9.1 (it batches by tokens).
        if section == "actor_rollout_ref.actor" and values.get(f"{section}.use_dynamic_bsz") is False \
                and _int(micro) and micro > 0 and (rows // dp) % micro:
            lines.append(f"{key}={mini} x actor_rollout_ref.rollout.n={n} = {rows} rows over {where} is "
                         f"{rows // dp} a rank, not a multiple of {section}.ppo_micro_batch_size_per_gpu={micro} "
                         f"({section}.use_dynamic_bsz=False): verl's engine splits each rank's share into "
                         f"micro-batches of that size once its workers are placed")
    rollout = [(key, 1 if values.get(key) is None else values.get(key)) for key in _ROLLOUT]
    if all(_int(size) and size > 0 for _, size in rollout):
        product = 1
        for _, size in rollout:
            product *= size
        if world % product:
            lines.append(_over([f"{key}={size}" for key, size in rollout], product, world, placed).replace(
                "a model replica", "a rollout replica"))
    mode = values.get("trainer.v1.trainer_mode")
    step = values.get(f"trainer.v1.{mode}.parameter_sync_step") if mode in _SYNC_MODES else None
    if _int(batch) and _int(step) and step > 0 and batch % step:
        lines.append(f"data.train_batch_size={batch} is not a multiple of trainer.v1.{mode}.parameter_sync_step="
                     f"{step}: verl's {mode} trainer asserts it at its first step, once its workers are placed")
    return lines


def _strings(value):
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _verl(facts):
    version = facts.get("verl_version")
    return f"verl {version}" if isinstance(version, str) and version else "verl"


def refused(facts):
    """One line per override verl's hydra refused (the probe's `refused`), each with where this verl keeps the same
    setting when its config has it elsewhere in the key's own component (probe.component): never hydra's hint to
    add the key with +, which for a key that moved makes the compose pass while the setting does nothing."""
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
            own = item.get("component") if isinstance(item.get("component"), str) else None
            if own and item.get("component_here") is False:
                group = own.rpartition(".")[0]
                nowhere = f"which has no {own}, nor a {key[len(group) + 1 if group else 0:]} elsewhere"
            else:
                nowhere = f"nor any setting named {leaf}" + (f" in {own}" if own else "")
            lines.append(f"override {key}: not in {verl}'s config, {nowhere}: remove it (a + would add it whether "
                         f"{verl} reads it or not)")
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
