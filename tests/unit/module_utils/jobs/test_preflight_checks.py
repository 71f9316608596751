"""What the preflight decides from the probe's facts: flash attention without flash_attn, GPU bundles per node."""

import types

from ansible.module_utils.jobs import preflight_checks as checks

SFT_KEY = "model.override_config.attn_implementation"
NO_FLASH = "ModuleNotFoundError: No module named 'flash_attn'"
GPU = {"resource": "GPU", "cpus_per_bundle": {"RayResourcePool": 10, "ResourcePoolManager": 3}}


def node(ip, cpus, gpus, state="ALIVE"):
    return {"node_ip": ip, "state": state, "resources_total": {"CPU": cpus, "GPU": gpus, "worker_node": 1}}


def resources(nnodes, per_node):
    return types.SimpleNamespace(nnodes=nnodes, n_gpus_per_node=per_node)


def test_flash_attention_is_fine_when_flash_attn_imports_or_sdpa_is_set():
    assert checks.attention("s", "sft", {"attention": {SFT_KEY: None}, "flash_attn_error": None}, "the head") is None
    assert checks.attention("s", "sft", {"attention": {SFT_KEY: "sdpa"}, "flash_attn_error": NO_FLASH},
                            "the head") is None


def test_unset_or_flash_attention_without_flash_attn_names_the_override_and_the_install():
    for value in (None, "flash_attention_2"):
        problem = checks.attention("s-1", "sft", {"attention": {SFT_KEY: value}, "flash_attn_error": NO_FLASH,
                                                   "python": "/opt/py"}, "worker 10.0.0.11")
        assert problem.startswith("s-1: ") and "/opt/py on worker 10.0.0.11" in problem
        assert "install flash-attn into the job's Python, or add the override(s) " in problem
        assert f"+{SFT_KEY}=sdpa" in problem and "\n" not in problem


def test_a_patched_critic_loader_is_not_asked_for_flash_attention():
    facts = {"attention": {checks._ACTOR: "sdpa", checks._CRITIC: None}, "valuehead_flash": False,
             "flash_attn_error": NO_FLASH}
    assert checks.attention("p", "ppo", facts, "the head") is None


def test_bundles_are_verls_own_shape_per_trainer():
    assert checks.bundle("sft", GPU) == {"CPU": 10, "GPU": 1}
    assert checks.bundle("grpo", GPU) == {"CPU": 3, "GPU": 1}
    assert checks.bundle("sft", {**GPU, "resource": "CPU"}) == {"CPU": 1}  # a CPU platform's name overwrites
    assert checks.bundle("sft", {}) is None


def test_enough_nodes_that_each_hold_their_bundles_pass_and_a_busy_cluster_is_not_judged():
    nodes = [node("10.0.0.11", 96, 8), node("10.0.0.12", 96, 8)]
    assert checks.placement("s", "sft", GPU, resources(2, 8), nodes) is None
    assert checks.placement("s", "sft", GPU, resources(2, 8), None) is None  # no node list: no verdict


def test_too_few_cpus_for_the_gpus_names_each_node_short_and_what_the_job_asks():
    nodes = [{"node_ip": "10.0.0.10", "state": "ALIVE", "resources_total": {}},  # a 0-CPU head: not named
             node("10.0.0.11", 32, 4), node("10.0.0.12", 64, 4), node("10.0.0.13", 64, 4, state="DEAD")]
    problem = checks.placement("s-1", "sft", GPU, resources(2, 4), nodes)
    assert problem.startswith("s-1: verl's sft_trainer_ray asks 2 node(s) for 4 bundle(s) of {CPU: 10, GPU: 1}")
    assert "(40 CPU, 4 GPU a node), and 1 ALIVE node(s) can hold that: 10.0.0.11 has 32 CPU, 4 GPU:" in problem
    assert "10.0.0.10" not in problem and "10.0.0.13" not in problem and "10.0.0.12" not in problem
    assert checks.placement("p-1", "ppo", GPU, resources(2, 4), nodes) is None  # main_ppo: 3 a bundle, 12 a node


def test_only_models_fsdp_loads_through_transformers_are_asked_for_flash_attn():
    facts = {"attention": {SFT_KEY: None}, "flash_attn_error": NO_FLASH, "strategies": {SFT_KEY: "megatron"}}
    assert checks.attention("s", "sft", facts, "the head") is None  # Megatron's attention is its own
    for strategy in ("fsdp", "fsdp2", None, "${actor_rollout_ref.actor.strategy}"):
        facts["strategies"] = {SFT_KEY: strategy}
        assert checks.attention("s", "sft", facts, "the head"), strategy
    ppo = {"attention": {checks._ACTOR: "sdpa", checks._CRITIC: "sdpa"}, "valuehead_flash": True,
           "flash_attn_error": NO_FLASH, "strategies": {checks._ACTOR: "fsdp", checks._CRITIC: "megatron"}}
    assert checks.attention("p", "ppo", ppo, "the head") is None
    assert checks.request("ppo")["strategy_keys"] == {checks._ACTOR: "actor_rollout_ref.actor.strategy",
                                                      checks._CRITIC: "critic.strategy"}
