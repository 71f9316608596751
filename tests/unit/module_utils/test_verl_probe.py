"""The preflight's probe (module_utils/verl/probe.py): its pure parts here, and real runs in .venv-verl (torch CPU,
verl 0.9.1) when it exists, which read what verl itself asks: its default attention, its pools' CPUs per bundle,
the critic's hard-coded flash_attention_2, and the lab's CPU platform."""

import json
import os
import subprocess

import pytest
from ansible.module_utils.jobs import preflight, preflight_checks
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


def run_probe(workload, overrides, env=None):
    module = "verl.trainer.sft_trainer_ray" if workload == "sft" else "verl.trainer.main_ppo"
    argv = [VERL_PYTHON, "-c", preflight.source(), json.dumps(preflight_checks.request(workload)), module,
            *overrides, "--cfg", "job"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
                          cwd=ROOT, check=False)
    return done.returncode, preflight.parse(done.stdout), done.stderr


needs_verl = pytest.mark.skipif(not os.access(VERL_PYTHON, os.X_OK), reason=".venv-verl (torch, verl) is not built")


@needs_verl
def test_verl_itself_defaults_to_flash_attention_and_asks_10_and_3_cpus_a_gpu_bundle():
    code, facts, err = run_probe("sft", [])
    assert code == 0, err
    # Unset: verl's HFModelConfig falls back to flash_attention_2, and .venv-verl has no flash_attn.
    assert facts["attention"] == {"model.override_config.attn_implementation": None}
    assert "flash_attn" in facts["flash_attn_error"]
    assert facts["resource"] == "GPU"
    assert facts["cpus_per_bundle"] == {"RayResourcePool": 10, "ResourcePoolManager": 3}
    assert facts["strategies"] == {"model.override_config.attn_implementation": "fsdp"}  # engine.strategy


@needs_verl
def test_ppo_with_sdpa_overrides_still_has_a_critic_verl_loads_with_flash_attention():
    code, facts, err = run_probe("ppo", ["algorithm.adv_estimator=gae",
                                         "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
                                         "+critic.model.override_config.attn_implementation=sdpa"])
    assert code == 0, err
    assert set(facts["attention"].values()) == {"sdpa"} and facts["valuehead_flash"] is True
    problem = preflight_checks.attention("ppo-1", "ppo", facts, "the head")
    assert "no override spares the critic" in problem


@needs_verl
def test_the_labs_cpu_platform_turns_a_bundle_into_one_cpu_and_spares_the_critic():
    env = {"PYTHONPATH": os.path.join(ROOT, "lab"), "VERL_USE_EXTERNAL_MODULES": "verl_cpu", "VERL_PLATFORM": "cpu"}
    code, facts, err = run_probe("ppo", ["algorithm.adv_estimator=gae",
                                         "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"], env)
    assert code == 0, err
    assert facts["resource"] == "CPU" and facts["valuehead_flash"] is False
    assert preflight_checks.bundle("ppo", facts) == {"CPU": 1}
    assert preflight_checks.attention("ppo-1", "ppo", facts, "the head") is None


@needs_verl
def test_a_misspelled_override_exits_with_verls_own_message():
    code, facts, err = run_probe("sft", ["trainer.save_frq=3"])
    assert code != 0 and facts is None and "save_frq" in err
