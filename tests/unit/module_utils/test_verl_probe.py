"""The preflight's probe (module_utils/verl/probe.py): its pure parts here, and real runs in .venv-verl (torch CPU,
verl 0.9.1) when it exists, which read what verl itself asks: its default attention, its pools' CPUs per bundle,
the critic's hard-coded flash_attention_2, and the lab's CPU platform."""

import json
import os
import subprocess

import pytest
from ansible.module_utils.jobs.submission import preflight
from ansible.module_utils.verl import probe as verl_probe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VERL_PYTHON = os.path.join(ROOT, ".venv-verl", "bin", "python")


def test_lookup_reads_dotted_keys_and_says_none_for_a_missing_part():
    config = {"model": {"override_config": {"attn_implementation": "sdpa"}, "path": "/m"}}
    assert verl_probe.lookup(config, "model.override_config.attn_implementation") == "sdpa"
    assert verl_probe.lookup(config, "model.override_config.nope") is None
    assert verl_probe.lookup(config, "model.path.deeper") is None


def test_a_function_that_names_flash_attention_2_in_its_code_is_told_from_one_that_does_not():
    def hard(path):
        return {"attn_implementation": "flash_attention_2", "path": path}

    def soft(path):
        return {"attn_implementation": "sdpa", "path": path}

    assert verl_probe.hard_coded_flash(hard) and not verl_probe.hard_coded_flash(soft)


def test_missing_modules_names_what_this_python_cannot_find():
    assert verl_probe.missing_modules(("json", "no_such_module_here")) == ["no_such_module_here"]


# A few of verl 0.9.1's composed ppo keys: the critic's FSDP settings are under critic.fsdp, the actor's and the
# ref's under their fsdp_config, the rollout's own parallel sizes beside them.
TREE = {"actor_rollout_ref": {"actor": {"fsdp_config": {"param_offload": False, "optimizer_offload": False}},
                              "ref": {"fsdp_config": {"param_offload": False}},
                              "rollout": {"tensor_model_parallel_size": 2, "enforce_eager": False},
                              "model": {"override_config": {}, "use_remove_padding": True}},
        "critic": {"fsdp": {"param_offload": False}, "model": {"path": "/m"}, "optim": {"lr": 1e-5}},
        "reward": {"custom_reward_function": {"path": None}},
        "trainer": {"save_freq": -1, "total_epochs": 1}}


def test_a_key_has_one_component_the_hybrid_workers_part_or_its_top_level_section():
    assert verl_probe.component("actor_rollout_ref.actor.megatron.tensor_model_parallel_size") == (
        "actor_rollout_ref", "actor")
    assert verl_probe.component("actor_rollout_ref.rollout.n") == ("actor_rollout_ref", "rollout")
    assert verl_probe.component("critic.model.fsdp_config.param_offload") == ("critic",)
    assert verl_probe.component("trainer.save_freq") == ("trainer",)
    assert verl_probe.component("actor_rollout_ref.x") == ("actor_rollout_ref",)


def test_a_setting_that_moved_is_found_only_in_its_own_component_by_the_longest_shared_end():
    assert verl_probe.same_setting(TREE, "critic.model.fsdp_config.param_offload") == ["critic.fsdp.param_offload"]
    # The actor's Megatron tensor parallel (a Megatron script's, read as FSDP) is never the rollout's.
    assert verl_probe.same_setting(TREE, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size") == []
    assert verl_probe.same_setting(TREE, "critic.megatron.tensor_model_parallel_size") == []
    assert verl_probe.same_setting(TREE, "trainer.tensor_model_parallel_size") == []
    # The actor's own, never the ref's; nor the model's for the actor's (another component of the hybrid worker).
    assert verl_probe.same_setting(TREE, "actor_rollout_ref.actor.param_offload") == [
        "actor_rollout_ref.actor.fsdp_config.param_offload"]
    assert verl_probe.same_setting(TREE, "actor_rollout_ref.actor.use_remove_padding") == []
    # A component this config lacks moved whole: the paths ending in its name and the rest of the key.
    assert verl_probe.same_setting(TREE, "custom_reward_function.path") == ["reward.custom_reward_function.path"]
    assert verl_probe.same_setting(TREE, "actor_rollout_ref.fsdp_config.param_offload") == [
        "actor_rollout_ref.actor.fsdp_config.param_offload", "actor_rollout_ref.ref.fsdp_config.param_offload"]
    assert verl_probe.same_setting(TREE, "algorithm.lr") == []  # critic.optim.lr is another component's
    assert verl_probe.same_setting(TREE, "lr") == []
    assert verl_probe.same_setting(TREE, "trainer.use_legacy_worker_impl") == []


def test_what_a_config_has_instead_of_a_key_it_lacks():
    assert verl_probe.where_else(TREE, "trainer.save_frq") == {
        "same_setting": [], "open_parent": False, "close": ["trainer.save_freq"], "component": "trainer",
        "component_here": True}
    assert verl_probe.where_else(TREE, "actor_rollout_ref.model.override_config.attn")["open_parent"] is True
    assert verl_probe.where_else(TREE, "trainer.total_epochs.x")["close"] == []  # a value, not a mapping
    assert verl_probe.where_else(TREE, "algorithm.lr")["component_here"] is False


def test_the_override_hydra_refuses_is_found_from_its_message():
    args = ["verl.trainer.main_ppo", "data.x=1", "+trainer.save_freq=3", "critic.model.fsdp_config.param_offload=False",
            "engine=nope", "data.y=[", "--cfg", "job"]
    missing = "Could not override 'critic.model.fsdp_config.param_offload'.\nTo append to your config use +..."
    assert verl_probe.refused_override(missing, args) == (3, "missing")
    exists = "Could not append to config. An item is already at 'trainer.save_freq'.\nEither remove + prefix: ..."
    assert verl_probe.refused_override(exists, args) == (2, "exists")
    assert verl_probe.refused_override("Error merging override data.y=[", args) == (5, "error")
    group = "In 'sft_trainer_engine': Could not find 'engine/nope'\n\nAvailable options in 'engine':\n\tfsdp"
    assert verl_probe.refused_override(group, args) == (4, "error")
    assert verl_probe.refused_override("Could not override 'job'.", args) is None  # never the module nor a flag
    assert verl_probe.refused_override("mismatched input '[' expecting <EOF>", args) is None
    assert verl_probe.override_key("++a.b@pkg=1") == "a.b"


def test_every_refused_override_is_noted_and_the_compose_goes_on_without_it(monkeypatch):
    answers = {3: (1, "", "Could not override 'a.b'.\nTo append to your config use +a.b=1"),
               2: (1, "", "Could not append to config. An item is already at 'c.d'.\nEither remove + prefix"),
               1: (0, "composed: yes\n", None)}
    seen = []

    def compose(args):
        seen.append(list(args))
        return answers[len(args) - 3]

    monkeypatch.setattr(verl_probe, "compose", compose)
    code, text, refused, error = verl_probe.compose_all(["m", "a.b=1", "+c.d=2", "e.f=3", "--cfg", "job"])
    assert (code, text, error) == (0, "composed: yes\n", None)
    assert [(r["key"], r["kind"]) for r in refused] == [("a.b", "missing"), ("c.d", "exists")]
    assert seen[-1] == ["m", "e.f=3", "--cfg", "job"]


def test_an_error_no_override_explains_ends_the_composes_with_verls_message(monkeypatch):
    answers = iter([(1, "", "Could not override 'a.b'."), (1, "", "Error parsing override 'x=['\nmismatched input")])
    monkeypatch.setattr(verl_probe, "compose", lambda args: next(answers))
    code, _, refused, error = verl_probe.compose_all(["m", "a.b=1", "x=[", "--cfg", "job"])
    assert code == 1 and [r["key"] for r in refused] == ["a.b"] and error.startswith("Error parsing override")
    assert verl_probe.one_line("Could not find 'engine/x'\n\nAvailable options:\n\tfsdp\nConfig search path:\n\ta") \
        == "Could not find 'engine/x' | Available options: | fsdp"


def test_verls_refusal_is_its_dataclasss_own_error_with_where():
    class InstantiationException(Exception):  # hydra's, which wraps what a config's __post_init__ raises
        pass

    try:
        try:
            raise ValueError("[actor] You have set both 'a' AND 'b'.\nsecond line")
        except ValueError as cause:
            raise InstantiationException("Error in call to target 'X':\nValueError(...)\nfull_key: actor") from cause
    except InstantiationException as exc:
        assert verl_probe.failure_line(exc) == "ValueError: [actor] You have set both 'a' AND 'b'. (full_key: actor)"
    assert verl_probe.failure_line(AssertionError("n_gpus must divide")) == "AssertionError: n_gpus must divide"
    assert verl_probe.failure_line(AssertionError()) == "AssertionError"


def run_probe(workload, overrides, env=None):
    module = "verl.trainer.sft_trainer_ray" if workload == "sft" else "verl.trainer.main_ppo"
    argv = [VERL_PYTHON, "-c", preflight.source(), json.dumps(preflight.request(workload)), module,
            *overrides, "--cfg", "job"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
                          cwd=ROOT, check=False)
    return done.returncode, preflight.parse(done.stdout), done.stderr


needs_verl = pytest.mark.skipif(not os.access(VERL_PYTHON, os.X_OK), reason=".venv-verl (torch, verl) is not built")


LAB_ENV = {"PYTHONPATH": os.path.join(ROOT, "lab"), "VERL_USE_EXTERNAL_MODULES": "verl_cpu", "VERL_PLATFORM": "cpu"}
# Three of verl's own example scripts, written for older verls, as overrides: the keys the spec owns are its fields
# (model, data, sizes, names, loggers; save_freq), so they are left out here as an import leaves them.
DEEPSEEK_PPO = [  # examples/ppo_trainer/run_deepseek7b_llm.sh
    "data.train_batch_size=1024", "data.max_prompt_length=512", "data.max_response_length=512",
    "data.filter_overlong_prompts=True", "data.truncation=error", "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=True", "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False", "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=4", "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.4", "critic.optim.lr=1e-5",
    "critic.model.use_remove_padding=False",
    "critic.model.enable_gradient_checkpointing=True", "critic.ppo_micro_batch_size_per_gpu=32",
    "critic.model.fsdp_config.param_offload=False", "critic.model.fsdp_config.optimizer_offload=False",
    "algorithm.use_kl_in_reward=False", "trainer.critic_warmup=0", "trainer.use_legacy_worker_impl=False"]
QWEN_GRPO = [  # an older examples/grpo_trainer/run_qwen2-7b.sh
    "data.train_batch_size=1024", "data.val_batch_size=1312", "data.max_prompt_length=512",
    "data.max_response_length=512", "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.ppo_micro_batch_size=128",
    "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False", "actor_rollout_ref.actor.fsdp_config.grad_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size=128",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size=128", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001", "trainer.critic_warmup=0"]
PEFT_SFT = [  # examples/sft/gsm8k/run_qwen_05_peft.sh (for verl's older fsdp_sft_trainer)
    "data.prompt_key=extra_info", "data.response_key=extra_info", "optim.lr=1e-4",
    "data.prompt_dict_keys=['question']", "+data.response_dict_keys=['answer']", "model.lora_rank=32",
    "model.lora_alpha=16", "model.target_modules=all-linear"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The lab's tiny model (verl's checks at main_ppo's start read the critic's tokenizer and HF config)."""
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([VERL_PYTHON, os.path.join(ROOT, "lab", "assets", "make_tiny_assets.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    return str(out / "model")


@pytest.fixture(scope="module")
def sft_run():
    """verl's defaults for sft, with an older SFT script's overrides and a misspelling (each run costs seconds)."""
    return run_probe("sft", [*PEFT_SFT, "trainer.save_frq=3"])


@pytest.fixture(scope="module")
def lab_ppo_run(tiny_model):
    """The deepseek PPO script's overrides on the lab's CPU platform, the actor on sdpa."""
    models = [f"actor_rollout_ref.model.path={tiny_model}", f"critic.model.path={tiny_model}"]
    return run_probe("ppo", ["algorithm.adv_estimator=gae", *models,
                             "+actor_rollout_ref.model.override_config.attn_implementation=sdpa", *DEEPSEEK_PPO],
                     LAB_ENV)


def refused_keys(facts):
    return {item["key"]: item for item in facts["refused"]}


@needs_verl
def test_verl_itself_defaults_to_flash_attention_and_asks_10_and_3_cpus_a_gpu_bundle(sft_run):
    code, facts, err = sft_run
    assert code == 0, err
    # Unset: verl's HFModelConfig falls back to flash_attention_2, and .venv-verl has no flash_attn.
    assert facts["attention"] == {"model.override_config.attn_implementation": None}
    assert "flash_attn" in facts["flash_attn_error"]
    assert facts["resource"] == "GPU"
    assert facts["cpus_per_bundle"] == {"RayResourcePool": 10, "ResourcePoolManager": 3}
    assert facts["engines"] == {"engine": "fsdp"}  # engine.strategy


@needs_verl
def test_ppo_with_sdpa_overrides_still_has_a_critic_verl_loads_with_flash_attention():
    code, facts, err = run_probe("ppo", ["algorithm.adv_estimator=gae",
                                         "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
                                         "+critic.model.override_config.attn_implementation=sdpa"])
    assert code == 0, err
    assert set(facts["attention"].values()) == {"sdpa"} and facts["valuehead_flash"] is True
    problem = preflight.attention("ppo", facts, "the head")
    assert "no override spares the critic" in problem


@needs_verl
def test_the_labs_cpu_platform_turns_a_bundle_into_one_cpu_and_spares_the_critic(lab_ppo_run):
    code, facts, err = lab_ppo_run
    assert code == 0, err
    assert facts["resource"] == "CPU" and facts["valuehead_flash"] is False
    assert preflight.bundle("ppo", facts) == {"CPU": 1}
    assert preflight.attention("ppo", facts, "the head") is None


@needs_verl
def test_one_run_names_every_key_verl_lacks_and_where_it_keeps_the_critics_offload(lab_ppo_run):
    code, facts, err = lab_ppo_run
    assert code == 0, err
    refused = refused_keys(facts)
    assert list(refused) == ["critic.model.fsdp_config.param_offload", "critic.model.fsdp_config.optimizer_offload",
                             "trainer.use_legacy_worker_impl"]
    assert refused["critic.model.fsdp_config.param_offload"]["same_setting"] == ["critic.fsdp.param_offload"]
    assert refused["critic.model.fsdp_config.optimizer_offload"]["same_setting"] == ["critic.fsdp.optimizer_offload"]
    assert refused["trainer.use_legacy_worker_impl"]["same_setting"] == []
    assert facts["verl_version"] == "0.9.1" and facts["startup"] == []  # the rest passes verl's own checks
    assert facts["startup_skipped"] is None
    message = preflight.verdict("ppo-1", "the head", preflight.refused(facts))
    assert message.startswith("ppo-1: the preflight on the head found 3 problems (nothing submitted): (1) ")
    assert "which has the same setting at critic.fsdp.optimizer_offload: set that instead" in message
    assert "+critic" not in message and "To append" not in message and "\n" not in message


@needs_verl
def test_hydras_hint_followed_for_a_key_that_moved_is_refused_by_verls_typed_config(tiny_model):
    models = [f"actor_rollout_ref.model.path={tiny_model}", f"critic.model.path={tiny_model}"]
    hinted = [f"+{o}" if o == "critic.model.fsdp_config.param_offload=False" else o for o in DEEPSEEK_PPO]
    code, facts, err = run_probe("ppo", ["algorithm.adv_estimator=gae", *models, *hinted], LAB_ENV)
    assert code == 0, err
    assert "critic.model.fsdp_config.param_offload" not in refused_keys(facts)  # hydra takes the + ...
    # ... and verl's critic would not take it:
    typed = ("TypeError: HFModelConfig.__init__() got an unexpected keyword argument 'fsdp_config' "
             "(full_key: critic.model)")
    assert facts["startup"] == [typed]


@needs_verl
def test_micro_batch_sizes_set_twice_are_refused_with_verls_message_beside_the_stale_key():
    site = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"  # a site's default, as the lab's
    older = "actor_rollout_ref.rollout.mode=sync"  # what verl's rollout config refuses since it went async
    code, facts, err = run_probe("grpo", ["algorithm.adv_estimator=grpo", *QWEN_GRPO, site, older], LAB_ENV)
    assert code == 0, err
    assert list(refused_keys(facts)) == ["actor_rollout_ref.actor.fsdp_config.grad_offload"]
    both, sync = facts["startup"]  # each of verl's checks that refuses, in one run
    assert both.startswith("ValueError: [actor] You have set both 'actor.ppo_micro_batch_size' AND "
                           "'actor.ppo_micro_batch_size_per_gpu'")
    assert both.endswith("(full_key: actor_rollout_ref.actor)")
    assert sync.startswith("ValueError: Rollout mode 'sync' has been removed.")
    problems = [*preflight.refused(facts), *preflight.startup(facts)]
    message = preflight.verdict("grpo-1", "the head", problems)
    assert "found 3 problems" in message and "nor any setting named grad_offload in actor_rollout_ref.actor" \
        in message
    assert "verl 0.9.1's start-up checks would refuse the config: ValueError: [actor]" in message


@needs_verl
def test_an_sft_scripts_stale_data_keys_and_a_misspelling_in_one_run(sft_run):
    code, facts, err = sft_run
    assert code == 0, err
    refused = refused_keys(facts)
    assert list(refused) == ["data.prompt_key", "data.response_key", "data.prompt_dict_keys", "trainer.save_frq"]
    assert all(item["kind"] == "missing" and item["same_setting"] == [] for item in refused.values())
    assert refused["trainer.save_frq"]["close"] == ["trainer.save_freq"] and facts["startup"] == []
    assert facts["startup_skipped"] is None


@needs_verl
def test_an_sft_on_megatron_is_judged_by_its_engine_and_its_batch_by_the_ranks_verl_places():
    # The lab's SFT batch of 8 on 6 ranks a node: verl 0.9.1 asserts 8 % 6 only after placing its workers.
    code, facts, err = run_probe("sft", ["engine=megatron", "data.train_batch_size=8", "trainer.n_gpus_per_node=6"])
    assert code == 0, err
    # Its composed engine has no strategy: McoreEngineConfig, which it instantiates, says megatron.
    assert facts["engines"] == {"engine": "megatron"} and "strategy" not in json.dumps(facts["values"])
    assert facts["attention"] == {"model.override_config.attn_implementation": None} and facts["flash_attn_error"]
    assert preflight.attention("sft", facts, "the head") is None  # Megatron's attention is its own
    assert facts["values"]["engine.tensor_model_parallel_size"] == 1 and facts["values"]["trainer.nnodes"] == 1
    [line] = preflight.batches("sft", facts)
    assert line.startswith("data.train_batch_size=8 does not split evenly over the 6 data-parallel rank(s) "
                           "(trainer.nnodes=1 x trainer.n_gpus_per_node=6)") and "8 % 6 != 0" in line


@needs_verl
def test_a_megatron_scripts_actor_keys_on_fsdp_get_no_other_components_setting_and_its_batch_is_split():
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                 "data.train_batch_size=12", "trainer.n_gpus_per_node=6", "actor_rollout_ref.rollout.n=5",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
                 "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.name=vllm"]
    code, facts, err = run_probe("grpo", overrides, LAB_ENV)
    assert code == 0, err
    stale = refused_keys(facts)["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"]
    # The rollout's tensor_model_parallel_size is another component's: never offered for the actor's.
    assert stale["same_setting"] == [] and stale["component"] == "actor_rollout_ref.actor"
    assert facts["engines"] == {"actor_rollout_ref.actor": "fsdp"} and facts["startup"] == []
    [line] = preflight.batches("grpo", facts)  # 8 x 5 = 40 rows over 6 ranks
    assert line.startswith("actor_rollout_ref.actor.ppo_mini_batch_size=8 x actor_rollout_ref.rollout.n=5 = 40 rows")
