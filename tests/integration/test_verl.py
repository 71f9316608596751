"""verl workloads on the lab (issue: verl for real): snapshots, preflight, SFT trained on CPU, PPO/GRPO composed."""

import json
import os
import shutil
import tarfile

import pytest
import yaml
from conftest import IPS, RECORDS, ROOT, WORKER1, WORKER2, new_id, playbook
from jobs_helpers import ray_jobs

SNAPSHOTS = os.path.join(ROOT, ".lab", "private", "common", "code", "verl")
SDIST = os.path.join(ROOT, ".lab", "src", "verl-0.9.1.tar.gz")


pytestmark = pytest.mark.usefixtures("cluster_up")


def status(sid):
    with open(os.path.join(RECORDS, sid, "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def driver_log(sid):
    with open(os.path.join(RECORDS, sid, "logs", "driver.log"), encoding="utf-8") as handle:
        return handle.read()


def test_up_snapshots_verl_once_read_only_with_marker_and_preflight():
    snap = os.path.join(SNAPSHOTS, "verl-0.9.1")
    assert os.path.isfile(os.path.join(snap, "verl", "__init__.py"))
    with open(os.path.join(snap, "verl_code_marker.py"), encoding="utf-8") as handle:
        assert 'CODE_ID = "verl-0.9.1"' in handle.read()
    assert os.path.isfile(os.path.join(snap, "job_preflight.py"))
    assert not os.stat(os.path.join(snap, "verl", "__init__.py")).st_mode & 0o222
    again = playbook("snapshot.yml")
    assert again.rc == 0 and again.changed("lab-head") == 0, again


def test_sft_trains_on_the_lab_and_resumes_from_its_checkpoint():
    first = new_id("sft")
    run = playbook("submit.yml", "-e", "spec=sft", "-e", f"submission_id={first}", "-e", "wait=true")
    assert run.rc == 0, run
    st = status(first)
    assert st["state"] == "SUCCEEDED" and st["steps"] == 2, st
    assert st["first_loss"] is not None and st["last_loss"] is not None
    assert st["driver_node_ip"] in (IPS[WORKER1], IPS[WORKER2])
    assert st["preflight"]["ok"] and st["preflight"]["code_id"] == "verl-0.9.1"
    checkpoints = os.path.join(RECORDS, first, "checkpoints")
    assert os.path.isdir(os.path.join(checkpoints, "global_step_2", "huggingface"))
    assert "step:2" in driver_log(first) and "Saving checkpoint to: /private/jobs/" in driver_log(first)
    # verl's own loggers wrote into the record: its file logger metrics.jsonl (the exact loss the record keeps, and
    # the validation loss on a line of its own), its tensorboard logger an event file.
    with open(os.path.join(RECORDS, first, "metrics.jsonl"), encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    assert [r["step"] for r in rows if "train/loss" in r["data"]] == [1, 2], rows
    assert rows[0]["data"]["train/loss"] == st["first_loss"] and any("val/loss" in r["data"] for r in rows), rows
    assert any(n.startswith("events.out.tfevents.") for n in os.listdir(os.path.join(RECORDS, first, "tensorboard")))
    assert st["last_step"].startswith("step 2 of 2, loss ") and st["metrics_note"] is None, st
    print(f"SFT {first}: {st['phases']}, loss {st['first_loss']} -> {st['last_loss']}")

    resumed = new_id("sft-resume")
    run = playbook("submit.yml", "-e", "spec=sft", "-e", f"submission_id={resumed}", "-e", "wait=true",
                   "-e", "total_training_steps=4", "-e", f"resume_from={first}")
    assert run.rc == 0, run
    st = status(resumed)
    assert st["state"] == "SUCCEEDED" and st["steps"] == 4, st
    assert st["resumed_from"]["path"] == f"/private/jobs/{first}/checkpoints/global_step_2"
    assert st["attempt_of"] == first
    assert status(first)["attempts"] == [resumed]
    log = driver_log(resumed)
    assert "step:3 " in log and "step:1 " not in log
    assert os.path.isdir(os.path.join(RECORDS, resumed, "checkpoints", "global_step_4"))
    # The first job's record is untouched by the resumed one.
    assert sorted(os.listdir(checkpoints)) == ["global_step_2", "latest_checkpointed_iteration.txt"]


def test_two_code_versions_side_by_side(tmp_path):
    variant = tmp_path / "verl-variant"
    with tarfile.open(SDIST) as archive:
        archive.extractall(tmp_path, filter="data")
    shutil.move(str(tmp_path / "verl-0.9.1"), variant)
    (variant / "verl" / "LAB_VARIANT.txt").write_text("a second code version\n")
    run = playbook("snapshot.yml", "-e", f"code_snapshot_verl_source={variant}",
                   "-e", "code_snapshot_verl_id=verl-variant")
    assert run.rc == 0, run
    again = playbook("snapshot.yml", "-e", f"code_snapshot_verl_source={variant}",
                     "-e", "code_snapshot_verl_id=verl-variant")
    assert again.rc == 0 and again.changed("lab-head") == 0, again
    (variant / "verl" / "LAB_VARIANT.txt").write_text("changed code under the same id\n")
    clash = playbook("snapshot.yml", "-e", f"code_snapshot_verl_source={variant}",
                     "-e", "code_snapshot_verl_id=verl-variant")
    assert clash.rc != 0 and "already holds other code" in clash.out

    seen = {}
    for code_id in ("verl-0.9.1", "verl-variant"):
        sid = new_id("code")
        run = playbook("submit.yml", "-e", "spec=smoke", "-e", "workload=command", "-e", f"code_id={code_id}",
                       "-e", f"submission_id={sid}", "-e", 'entrypoint="echo job ran"', "-e", "wait=true")
        assert run.rc == 0, run
        pre = status(sid)["preflight"]
        assert pre["ok"] and pre["code_id"] == code_id
        assert pre["verl_file"] == f"/private/common/code/verl/{code_id}/verl/__init__.py"
        assert f"preflight: code_id = {code_id}" in driver_log(sid)
        seen[code_id] = pre["code_digest"]
    assert seen["verl-0.9.1"] != seen["verl-variant"]


def test_preflight_rejects_a_misspelled_override_and_a_missing_code_id():
    before = set(os.listdir(RECORDS))
    typo = playbook("submit.yml", "-e", "spec=sft", "-e", '{"overrides": ["trainer.save_frq=3"]}')
    out = " ".join(typo.out.split())
    assert typo.rc != 0 and "override trainer.save_frq: not in verl 0.9.1's config" in out, typo
    assert "trainer.save_freq" in out, typo  # the key spelt like it
    missing = playbook("submit.yml", "-e", "spec=sft", "-e", "code_id=verl-does-not-exist")
    assert missing.rc != 0 and "jobspec field 'code_id': no code snapshot" in missing.out
    assert set(os.listdir(RECORDS)) == before


@pytest.mark.parametrize("spec,estimator", [("ppo", "gae"), ("grpo", "grpo")])
def test_ppo_and_grpo_compose_against_real_verl(spec, estimator):
    run = playbook("submit.yml", "-e", f"spec={spec}", "--check")
    assert run.rc == 0, run
    assert f"algorithm.adv_estimator={estimator}" in run.out and "actor_rollout_ref.rollout.name=vllm" in run.out
    if spec == "grpo":
        assert "actor_rollout_ref.rollout.n=5" in run.out and "actor_rollout_ref.actor.use_kl_loss=True" in run.out
        assert "critic.model.path" not in run.out
    else:
        assert "critic.model.path=/private/common/tiny/model" in run.out


# The lab's model, reward and size, given with -e as a site would (the script's own name paths on another machine).
LAB_SIZE = ["-e", "resources.nnodes=1", "-e", "resources.n_gpus_per_node=1",
            "-e", "model_path=/private/common/tiny/model",
            "-e", "reward_fn_path=/private/common/tiny/reward/tiny_reward.py"]
STALE = {"critic.model.fsdp_config.param_offload": "critic.fsdp.param_offload",
         "critic.model.fsdp_config.optimizer_offload": "critic.fsdp.optimizer_offload",
         "trainer.use_legacy_worker_impl": None}


def test_an_imported_verl_script_and_one_preflight_naming_every_stale_key():
    """Issue 32: import.yml reads a launch script (never runs it) into a ppo spec whose overrides hold no key the spec
    owns; one submit.yml --check of it names all three keys verl 0.9.1 lacks, with where the critic's offload went, and
    the script's rollout tensor parallel of 2 that the lab's one rank cannot lay out."""
    from ansible.module_utils.jobspec.owned import OWNED_KEYS

    name = new_id("imported")
    path = os.path.join(ROOT, "jobspecs", f"{name}.yaml")
    script = os.path.join(ROOT, "tests", "unit", "data", "verl_scripts", "ppo_gsm8k.sh")
    try:
        imported = playbook("import.yml", "-e", f"script={script}", "-e", f"spec={name}", *LAB_SIZE)
        with open(path, encoding="utf-8") as handle:
            spec = yaml.safe_load(handle)
        keys = [o.split("=", 1)[0] for o in spec["overrides"]]
        assert spec["workload"] == "ppo" and not set(keys) & set(OWNED_KEYS), spec
        assert keys.index("critic.model.fsdp_config.param_offload") < keys.index("trainer.use_legacy_worker_impl")
        for run in (imported, playbook("submit.yml", "-e", f"spec={name}", "--check", *LAB_SIZE)):
            assert run.rc != 0 and "found 4 problems" in run.out, run
            assert "makes a rollout replica 2 ranks, which does not divide the 1 ranks verl places" in run.out, run
            for key, moved in STALE.items():
                assert f"override {key}: not in verl 0.9.1's config" in run.out, run
                assert moved is None or f"same setting at {moved}" in run.out, run
            assert "To append to your config use +" not in run.out
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_a_micro_batch_set_twice_is_refused_in_verls_words_before_ray_sees_the_job():
    sid = new_id("twice")
    both = ["actor_rollout_ref.actor.ppo_micro_batch_size=128",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
    run = playbook("submit.yml", "-e", "spec=grpo", "-e", f"submission_id={sid}", "-e", json.dumps({"overrides": both}))
    assert run.rc != 0 and "You have set both 'actor.ppo_micro_batch_size' AND 'actor.ppo_micro_batch_size_per_gpu'" \
        in run.out, run
    assert sid not in ray_jobs() and not os.path.exists(os.path.join(RECORDS, sid))
