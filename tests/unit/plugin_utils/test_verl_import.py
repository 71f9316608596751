"""plugin_utils/verl_import.py: a verl launch script into jobspecs/<name>.yaml (import.yml). The scripts in
tests/unit/data/verl_scripts/ are shaped after verl's examples (their README says which)."""

import os
import re

import pytest
from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.jobspec import owned, render
from ansible.module_utils.jobspec.fields import TRAINERS, JobSpecError, check

from plugin_utils import jobspec_input, verl_import
from plugin_utils.verl_script import ScriptError

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "verl_scripts")
# What the lab's jobspec_defaults give a spec whose script left them for the user ($HOME data paths).
SITE = {"trainers": {"model_path": "/private/common/tiny/model", "train_files": "/private/common/tiny/data/t.parquet",
                     "val_files": "/private/common/tiny/data/v.parquet"}}


def fixture(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as handle:
        return handle.read()


def convert(text, command=None):
    return verl_import.convert(text, "s.sh", command)


def override_keys(spec):
    return [o.partition("=")[0].lstrip("+~") for o in spec["overrides"]]


def test_verls_ppo_example_imports_as_ppo_with_no_owned_key_left_and_the_others_kept_in_order():
    imported = verl_import.convert(fixture("ppo_gsm8k.sh"), "ppo_gsm8k.sh")
    spec = imported.spec
    assert imported.workload == "ppo"
    assert not set(override_keys(spec)) & set(owned.OWNED_KEYS)
    owned.check_overrides(spec["overrides"])
    assert spec["overrides"] == [
        "data.train_batch_size=512", "data.max_prompt_length=512", "data.max_response_length=256",
        "data.truncation=error", "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=128", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "critic.optim.lr=1e-5", "critic.ppo_micro_batch_size_per_gpu=8", "critic.model.fsdp_config.param_offload=False",
        "critic.model.fsdp_config.optimizer_offload=False", "algorithm.use_kl_in_reward=False",
        "trainer.critic_warmup=0", "trainer.use_legacy_worker_impl=False"]
    assert {k: v for k, v in spec.items() if k != "overrides"} == {
        "workload": "ppo", "resources": {"n_gpus_per_node": 8, "nnodes": 2},
        "model_path": "/models/qwen2.5-0.5b-instruct", "save_freq": 20, "total_training_steps": 100, "total_epochs": 3,
        "reward_fn_path": "/shared/rewards/gsm8k.py", "project_name": "gsm8k_ppo", "experiment_name": "qwen05b_gae"}
    # $HOME's data paths are left for the user, commented at their place; $@ is named, never an override.
    assert '# train_files: "$HOME/data/gsm8k/train.parquet"  # line 6: data.train_files: $HOME is not set' \
        in imported.text
    assert any(line.startswith("$HOME (line 6, 7): not set by the script") for line in imported.lines)
    assert "line 36: $@: left out: the script's arguments (read here as run without any); give yours to the spec as " \
           "overrides" in imported.lines
    assert "line 28: trainer.logger: left out: the spec renders it (every job logs to console, file, tensorboard; " \
           "from env (wandb when WANDB_API_KEY is set))" in imported.lines


def test_the_written_spec_resolves_with_the_sites_defaults_and_renders_the_scripts_overrides(tmp_path, ray_config):
    specs = tmp_path / "specs"
    specs.mkdir()
    imported, path = verl_import.import_script(os.path.join(DATA, "ppo_gsm8k.sh"), "deepseek", str(specs))
    assert path == str(specs / "deepseek.yaml") and (specs / "deepseek.yaml").read_text() == imported.text
    spec = jobspec_input.resolve_job("deepseek", ray_config=ray_config, specs_dir=str(specs), site_defaults=SITE)
    assert (spec.workload, spec.model_path, spec.train_files, spec.save_freq) == \
        ("ppo", "/models/qwen2.5-0.5b-instruct", "/private/common/tiny/data/t.parquet", 20)
    entrypoint = render.render_entrypoint(spec, ray_config)
    assert entrypoint.endswith(" ".join(imported.spec["overrides"]))
    assert "critic.model.path=/models/qwen2.5-0.5b-instruct" in entrypoint


def test_grpo_script_variables_exports_and_what_the_spec_refuses():
    imported = verl_import.convert(fixture("grpo_gsm8k.sh"), "grpo_gsm8k.sh")
    spec = imported.spec
    assert imported.workload == "grpo"
    assert (spec["model_path"], spec["train_files"], spec["val_files"]) == (
        "/models/qwen2-7b-instruct", "/shared/data/gsm8k/train.parquet", "/shared/data/gsm8k/test.parquet")
    assert "actor_rollout_ref.rollout.n=5" in spec["overrides"]  # $N_RESPONSES, set by the script
    assert spec["env"] == {"VLLM_ATTENTION_BACKEND": "XFORMERS"}
    assert "not-a-real-key" not in imported.text + "".join(imported.lines)  # an exported secret is never written
    assert "line 6: WANDB_API_KEY: left out of env: a secret is never written into a spec file; set it in the " \
           "site's env (jobspec_defaults) or give it with -e env.WANDB_API_KEY=..." in imported.lines
    assert "experiment_name" not in spec
    try:  # verl's "never save" (-1): the spec takes it as it takes it anywhere else, or leaves it commented
        taken = check(verl_import.spec_field("save_freq"), -1, "save_freq")
    except JobSpecError:
        taken = None
    assert spec.get("save_freq") == taken
    assert ('# save_freq: "-1"  # line 30: trainer.save_freq: ' in imported.text) == (taken is None)
    assert '# experiment_name: "grpo-$(date ...)"  # line 27: trainer.experiment_name: $(date ...) is a ' \
           'command substitution: never run' in imported.text  # another command: its first word only
    assert "line 31: 2>&1: left out: a redirection (the job's record keeps its driver log)" in imported.lines
    assert "line 31: tee: left out: not the trainer command imported, never run" in imported.lines


def test_sft_under_torchrun_takes_its_size_and_leaves_its_arguments_for_the_user():
    imported = verl_import.convert(fixture("sft_peft.sh"), "sft_peft.sh")
    spec = imported.spec
    assert imported.workload == "sft" and spec["resources"] == {"nnodes": 1}
    assert '# resources.n_gpus_per_node: "$1"  # line 13: --nproc_per_node: $1 is one of the script\'s arguments' \
        in imported.text
    assert "line 26: trainer.default_local_dir: left out: the spec keeps checkpoints in the job's own record " \
           "(checkpoint_dir's default)" in imported.lines
    assert spec["overrides"][:4] == ["data.prompt_key=extra_info", "data.response_key=extra_info",
                                     "data.prompt_dict_keys=[question]", "+data.response_dict_keys=[answer]"]
    assert spec["overrides"][-1] == "model.target_modules=all-linear"  # after the $@ and the continuation without space
    assert "model.lora_rank=32" in spec["overrides"] and "model.lora_alpha=16" in spec["overrides"]


def _module_and_estimator(workload):
    if workload == "sft":
        return "verl.trainer.sft_trainer_ray", ""
    estimator = {w: e for e, w in verl_import.estimators().items()}[workload]
    return "verl.trainer.main_ppo", f"algorithm.adv_estimator={estimator}"


@pytest.mark.parametrize("key", sorted(owned.OWNED_KEYS))
def test_every_owned_key_becomes_its_field_or_is_left_out_never_an_override(key):
    field = owned.OWNED_KEYS[key]
    workloads = {row[0]: row[1] for row in owned.SETTINGS}.get(key, TRAINERS)
    module, estimator = _module_and_estimator(workloads[0])
    target = verl_import.spec_field(field)
    value = {"int": "7", "path": "/p/x", "paths": "/p/x.parquet", "str": "name-1"}.get(target.kind if target else "",
                                                                                       "x")
    if key == verl_import.ESTIMATOR:
        estimator, value = "", estimator.partition("=")[2]
    imported = convert(f"python3 -m {module} {estimator} {key}={value}")
    assert key not in override_keys(imported.spec) and imported.workload == workloads[0]
    said = [line for line in imported.lines if line.startswith((f"line 1: {key} ", f"line 1: {key}:"))]
    if key == verl_import.ESTIMATOR:
        assert said == [f"line 1: {key} -> workload {workloads[0]}"]
    elif target is not None and field not in verl_import.NOT_TAKEN:
        node = imported.spec
        for part in field.split("."):
            node = node[part]
        assert node == (7 if target.kind == "int" else value)
        assert said == [f"line 1: {key} -> {field}"]
    else:  # rendered by the spec from what is not a field (the loggers), or kept in the job's record
        assert len(said) == 1 and said[0].startswith(f"line 1: {key}: left out: "), said
        assert value not in imported.text.split("overrides")[-1]


def test_an_owned_key_of_another_workload_is_left_out():
    imported = convert("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo critic.model.path=/m a.b=1")
    assert "critic.model.path" not in override_keys(imported.spec) and "model_path" not in imported.spec
    assert "line 1: critic.model.path: left out: the spec renders it for ppo only" in imported.lines


def test_prefixed_keys_stay_overrides_and_what_the_spec_refuses_is_commented_at_its_place():
    imported = convert("python3 -m verl.trainer.main_ppo ++data.seed=1 +trainer.nnodes=2 '~critic.x' hydra.run.dir=/t "
                       "c.d=2 --cfg job e.f=3")
    assert imported.spec["overrides"] == ["++data.seed=1", "c.d=2", "e.f=3"]
    text = imported.text.split("overrides:\n", 1)[1]
    assert text.splitlines()[:5] == [
        "  - ++data.seed=1",
        ('  # - "+trainer.nnodes=2"  # line 1: sets trainer.nnodes (or a key above it), which the spec renders from '
        "resources.nnodes: set that instead"),
        '  # - "~critic.x"  # line 1: deletes a key (~): an override may set or add keys, never remove them',
        ('  # - "hydra.run.dir=/t"  # line 1: sets hydra\'s own config (hydra.*), which decides what runs and where it '
        "writes"),
        "  - c.d=2"]
    assert "line 1: --cfg: left out: a hydra flag (the spec runs verl's own config, with overrides)" in imported.lines
    assert "line 1: job: left out: not a key=value override" in imported.lines


def test_a_value_its_field_refuses_is_commented_at_its_place_with_why():
    imported = convert("python3 -m verl.trainer.main_ppo trainer.total_epochs=many trainer.project_name='a b' c=1")
    assert "total_epochs" not in imported.spec and "project_name" not in imported.spec
    assert imported.text.splitlines()[7:9] == [
        '# total_epochs: "many"  # line 1: trainer.total_epochs: must be a positive integer or null (got a string)',
        ('# project_name: "a b"  # line 1: trainer.project_name: must be 1-128 letters, digits or ._- starting with a '
        "letter or digit (got a string)")]
    assert "line 1: trainer.total_epochs -> total_epochs: left for you, commented in the spec: must be a positive " \
           "integer or null (got a string)" in imported.lines


MODULES = ("verl.trainer.main_ppo, verl.trainer.sft_trainer_ray, verl.trainer.sft_trainer, "
           "verl.trainer.fsdp_sft_trainer")


def test_the_workload_from_the_estimator_verls_default_and_what_no_spec_runs():
    assert convert("python3 -m verl.trainer.main_ppo a=1").workload == "ppo"  # verl's default estimator, gae
    assert convert("python3 -m verl.trainer.main_ppo ++algorithm.adv_estimator=grpo").workload == "grpo"
    for text, problem in (
            ("x=1\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=$EST",
             ("s.sh:2: algorithm.adv_estimator holds $EST (not set by the script (it would come from the environment "
             "of whoever runs it)): the workload depends on it; set it in the script")),
            ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=\"rloo 2\"",
             "s.sh:1: algorithm.adv_estimator=rloo 2: not an estimator's name"),
            (("A=(algorithm.adv_estimator=gae)\nif [ -f x ]; then A+=(algorithm.adv_estimator=grpo); fi\n"
             "python3 -m verl.trainer.main_ppo \"${A[@]}\""),
             ("s.sh:3: algorithm.adv_estimator=grpo is passed only when the condition on line 2 holds (not decided "
              "here: line 2's test is not one read here): the workload depends on it; set it in the script")),
            ("python3 -m verl.trainer.main_generation a=1",
             f"s.sh:1: verl.trainer.main_generation is not a trainer a JobSpec runs ({MODULES})"),
            ("echo hello\necho python3 -m verl.trainer.main_ppo a=1",
             "s.sh: none of its 2 lines runs a verl trainer (python3 -m verl.trainer.<module> key=value ...)")):
        with pytest.raises(ScriptError) as err:
            convert(text)
        assert str(err.value) == problem


@pytest.mark.parametrize("estimator", ["rloo", "remax", "reinforce_plus_plus", "gpg", "gdpo", "grpo_passk"])
def test_an_estimator_verls_ppo_trainer_runs_is_kept_as_a_ppo_override_never_another_algorithm(estimator, ray_config):
    imported = convert(f"python3 -m verl.trainer.main_ppo a.b=1 algorithm.adv_estimator=gae "
                       f"algorithm.adv_estimator={estimator} actor_rollout_ref.model.path=/m "
                       "data.train_files=/t.parquet")
    assert imported.workload == "ppo"
    assert imported.spec["overrides"] == ["a.b=1", f"algorithm.adv_estimator={estimator}"]
    assert imported.lines[0] == (f"line 1: trainer command 1 of 1: verl.trainer.main_ppo with algorithm.adv_estimator="
                                 f"{estimator} -> workload ppo, the estimator kept as an override (verl runs it with "
                                 "PPO's trainer; its critic only with gae)")
    spec = jobspec.resolve(imported.spec, name="x", ray_config=ray_config)  # the spec takes it, and renders it last
    args = render.render_entrypoint(spec, ray_config).split()
    assert [a for a in args if a.startswith("algorithm.adv_estimator=")][-1] == f"algorithm.adv_estimator={estimator}"
    for other in ("grpo", "gae"):  # the workloads' own estimators stay theirs: never an override
        with pytest.raises(JobSpecError, match=r"sets algorithm\.adv_estimator"):
            jobspec.resolve({**imported.spec, "overrides": [f"algorithm.adv_estimator={other}"]}, name="x",
                            ray_config=ray_config)
    with pytest.raises(JobSpecError, match=r"sets algorithm\.adv_estimator"):
        jobspec.resolve({**imported.spec, "workload": "grpo"}, name="x", ray_config=ray_config)


def test_the_estimator_in_an_array_makes_a_grpo_spec_with_every_override():
    imported = verl_import.convert(fixture("grpo_arrays.sh"), "grpo_arrays.sh")
    assert imported.workload == "grpo"
    assert imported.spec["overrides"] == [
        "data.max_prompt_length=2048", "data.max_response_length=4096", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=5", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=12288",
        "trainer.balance_batch=True", "+trainer.tags='one two three'"]
    assert {k: v for k, v in imported.spec.items() if k != "overrides"} == {
        "workload": "grpo", "resources": {"nnodes": 2}, "model_path": "/models/qwen3-8b",
        "train_files": "/shared/data/gsm8k/train.parquet", "project_name": "gsm8k_grpo"}
    # What depends on the DEVICE probe (never run) is commented at its place, saying so.
    assert ('  # - "actor_rollout_ref.rollout.gpu_memory_utilization=0.9"  # line 53: passed only when line 32\'s case '
            "matches npu (not decided here: $(python3 ...) (line 6) is a command substitution: never run)") \
        in imported.text.splitlines()
    assert '# resources.n_gpus_per_node: "${GPUS}"  # line 54: trainer.n_gpus_per_node: ${GPUS} is set differently ' \
           "by the script's branches (line 38; not decided here: $(python3 ...) (line 6) is a command substitution: " \
           "never run)" in imported.text.splitlines()
    # Where each default came from.
    assert [line for line in imported.lines if "default" in line] == [
        "line 7: MODEL_PATH is not set by the script: its default there is taken (used on line 52)",
        "line 8: NNODES is not set by the script: its default there is taken (used on line 54)",
        "line 13: ROLLOUT_N is not set by the script: its default there is taken (used on line 53)",
        ("the defaults taken are the script's own: where your environment set those names when you ran it, give their "
        "values to the spec (or with -e)")]


def test_an_sft_module_from_a_default_and_a_config_group_choice():
    imported = verl_import.convert(fixture("sft_entrypoint.sh"), "sft_entrypoint.sh")
    assert imported.workload == "sft" and imported.trainer.module == "verl.trainer.sft_trainer"
    assert imported.spec["overrides"] == ["model=hf_model", "engine=fsdp", "optim=fsdp", "optim.lr=2e-5",
                                          "optim.betas=[0.9,0.95]"]
    assert (imported.spec["model_path"], imported.spec["experiment_name"], imported.spec["resources"]) == \
        ("/models/qwen3-vl-2b", "sft-fsdp-8", {"nnodes": 1, "n_gpus_per_node": 8})
    assert "line 6: ENTRYPOINT is not set by the script: its default there is taken (used on line 20)" \
        not in imported.lines  # the module is not an override: where it came from is the trainer line's
    with pytest.raises(JobSpecError, match=r"sets model\.path"):  # a group's option for sft only, never a value
        owned.check_overrides(["model=hf_model"], "ppo")
    with pytest.raises(JobSpecError, match=r"sets model\.path"):
        owned.check_overrides(["model={path: /x}"], "sft")


def test_the_megatron_config_name_keeps_the_megatron_engine_and_others_are_refused():
    imported = verl_import.convert(fixture("ppo_megatron.sh"), "ppo_megatron.sh")
    assert imported.workload == "ppo" and imported.derived == {
        "model_engine=megatron": "--config-name=ppo_megatron_trainer.yaml"}
    assert imported.spec["overrides"] == ["model_engine=megatron", "algorithm.adv_estimator=rloo",
                                          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                          "actor_rollout_ref.rollout.name=vllm"]
    assert "line 6: --config-name=ppo_megatron_trainer.yaml -> model_engine=megatron (verl 0.9.1 composes " \
           "ppo_megatron_trainer so)" in imported.lines
    assert "line 5: --config-path=config: left out: verl's own config folder, which the spec composes" \
        in imported.lines
    for text, problem in (
            ("--config-name=fully_async_ppo_megatron_trainer.yaml a=1",
             ("s.sh:1: --config-name=fully_async_ppo_megatron_trainer.yaml: verl 0.9.1's verl.trainer.main_ppo has no "
             "config of that name the spec can compose (it composes: ppo_trainer (its own), ppo_megatron_trainer "
             "(model_engine=megatron))")),
            ("--config-name $NAME a=1", ("s.sh:1: --config-name holds $NAME (not set by the script (it would come from "
             "the environment of whoever runs it)): which config verl composes depends on it; set it in the script")),
            ("-cp /home/me/conf a=1", ("s.sh:1: --config-path=/home/me/conf: a config folder of the script's own, not "
             "verl's; the spec composes verl's own config with overrides (give what that folder changes as "
             "overrides)"))):
        with pytest.raises(ScriptError) as err:
            convert(f"python3 -m verl.trainer.main_ppo {text}")
        assert str(err.value) == problem.replace("--config-path=/home/me/conf", "-cp=/home/me/conf")


def test_the_old_sft_trainers_partial_pretrain_is_the_model_path():
    imported = verl_import.convert(fixture("sft_peft.sh"), "sft_peft.sh")
    assert imported.spec["model_path"] == "/models/qwen2.5-0.5b-instruct"
    assert "line 22: model.partial_pretrain (sft's older name of model.path) -> model_path" in imported.lines
    assert not any(o.startswith("model.partial_pretrain") for o in imported.spec["overrides"])


def test_a_word_whose_key_is_not_known_refuses_the_script_naming_it():
    for text, problem in (
            ("python3 -m verl.trainer.main_ppo a=1 $EXTRA_ARGS",
             ("s.sh:1: $EXTRA_ARGS (not set by the script (it would come from the environment of whoever runs it)) may "
             "hand the trainer any key")),
            ("A=($(cat args.txt))\npython3 -m verl.trainer.main_ppo \"${A[@]}\"",
             "s.sh:2: $(cat ...) (line 1: a command substitution: never run) may hand the trainer any key"),
            ('f() { python3 -m verl.trainer.main_ppo "$@"; }\nf a=1',
             "s.sh:1: $@ (the arguments of the function it is in) may hand the trainer any key")):
        with pytest.raises(ScriptError) as err:
            convert(text)
        assert str(err.value).startswith(problem) and "\n" not in str(err.value)


@pytest.mark.parametrize(("text", "problem"), [
    ("python -m verl.experimental.fully_async_policy.fully_async_main a=1",
     (f"s.sh:1: launches verl.experimental.fully_async_policy.fully_async_main, not one of verl's trainers a JobSpec "
     f"runs ({MODULES})")),
    ("echo start\npython3 -m verl_mlite.launch a=1",
     f"s.sh:2: launches verl_mlite.launch, not one of verl's trainers a JobSpec runs ({MODULES})"),
    ("$COMMAND a=1", ("s.sh:1: $COMMAND is not set by the script (it would come from the environment of whoever runs "
     "it): what it launches cannot be read without running it"))])
def test_a_script_that_launches_something_else_is_refused_naming_it(text, problem):
    with pytest.raises(ScriptError) as err:
        convert(text)
    assert str(err.value) == problem


SECRETS = ("wandb-secret-0123456789", "hf_secret_0123456789", "wandb-literal-0123456789", "bearer-secret-0123456789",
           "env-secret-0123456789")


def test_no_secret_value_nor_another_commands_words_reach_the_spec_or_the_report():
    imported = verl_import.convert(fixture("secrets.sh"), "secrets.sh")
    shown = imported.text + "\n".join(imported.lines)
    assert not any(secret in shown for secret in SECRETS)
    assert '  # - "+trainer.wandb_key=$WANDB_API_KEY"  # line 12: $WANDB_API_KEY is the secret WANDB_API_KEY: its ' \
           "value is never written into a spec nor shown; set it in the site's env" in imported.text.splitlines()
    assert imported.spec["overrides"] == ["actor_rollout_ref.rollout.name=vllm"]
    assert [line for line in imported.lines if "not the trainer command" in line] == [
        "line 5: wandb: left out: not the trainer command imported, never run",
        "line 6: wandb: left out: not the trainer command imported, never run",
        "line 7: curl: left out: not the trainer command imported, never run"]
    env = convert(f"env HF_TOKEN={SECRETS[4]} WANDB_PROJECT=p python3 -m verl.trainer.sft_trainer_ray a=1")
    assert env.spec["env"] == {"WANDB_PROJECT": "p"} and SECRETS[4] not in env.text + "\n".join(env.lines)
    assert "line 1: env HF_TOKEN=... WANDB_PROJECT=... python3: left out: the launcher (Ray starts the trainer with " \
           "the cluster's ray_config.python)" in env.lines


def test_a_value_set_only_in_a_subshell_or_after_a_failing_test_is_never_taken():
    imported = convert("M=/m | true\nfalse && D=/d.parquet\npython3 -m verl.trainer.sft_trainer_ray model.path=$M "
                       "data.train_files=$D")
    assert "model_path" not in imported.spec and "train_files" not in imported.spec
    assert "line 3: model.path -> model_path: left for you, commented in the spec: $M is set on line 1 in line 1's " \
           "pipeline (|), a subshell bash does not keep it from" in imported.lines


def test_the_modules_a_spec_runs_are_those_render_starts(ray_config):
    for workload in ("ppo", "grpo", "sft"):
        spec = jobspec.resolve({"workload": workload, "model_path": "/m", "train_files": "/t.parquet"}, name="x",
                               ray_config=ray_config)
        module = re.search(r" -m (verl\.trainer\.\S+)", render.render_entrypoint(spec, ray_config)).group(1)
        assert module in verl_import.MODULES
        assert verl_import.MODULES[module] in (workload, None)
        assert verl_import.MODULES[module] or workload in verl_import.estimators().values()


def test_two_trainer_commands_one_chosen_or_one_line_listing_them():
    text = fixture("two_trainers.sh")
    with pytest.raises(ScriptError) as err:
        convert(text)
    assert str(err.value) == ("s.sh: 2 trainer commands (1: line 3, verl.trainer.sft_trainer_ray; 2: line 4, "
                              "verl.trainer.main_ppo): choose one with -e command=N")
    first, second = convert(text, 1), convert(text, 2)
    assert (first.workload, first.spec["model_path"], first.spec["total_epochs"]) == \
        ("sft", "/models/qwen2.5-0.5b-instruct", 1)
    assert (second.workload, second.spec["model_path"], second.spec["overrides"]) == \
        ("grpo", "/ckpt/sft", ["actor_rollout_ref.rollout.n=4"])
    assert "line 3: python3: left out: not the trainer command imported, never run" in second.lines
    for bad in (3, 0, "two"):
        with pytest.raises(ScriptError, match=r"^s\.sh: command: must be a number from 1 to 2 \(the trainer "):
            convert(text, bad)


def test_two_keys_that_leave_one_field_the_same_value_are_one_comment():
    imported = convert("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=org/model "
                       "critic.model.path=org/model")
    assert imported.text.count('# model_path: "org/model"  # line 1: actor_rollout_ref.model.path: must be') == 1
    assert imported.text.count("# model_path") == 1
    assert len([line for line in imported.lines if "-> model_path: left for you" in line]) == 2


def test_two_keys_that_set_one_field_differently_are_one_line_naming_both():
    text = "python3 -m verl.trainer.main_ppo \\\n  actor_rollout_ref.model.path=/a \\\n  critic.model.path=/b"
    with pytest.raises(ScriptError) as err:
        convert(text)
    assert str(err.value) == ("s.sh:3: critic.model.path sets model_path, which line 2 (actor_rollout_ref.model.path) "
                              "sets to another value: a spec has one model_path")


def test_values_are_data_in_the_written_file_never_a_template(tmp_path, ray_config):
    specs = tmp_path / "specs"
    specs.mkdir()
    script = tmp_path / "t.sh"
    script.write_text("export NOTE='{{ lookup(\"pipe\", \"id\") }}'\n"
                      "python3 -m verl.trainer.sft_trainer_ray 'x.tmpl={{ lookup(\"pipe\", \"id\") }}' "
                      "\"y.z=a\nworkload: command\" 'w={% raw %}'\n")
    imported, path = verl_import.import_script(str(script), "tmpl", str(specs))
    loaded = jobspec_input.load_spec_file(path)
    assert loaded["overrides"] == ['x.tmpl={{ lookup("pipe", "id") }}', "w={% raw %}"]
    assert loaded["env"] == {"NOTE": '{{ lookup("pipe", "id") }}'} and loaded["workload"] == "sft"
    assert '  # - "y.z=a\\nworkload: command"  # line 2: must be a hydra override' in imported.text  # one line
    spec = jobspec_input.resolve_job("tmpl", ray_config=ray_config, specs_dir=str(specs), site_defaults=SITE)
    assert spec.overrides == loaded["overrides"] and spec.env["NOTE"] == '{{ lookup("pipe", "id") }}'


def test_an_existing_spec_is_never_overwritten_without_force_and_force_overwrites_it(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "ppo.yaml").write_text("workload: smoke\n")
    script = os.path.join(DATA, "ppo_gsm8k.sh")
    with pytest.raises(ScriptError) as err:
        verl_import.import_script(script, "ppo", str(specs))
    assert str(err.value) == f"{specs}/ppo.yaml: exists: -e force=true overwrites it"
    assert (specs / "ppo.yaml").read_text() == "workload: smoke\n"
    imported, path = verl_import.import_script(script, "ppo", str(specs), force=True)
    assert (specs / "ppo.yaml").read_text() == imported.text and path == str(specs / "ppo.yaml")
    # A file that appears between the check and the write is not overwritten either.
    (specs / "late.yaml").write_text("workload: smoke\n")
    with pytest.raises(ScriptError, match=r"late\.yaml: exists: -e force=true overwrites it$"):
        verl_import.write(imported.text, "late", str(specs))
    assert (specs / "late.yaml").read_text() == "workload: smoke\n"
    assert sorted(os.listdir(specs)) == ["late.yaml", "ppo.yaml"]  # no temporary file left behind


def test_a_bad_spec_name_a_missing_script_and_check_mode(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    with pytest.raises(ScriptError, match=r"^spec: must be a spec name: 1-100 letters"):
        verl_import.import_script(os.path.join(DATA, "ppo_gsm8k.sh"), "../x", str(specs))
    with pytest.raises(ScriptError, match=r"nope\.sh: cannot read it \(No such file or directory\)$"):
        verl_import.import_script(str(tmp_path / "nope.sh"), "x", str(specs))
    imported, path = verl_import.import_script(os.path.join(DATA, "ppo_gsm8k.sh"), "x", str(specs), write_file=False)
    assert path is None and imported.workload == "ppo" and os.listdir(specs) == []
