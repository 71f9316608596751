"""The preflight of a verl job through the ray_job module: the probe in the job's own Python (on the head, else on a
worker through a Ray task), flash attention without flash_attn, GPU bundles no node can hold, overrides verl's config
lacks and verl's own start-up checks, every problem in one message.

The job's Python is faked at its boundary: AnsibleModule.run_command (the head) and Ray's driver API (the worker)."""

import json
import os
import subprocess
import time
import types

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.jobs.submission import preflight, verdicts
from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.verl import probe as verl_probe
from ray._raylet import RAY_INTERNAL_NAMESPACE_PREFIX
from ray_job_harness import GRPO, GRPO_SID, HEAD, NOW, ROOMY, WORKER, make_verl_spec, record, submit

LAB_FACTS = {"python": "/opt/verl/bin/python", "resource": "CPU",
             "cpus_per_bundle": {"RayResourcePool": 10, "ResourcePoolManager": 3},
             "attention": {"actor_rollout_ref.model.override_config.attn_implementation": "sdpa"}}


# Ray's NodeAffinitySchedulingStrategy wants a real node id (28 bytes, in hex).
HEX_WORKER = {**WORKER, "node_id": "ab" * 28}


def probe_output(**changes):
    return f"composed\n{verl_probe.MARK} {json.dumps({**LAB_FACTS, **changes})}\n"


class Head:
    """The head's run_command: each call answers the next of `answers` ((rc, out, err) or an exception)."""

    def __init__(self, monkeypatch, *answers):
        self.answers, self.calls = list(answers), []
        monkeypatch.setattr(AnsibleModule, "run_command", lambda module, args, **kw: self.run_command(args, **kw))

    def run_command(self, args, **kwargs):
        self.calls.append((args, kwargs))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class DriverRay:
    """Ray's driver API as preflight.on_worker uses it: the task's result is `answer` (a CompletedProcess), or
    ray.get times out."""

    def __init__(self, answer=None, late=False):
        self.answer, self.late = answer, late
        self.inits, self.options, self.calls, self.cancelled, self.shutdowns = [], [], [], [], 0
        self.exceptions = types.SimpleNamespace(GetTimeoutError=TimeoutError)

    def init(self, **kwargs):
        self.inits.append(kwargs)

    def remote(self, function):
        assert function is subprocess.run  # nothing of ours has to exist on the worker
        ray = self

        class Task:
            def options(self, **options):
                ray.options.append(options)
                return self

            def remote(self, *args, **kwargs):
                ray.calls.append((args, kwargs))
                return "ref"

        return Task()

    def get(self, ref, timeout):
        if self.late:
            raise TimeoutError
        return self.answer

    def cancel(self, ref, force):
        self.cancelled.append((ref, force))

    def shutdown(self):
        self.shutdowns += 1


def grpo(ray_config, **cli):
    return make_verl_spec(ray_config, **cli)


def test_a_head_with_the_jobs_python_composes_there_once_and_asks_ray_for_no_driver(ray, ray_config, capsys,
                                                                                    monkeypatch):
    head = Head(monkeypatch, (0, probe_output(), ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: pytest.fail("a head with the job's Python needs no task"))
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 0, out
    assert out["submission_id"] == GRPO_SID and len(ray.submitted) == 1
    (args, kwargs), = head.calls
    assert args[:2] == ["python", "-c"] and args[2] == preflight.source()
    asked = json.loads(args[3])
    assert asked["attn_keys"] == ["actor_rollout_ref.model.override_config.attn_implementation"]
    assert asked["valuehead"] is False and asked["engines"] == ["actor_rollout_ref.actor"]
    assert {"trainer.nnodes", "data.train_batch_size", "actor_rollout_ref.rollout.n"} <= set(asked["values"])
    assert args[4] == "verl.trainer.main_ppo" and args[-2:] == ["--cfg", "job"]
    # The job's environment: its PYTHONPATH and env vars, never the module's RAY_ADDRESS.
    env = kwargs["environ_update"]
    assert env["VERL_FILE_LOGGER_PATH"].endswith("/metrics.jsonl") and "RAY_ADDRESS" not in env


MISSING_TORCH = f"{verl_probe.MARK}-missing: /usr/bin/python3 cannot import torch\n"


@pytest.mark.parametrize("head_answer", [(verl_probe.MISSING_RC, "", MISSING_TORCH),
                                         FileNotFoundError(2, "No such file or directory")])
def test_a_head_without_the_jobs_python_composes_on_a_worker_and_leaves_no_job_behind(ray, ray_config, capsys,
                                                                                       monkeypatch, head_answer):
    Head(monkeypatch, head_answer)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    driver = DriverRay(subprocess.CompletedProcess([], 0, probe_output(), ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 0, out
    assert [job.submission_id for job in ray.list_jobs()] == [GRPO_SID]  # the job only: the probe is no Ray job
    (init,) = driver.inits
    assert init["address"] == ray_config["address"]
    # Ray's job list (job and state API) leaves out the drivers of _ray_internal_ namespaces.
    assert init["namespace"].startswith(RAY_INTERNAL_NAMESPACE_PREFIX)
    (options,) = driver.options
    assert options["num_cpus"] == 0 and options["max_retries"] == 0
    assert options["scheduling_strategy"].node_id == HEX_WORKER["node_id"]
    assert options["scheduling_strategy"].soft is False
    assert options["runtime_env"]["env_vars"]["PYTHONPATH"]  # the job's own runtime_env
    (args, kwargs), = driver.calls
    assert args[0][:4] == ["timeout", "-k", "10", str(preflight.REMOTE_TIMEOUT_S)]
    assert args[0][4:6] == ["python", "-c"] and kwargs["capture_output"] is True
    assert driver.shutdowns == 1


def test_a_worker_that_does_not_answer_fails_in_one_line_and_nothing_is_created(ray, ray_config, capsys,
                                                                                monkeypatch):
    Head(monkeypatch, (verl_probe.MISSING_RC, "", ""))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    driver = DriverRay(late=True)
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 1
    assert f"did not finish in {preflight.REMOTE_TIMEOUT_S} s" in out["msg"] and "\n" not in out["msg"]
    assert WORKER["node_ip"] in out["msg"] and "-e preflight=false" in out["msg"]
    assert driver.cancelled == [("ref", True)] and driver.shutdowns == 1
    assert not ray.submitted and not os.path.exists(record(ray_config, GRPO_SID))


def test_no_worker_to_compose_on_is_said(ray, ray_config, capsys, monkeypatch):
    Head(monkeypatch, (verl_probe.MISSING_RC, "", f"{verl_probe.MARK}-missing: /usr/bin/python3 cannot import verl\n"))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD])
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 1 and "cannot import verl" in out["msg"] and "no ALIVE worker" in out["msg"]
    assert not ray.submitted


KEY = "actor_rollout_ref.model.override_config.attn_implementation"
NO_FLASH = probe_output(attention={KEY: None}, flash_attn_error="ModuleNotFoundError: No module named 'flash_attn'")


def test_flash_attention_without_flash_attn_is_refused_with_both_fixes(ray, ray_config, capsys, monkeypatch):
    Head(monkeypatch, (0, NO_FLASH, ""))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    # The head lacks flash_attn: a worker, where the job runs, decides, and lacks it too.
    driver = DriverRay(subprocess.CompletedProcess([], 0, NO_FLASH, ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 1, out
    msg = out["msg"]
    assert "install flash-attn into the job's Python" in msg and f"++{KEY}=sdpa" in msg
    assert "No module named 'flash_attn'" in msg and "on worker 10.0.0.11" in msg and "\n" not in msg
    assert len(driver.calls) == 1
    assert not ray.submitted and not os.path.exists(record(ray_config, GRPO_SID))


def test_a_head_without_flash_attn_does_not_refuse_a_job_whose_workers_have_it(ray, ray_config, capsys, monkeypatch):
    Head(monkeypatch, (0, NO_FLASH, ""))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    driver = DriverRay(subprocess.CompletedProcess([], 0, probe_output(attention={KEY: None}), ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 0, out
    assert len(ray.submitted) == 1 and len(driver.calls) == 1


def test_a_one_box_head_is_the_worker_and_decides_alone(ray, ray_config, capsys, monkeypatch):
    box = {**HEAD, "resources_total": {"CPU": 8.0, "GPU": 4.0, "worker_node": 1.0}}
    Head(monkeypatch, (0, NO_FLASH, ""))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [box])
    monkeypatch.setattr(preflight, "_import_ray", lambda: pytest.fail("the head is where the job runs"))
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 1 and "on the head" in out["msg"], out


def test_gpu_bundles_no_node_can_hold_are_refused_naming_the_nodes(ray, ray_config, capsys, monkeypatch):
    gpu_worker = {**HEX_WORKER, "resources_total": {"CPU": 8.0, "GPU": 4.0, "worker_node": 1.0}}
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, gpu_worker])
    Head(monkeypatch, (0, probe_output(resource="GPU"), ""))
    driver = DriverRay(subprocess.CompletedProcess([], 0, probe_output(resource="GPU"), ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config, resources={"n_gpus_per_node": 4}))
    assert code == 1, out
    msg = out["msg"]
    assert "10.0.0.11 has 8 CPU, 4 GPU" in msg and "4 bundle(s) of {CPU: 3, GPU: 1}" in msg
    assert "(12 CPU, 4 GPU a node)" in msg and "ray_worker_num_cpus" in msg
    assert not ray.submitted


def test_the_labs_cpu_platform_asks_one_cpu_a_bundle_and_is_placed(ray, ray_config, capsys, monkeypatch):
    # The lab's workers: 8 logical CPUs and 4 declared GPUs; verl_cpu's resource name "CPU" overwrites verl's
    # {"CPU": 3} with 1.
    lab_worker = {**WORKER, "resources_total": {"CPU": 8.0, "GPU": 4.0, "worker_node": 1.0}}
    ray.nodes = [HEAD, lab_worker]  # the queue's view of the workers too: its 4 GPUs are free
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, lab_worker])
    Head(monkeypatch, (0, probe_output(), ""))
    code, out = submit(capsys, ray_config, grpo(ray_config, resources={"n_gpus_per_node": 4}))
    assert code == 0, out
    assert len(ray.submitted) == 1


STALE = [{"override": "critic.model.fsdp_config.param_offload=False", "key": "critic.model.fsdp_config.param_offload",
          "kind": "missing", "same_setting": ["critic.fsdp.param_offload"]},
         {"override": "trainer.use_legacy_worker_impl=False", "key": "trainer.use_legacy_worker_impl",
          "kind": "missing", "same_setting": []}]
BOTH_SET = "ValueError: [actor] You have set both 'actor.ppo_micro_batch_size' AND 'actor.ppo_micro_batch_size_per_gpu'"


def test_every_override_verl_lacks_and_its_start_up_refusal_are_one_message_and_nothing_is_created(
        ray, ray_config, capsys, monkeypatch):
    answer = (0, probe_output(verl_version="0.9.1", refused=STALE, startup=[BOTH_SET]), "")
    Head(monkeypatch, answer)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    # The start-up check may read the head's own files: a worker, where the job runs, is asked, and refuses too.
    driver = DriverRay(subprocess.CompletedProcess([], 0, answer[1], ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 1, out
    msg = out["msg"]
    assert msg.startswith(f"{GRPO_SID}: the preflight on worker 10.0.0.11 found 3 problems (nothing submitted): (1) ")
    assert "critic.fsdp.param_offload: set that instead" in msg and "trainer.use_legacy_worker_impl" in msg
    assert f"(3) verl 0.9.1's start-up checks would refuse the config: {BOTH_SET}" \
        in msg and "\n" not in msg and "+critic" not in msg
    assert len(driver.calls) == 1 and out["compose_cmd"].endswith("--cfg job")
    assert not ray.submitted and not os.path.exists(record(ray_config, GRPO_SID))


def test_overrides_verl_lacks_are_refused_from_the_head_without_asking_a_worker(ray, ray_config, capsys, monkeypatch):
    Head(monkeypatch, (0, probe_output(verl_version="0.9.1", refused=STALE), ""))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    monkeypatch.setattr(preflight, "_import_ray", lambda: pytest.fail("the job's verl refuses them on any node"))
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 1 and "on the head found 2 problems" in out["msg"], out
    assert not ray.submitted


def test_a_start_up_refusal_only_the_head_sees_does_not_refuse_the_job(ray, ray_config, capsys, monkeypatch):
    Head(monkeypatch, (0, probe_output(startup=["OSError: /private/hf/m is not a directory"]), ""))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    driver = DriverRay(subprocess.CompletedProcess([], 0, probe_output(startup=[]), ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 0, out
    assert len(ray.submitted) == 1 and len(driver.calls) == 1


def test_a_batch_verl_would_split_unevenly_once_placed_is_refused_from_the_head(ray, ray_config, capsys, monkeypatch):
    values = {"trainer.nnodes": 1, "trainer.n_gpus_per_node": 6, "trainer.use_v1": True, "data.train_batch_size": 12,
              "actor_rollout_ref.rollout.n": 5, "actor_rollout_ref.actor.ppo_mini_batch_size": 8}
    answer = probe_output(verl_version="0.9.1", engines={"actor_rollout_ref.actor": "fsdp"}, values=values)
    Head(monkeypatch, (0, answer, ""))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    monkeypatch.setattr(preflight, "_import_ray", lambda: pytest.fail("the config decides it on any node"))
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 1, out
    assert out["msg"].startswith(f"{GRPO_SID}: the preflight on the head: "
                                 "actor_rollout_ref.actor.ppo_mini_batch_size=8 x actor_rollout_ref.rollout.n=5 "
                                 "= 40 rows a mini-batch, which do not split evenly")
    assert not ray.submitted and not os.path.exists(record(ray_config, GRPO_SID))


def test_preflight_false_runs_no_probe(ray, ray_config, capsys):
    code, out = submit(capsys, ray_config, grpo(ray_config), preflight=False)  # the ray fixture refuses any command
    assert code == 0, out
    assert len(ray.submitted) == 1


# Issue 32: the verdict kept per code, trainer, overrides and env (module_utils/jobs/submission/verdicts.py).
def kept_files(ray_config):
    folder = os.path.join(ray_config["shared_root"], "jobs", verdicts.FOLDER)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


@pytest.fixture(autouse=True)
def share_jobs(ray_config):
    """The jobs folder every shared root has (the shared_root role makes it); the kept verdicts go in it."""
    os.makedirs(os.path.join(ray_config["shared_root"], "jobs"), exist_ok=True)


@pytest.fixture
def keepable(monkeypatch):
    """A job whose verdict may be kept (a code snapshot, a venv's Python on the head): fingerprint() is tested below
    on real folders."""
    monkeypatch.setattr(verdicts, "fingerprint", lambda spec, python, runtime_env: "0" * 64)


def test_a_second_submission_of_the_same_spec_skips_the_probe(ray, ray_config, capsys, monkeypatch, keepable):
    head = Head(monkeypatch, (0, probe_output(), ""))
    ray.nodes = [HEAD, ROOMY]  # both run at once
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 0 and out["preflight"] == "passed on the head" and len(kept_files(ray_config)) == 1, out
    code, out = submit(capsys, ray_config, grpo(ray_config, submission_id="grpo-again"))
    assert code == 0 and out["preflight"].startswith("passed: the verdict kept"), out
    assert len(head.calls) == 1 and len(ray.submitted) == 2  # one probe for two submissions


def test_another_override_or_code_runs_the_probe_again(ray, ray_config, capsys, monkeypatch, keepable):
    head = Head(monkeypatch, (0, probe_output(), ""), (0, probe_output(), ""))
    assert submit(capsys, ray_config, grpo(ray_config))[0] == 0
    changed = grpo(ray_config, submission_id="grpo-lr", overrides=["actor_rollout_ref.actor.optim.lr=2e-6"])
    code, out = submit(capsys, ray_config, changed)
    assert code == 0 and out["preflight"] == "passed on the head", out
    assert len(head.calls) == 2 and len(kept_files(ray_config)) == 2


def test_check_mode_keeps_nothing(ray, ray_config, capsys, monkeypatch, keepable):
    Head(monkeypatch, (0, probe_output(), ""))
    code, out = submit(capsys, ray_config, grpo(ray_config), _ansible_check_mode=True)
    assert code == 0 and kept_files(ray_config) == [], out


@pytest.mark.parametrize("content", [
    '{"v": 1, "where": "the head", "facts": []}', "not json", "x" * (70 << 10),
    '{"v": 1, "where": "the head", "facts": {"attention": 5, "cpus_per_bundle": [1]}}'])
def test_a_kept_verdict_of_another_shape_is_a_miss(ray, ray_config, capsys, monkeypatch, keepable, content):
    head = Head(monkeypatch, (0, probe_output(), ""), (0, probe_output(), ""))
    assert submit(capsys, ray_config, grpo(ray_config))[0] == 0
    [name] = kept_files(ray_config)
    with open(os.path.join(ray_config["shared_root"], "jobs", verdicts.FOLDER, name), "w", encoding="utf-8") as f:
        f.write(content)
    assert submit(capsys, ray_config, grpo(ray_config, submission_id="grpo-again"))[0] == 0
    assert len(head.calls) == 2  # the probe ran again, and its answer is kept anew


def test_a_kept_verdict_the_cluster_no_longer_passes_is_set_aside(ray, ray_config, capsys, monkeypatch, keepable):
    Head(monkeypatch, (0, probe_output(resource="GPU"), ""))
    gpu_worker = {**HEX_WORKER, "resources_total": {"CPU": 16.0, "GPU": 4.0, "worker_node": 1.0}}
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, gpu_worker])
    assert submit(capsys, ray_config, grpo(ray_config, resources={"n_gpus_per_node": 4}))[0] == 0
    smaller = {**gpu_worker, "resources_total": {"CPU": 8.0, "GPU": 4.0, "worker_node": 1.0}}
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, smaller])
    head = Head(monkeypatch, (0, probe_output(resource="GPU"), ""))
    driver = DriverRay(subprocess.CompletedProcess([], 0, probe_output(resource="GPU"), ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config,
                       grpo(ray_config, submission_id="grpo-again", resources={"n_gpus_per_node": 4}))
    assert code == 1 and "10.0.0.11 has 8 CPU, 4 GPU" in out["msg"] and len(head.calls) == 1, out
    assert kept_files(ray_config) == []


# Issue 38 (7): the key is the config rendered for a fixed placeholder id, and the files the probe reads.
def venv_python(tmp_path):
    """A venv's Python with verl, hydra and omegaconf in its site-packages."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    packages = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for name in verdicts.WATCHED:
        (packages / name).mkdir(parents=True)
        (packages / name / "__init__.py").write_text(f"# {name}\n")
    (packages / "verl" / "trainer").mkdir()
    (packages / "verl" / "trainer" / "main_ppo.py").write_text("def main(): ...\n")
    return str(python)


@pytest.fixture
def site(tmp_path):
    """A shared root with a code snapshot and the site's plugins, a local model, and a venv's Python on the head."""
    share = tmp_path / "share"
    (share / "jobs").mkdir(parents=True)
    snapshot = share / "common" / "code" / "verl" / "verl-0.9.1"
    (snapshot / "verl").mkdir(parents=True)
    (snapshot / "verl" / "__init__.py").write_text("__version__ = '0.9.1'\n")
    (share / "common" / "code" / "plugins" / "verl_cpu").mkdir(parents=True)
    (share / "common" / "code" / "plugins" / "verl_cpu" / "__init__.py").write_text("PLATFORM = 'cpu'\n")
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (model / name).write_text("{}")
    python = venv_python(tmp_path)
    ray_config = {"address": "10.0.0.10:6379", "dashboard_url": "http://10.0.0.10:8265", "shared_root": str(share),
                  "python": python}
    return types.SimpleNamespace(root=tmp_path, share=share, snapshot=snapshot, model=model, python=python,
                                 ray_config=ray_config,
                                 packages=tmp_path / "venv" / "lib" / "python3.11" / "site-packages")


def site_spec(site, sid="grpo-1", **cli):
    cli = {"submission_id": sid, "code_id": "verl-0.9.1", "model_path": str(site.model), **cli}
    return jobspec.resolve(GRPO, name="grpo", ray_config=site.ray_config, cli=cli, now=NOW, token="abc123")


def site_key(site, spec, names=("WANDB_API_KEY",)):
    return verdicts.key(spec, site.ray_config, None, ["-c", "probe source", "{}"], list(names))


def test_the_key_is_the_config_rendered_for_a_placeholder_id_never_a_text_substitution(site):
    batch = "data.train_batch_size"
    # Two submissions of one spec key alike: their ids name the record, the checkpoints and the experiment only.
    assert site_key(site, site_spec(site, "a-1")) == site_key(site, site_spec(site, "b-2")) is not None
    # Id 8 with a batch of 8 and id 3 with a batch of 3: a text substitution of the id made them one key.
    eight = site_spec(site, "8", overrides=[f"{batch}=8"])
    three = site_spec(site, "3", overrides=[f"{batch}=3"])
    assert site_key(site, eight) != site_key(site, three)
    assert site_key(site, eight) == site_key(site, site_spec(site, "9", overrides=[f"{batch}=8"]))
    # An experiment named apart from the id is the job's own setting, and keys it.
    assert site_key(site, site_spec(site, "a-1", experiment_name="mine")) != site_key(site, site_spec(site, "a-1"))
    rendered = verdicts.keyed_spec(eight)
    assert rendered.output_dir.endswith(f"/jobs/{verdicts.PLACEHOLDER}") and rendered.experiment_name == \
        verdicts.PLACEHOLDER and rendered.checkpoint_dir.startswith(rendered.output_dir + "/")
    assert rendered.overrides == eight.overrides


def test_the_key_leaves_out_secret_values_but_not_the_rest_of_the_env(site):
    def with_env(env, names=("WANDB_API_KEY",)):
        return site_key(site, site_spec(site, env=env), names)

    assert with_env({"WANDB_API_KEY": "s1"}) == with_env({"WANDB_API_KEY": "s2"})
    assert with_env({"WANDB_API_KEY": "s1", "HF_HOME": "/a"}) != with_env({"WANDB_API_KEY": "s1", "HF_HOME": "/b"})
    # A site's own secret name: its value leaves no trace in the key either.
    assert with_env({"SITE_TOKEN_X": "v1"}, ["SITE_TOKEN_X"]) == with_env({"SITE_TOKEN_X": "v2"}, ["SITE_TOKEN_X"])


def edit(path, text):
    """An edit in place: the same inode, the same size, the mtime put back (ctime still moves)."""
    before = os.stat(path)
    with open(path, "r+", encoding="utf-8") as handle:
        handle.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_ino == before.st_ino


@pytest.mark.parametrize("where", ["site-packages verl", "snapshot", "plugin", "tokenizer", "config"])
def test_a_file_the_probe_reads_edited_in_place_changes_the_key(site, where):
    spec = site_spec(site)
    first = site_key(site, spec)
    assert first is not None and site_key(site, spec) == first  # nothing changed: the same key
    path = {"site-packages verl": site.packages / "verl" / "trainer" / "main_ppo.py",
            "snapshot": site.snapshot / "verl" / "__init__.py",
            "plugin": site.share / "common" / "code" / "plugins" / "verl_cpu" / "__init__.py",
            "tokenizer": site.model / "tokenizer.json", "config": site.model / "config.json"}[where]
    time.sleep(0.01)  # ctime's clock ticks
    edit(path, path.read_text()[::-1])
    assert site_key(site, spec) != first


def test_installs_and_new_files_change_the_key_and_pythons_own_caches_do_not(site):
    spec = site_spec(site)
    first = site_key(site, spec)
    (site.packages / "verl" / "__pycache__").mkdir()
    (site.packages / "verl" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"x")
    (site.packages / "__pycache__").mkdir()
    assert site_key(site, spec) == first  # the first import writes them: never a miss for it
    (site.packages / "transformers-5.10.0.dist-info").mkdir()  # pip install -U of any package
    second = site_key(site, spec)
    assert second != first
    (site.model / "modeling_tiny.py").write_text("")  # trust_remote_code's code beside the config
    assert site_key(site, spec) != second


def test_a_model_or_tokenizer_given_as_a_hub_id_keeps_no_verdict(site):
    assert site_key(site, site_spec(site)) is not None
    hub = "actor_rollout_ref.model.tokenizer_path=Qwen/Qwen2.5-0.5B-Instruct"
    assert site_key(site, site_spec(site, overrides=[hub])) is None
    assert site_key(site, site_spec(site, model_path=str(site.root / "not-here"))) is None  # not a folder here
    local = site.root / "tokenizer"
    local.mkdir()
    (local / "tokenizer.json").write_text("{}")
    spec = site_spec(site, overrides=[f"actor_rollout_ref.model.tokenizer_path={local}"])
    first = site_key(site, spec)
    assert first is not None
    time.sleep(0.01)
    edit(local / "tokenizer.json", "[]")
    assert site_key(site, spec) != first


def test_a_symlink_out_of_its_folder_is_never_followed_and_keeps_no_verdict(site, tmp_path):
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    spec = site_spec(site)
    inside = site.model / "alias.json"
    os.symlink(site.model / "config.json", inside)  # inside the model's folder: seen through
    assert site_key(site, spec) is not None
    os.symlink(outside, site.model / "vocab.json")  # as a model in a Hub cache: blobs elsewhere
    assert site_key(site, spec) is None
    os.unlink(site.model / "vocab.json")
    os.symlink(tmp_path, site.share / "common" / "code" / "plugins" / "away")  # a folder out of the plugins
    assert site_key(site, spec) is None
    os.unlink(site.share / "common" / "code" / "plugins" / "away")
    (site.packages / "verl").rename(site.root / "verl-src")  # verl linked in from elsewhere
    os.symlink(site.root / "verl-src", site.packages / "verl")
    assert site_key(site, spec) is None


def test_too_many_files_keep_no_verdict(site, monkeypatch):
    spec = site_spec(site)
    assert site_key(site, spec) is not None
    monkeypatch.setattr(verdicts, "FILES_CAP", 5)
    assert site_key(site, spec) is None


def test_a_verdict_is_kept_only_for_a_snapshot_and_a_venvs_python(site):
    assert site_key(site, site_spec(site)) is not None
    spec = site_spec(site)
    runtime_env = {"env_vars": {"PYTHONPATH": str(site.snapshot)}}
    assert verdicts.fingerprint(types.SimpleNamespace(**{**vars(spec), "code_id": None}), [site.python],
                                runtime_env) is None
    assert verdicts.fingerprint(types.SimpleNamespace(**{**vars(spec), "user_code": True}), [site.python],
                                runtime_env) is None
    assert verdicts.fingerprint(spec, ["python"], runtime_env) is None  # not a path on the head: a worker's Python
    assert verdicts.fingerprint(spec, ["/usr/bin/env"], runtime_env) is None  # not a venv's
    assert verdicts.fingerprint(spec, [site.python], {"env_vars": {"PYTHONPATH": "code"}}) is None  # relative


def test_a_worker_answer_is_not_kept(ray, ray_config, capsys, monkeypatch, keepable):
    Head(monkeypatch, (verl_probe.MISSING_RC, "", MISSING_TORCH))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, HEX_WORKER])
    driver = DriverRay(subprocess.CompletedProcess([], 0, probe_output(), ""))
    monkeypatch.setattr(preflight, "_import_ray", lambda: driver)
    code, out = submit(capsys, ray_config, grpo(ray_config))
    assert code == 0 and out["preflight"] == "passed on worker 10.0.0.11", out
    assert kept_files(ray_config) == []  # the key sees the head's files, not the worker's


def test_prune_leaves_what_is_not_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(verdicts, "KEEP", 1)
    (tmp_path / "jobs" / verdicts.FOLDER / "odd.json").mkdir(parents=True)
    for i in range(3):
        verdicts.Kept(str(tmp_path), f"{i:064x}").keep({"where": "the head"})
    names = sorted(os.listdir(tmp_path / "jobs" / verdicts.FOLDER))
    assert len(names) == 2 and "odd.json" in names


def test_the_oldest_kept_verdicts_go_past_keep(tmp_path, monkeypatch):
    monkeypatch.setattr(verdicts, "KEEP", 3)
    (tmp_path / "jobs").mkdir(exist_ok=True)
    for i in range(5):
        kept = verdicts.Kept(str(tmp_path), f"{i:064x}")
        kept.keep({"where": "the head", "resource": "CPU"})
        os.utime(kept.path, (1000 + i, 1000 + i))
    names = sorted(os.listdir(tmp_path / "jobs" / verdicts.FOLDER))
    assert names == [f"{i:064x}.json" for i in (2, 3, 4)]
    assert verdicts.Kept(str(tmp_path), f"{4:064x}").facts() == ({"resource": "CPU"}, "the head")
