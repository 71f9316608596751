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
    assert checks.attention("sft", {"attention": {SFT_KEY: None}, "flash_attn_error": None}, "the head") is None
    assert checks.attention("sft", {"attention": {SFT_KEY: "sdpa"}, "flash_attn_error": NO_FLASH},
                            "the head") is None


def test_unset_or_flash_attention_without_flash_attn_names_the_override_and_the_install():
    for value in (None, "flash_attention_2"):
        problem = checks.attention("sft", {"attention": {SFT_KEY: value}, "flash_attn_error": NO_FLASH,
                                                   "python": "/opt/py"}, "worker 10.0.0.11")
        assert problem.startswith("flash attention is asked by ") and "/opt/py on worker 10.0.0.11" in problem
        assert "install flash-attn into the job's Python, or add the override(s) " in problem
        assert f"+{SFT_KEY}=sdpa" in problem and "\n" not in problem


def test_a_patched_critic_loader_is_not_asked_for_flash_attention():
    facts = {"attention": {checks._ACTOR: "sdpa", checks._CRITIC: None}, "valuehead_flash": False,
             "flash_attn_error": NO_FLASH}
    assert checks.attention("ppo", facts, "the head") is None


def test_bundles_are_verls_own_shape_per_trainer():
    assert checks.bundle("sft", GPU) == {"CPU": 10, "GPU": 1}
    assert checks.bundle("grpo", GPU) == {"CPU": 3, "GPU": 1}
    assert checks.bundle("sft", {**GPU, "resource": "CPU"}) == {"CPU": 1}  # a CPU platform's name overwrites
    assert checks.bundle("sft", {}) is None


def test_enough_nodes_that_each_hold_their_bundles_pass_and_a_busy_cluster_is_not_judged():
    nodes = [node("10.0.0.11", 96, 8), node("10.0.0.12", 96, 8)]
    assert checks.placement("sft", GPU, resources(2, 8), nodes) is None
    assert checks.placement("sft", GPU, resources(2, 8), None) is None  # no node list: no verdict


def test_too_few_cpus_for_the_gpus_names_each_node_short_and_what_the_job_asks():
    nodes = [{"node_ip": "10.0.0.10", "state": "ALIVE", "resources_total": {}},  # a 0-CPU head: not named
             node("10.0.0.11", 32, 4), node("10.0.0.12", 64, 4), node("10.0.0.13", 64, 4, state="DEAD")]
    problem = checks.placement("sft", GPU, resources(2, 4), nodes)
    assert problem.startswith("verl's sft_trainer_ray asks 2 node(s) for 4 bundle(s) of {CPU: 10, GPU: 1}")
    assert "(40 CPU, 4 GPU a node), and 1 ALIVE node(s) can hold that: 10.0.0.11 has 32 CPU, 4 GPU:" in problem
    assert "10.0.0.10" not in problem and "10.0.0.13" not in problem and "10.0.0.12" not in problem
    assert checks.placement("ppo", GPU, resources(2, 4), nodes) is None  # main_ppo: 3 a bundle, 12 a node


def test_only_models_fsdp_loads_through_transformers_are_asked_for_flash_attn():
    facts = {"attention": {SFT_KEY: None}, "flash_attn_error": NO_FLASH, "strategies": {SFT_KEY: "megatron"}}
    assert checks.attention("sft", facts, "the head") is None  # Megatron's attention is its own
    for strategy in ("fsdp", "fsdp2", None, "${actor_rollout_ref.actor.strategy}"):
        facts["strategies"] = {SFT_KEY: strategy}
        assert checks.attention("sft", facts, "the head"), strategy
    ppo = {"attention": {checks._ACTOR: "sdpa", checks._CRITIC: "sdpa"}, "valuehead_flash": True,
           "flash_attn_error": NO_FLASH, "strategies": {checks._ACTOR: "fsdp", checks._CRITIC: "megatron"}}
    assert checks.attention("ppo", ppo, "the head") is None
    assert checks.request("ppo")["strategy_keys"] == {checks._ACTOR: "actor_rollout_ref.actor.strategy",
                                                      checks._CRITIC: "critic.strategy"}


def item(key, kind="missing", **more):
    return {"override": f"{key}=1", "key": key, "kind": kind, "error": None, **more}


REFUSED = {"verl_version": "0.9.1", "refused": [
    item("critic.model.fsdp_config.param_offload", same_setting=["critic.fsdp.param_offload"]),
    item("trainer.use_legacy_worker_impl", same_setting=[], close=[]),
    item("trainer.save_frq", same_setting=[], close=["trainer.save_freq"]),
    item("model.override_config.attn", same_setting=[], open_parent=True),
    item("x.lr", same_setting=["a.lr", "b.lr", "c.lr", "d.lr"]),
    item("trainer.save_freq", kind="exists"),
    item("engine", kind="error", error="Could not find 'engine/nope' | Available options in 'engine': | fsdp")]}


def test_each_refused_override_is_one_line_saying_what_verl_has_instead():
    lines = checks.refused(REFUSED)
    assert lines[0] == ("override critic.model.fsdp_config.param_offload: not in verl 0.9.1's config, which has the "
                        "same setting at critic.fsdp.param_offload: set that instead")
    assert lines[1] == ("override trainer.use_legacy_worker_impl: not in verl 0.9.1's config, nor any setting named "
                        "use_legacy_worker_impl: remove it (a + would add it whether verl 0.9.1 reads it or not)")
    assert lines[2].endswith("which has trainer.save_freq (misspelt?)")
    # Only an empty mapping of verl's own is told to take the key with +.
    assert lines[3].endswith("where model.override_config is an empty mapping: to add the key there, write it "
                             "+model.override_config.attn=...")
    assert "at a.lr, b.lr, c.lr and 1 more: set the one meant instead" in lines[4]
    assert lines[5] == "override +trainer.save_freq: verl 0.9.1's config has trainer.save_freq already: set it without the +"
    assert lines[6].startswith("override engine: verl 0.9.1 refuses it: Could not find 'engine/nope'")
    # Hydra's hint to append a key is never given for one that moved or that verl does not have.
    assert not any("+critic" in line or "+trainer.use_legacy" in line or "\n" in line for line in lines)


def test_facts_of_another_shape_give_no_line_and_no_error():
    assert checks.refused({}) == [] and checks.refused({"refused": "junk"}) == []
    only = ("override a.b: not in verl's config, nor any setting named b: remove it (a + would add it whether verl "
            "reads it or not)")
    assert checks.refused({"refused": [None, {"key": 3}, item("a.b", same_setting=5, close="a.c")]}) == [only]
    assert checks.startup({"startup": None}) == [] and checks.startup({"startup": "a line"}) == []
    assert checks.compose_error({"compose_error": 5}) is None


def test_verls_start_up_refusal_and_an_unexplained_compose_error_are_verls_words():
    facts = {"verl_version": "0.9.1", "startup": ["ValueError: [actor] both set", 3, "AssertionError: n"]}
    assert checks.startup(facts) == ["verl 0.9.1's start-up checks would refuse the config: ValueError: [actor] both set",
                                     "verl 0.9.1's start-up checks would refuse the config: AssertionError: n"]
    assert checks.compose_error({"compose_error": "Error parsing override 'x=['"}) == (
        "verl rejected the job's config: Error parsing override 'x=['")


def test_one_message_names_every_problem_on_one_line():
    assert checks.verdict("s-1", "the head", [None, None]) is None
    assert checks.verdict("s-1", "the head", [None, "override a.b: gone"]) == (
        "s-1: the preflight on the head: override a.b: gone (nothing submitted)")
    message = checks.verdict("s-1", "worker 10.0.0.11", [*checks.refused(REFUSED), None, "verl says no"])
    assert message.startswith("s-1: the preflight on worker 10.0.0.11 found 8 problems (nothing submitted): (1) override ")
    assert "; (8) verl says no" in message and "\n" not in message
