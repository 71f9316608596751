"""Issue 10 §3: secret names people use, secrets of awkward shapes, other jobs' entrypoints, -vvv output."""

import json
import os

import pytest
from ansible.module_utils.base import redaction
from ray_job_harness import SID, action, files, make_action, make_spec, module_result, record, run

SECRETS = ["AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY", "DB_PASSWD", "DB_PASSWORD", "PGPASSWORD", "GITHUB_PAT",
           "OPENAI_API_KEY", "S3_SECRET_KEY", "SSH_PRIVATE_KEY", "GH_TOKEN", "CLIENT_SECRET", "TOKEN", "GPG_PASSPHRASE",
           "GOOGLE_APPLICATION_CREDENTIALS", "hf_token",
           # a count beside another secret word is still secret; a token with no count word is one
           "MAX_LEN_API_KEY", "NUM_SECRET", "HF_TOKEN_START", "TOKEN_BUDGET"]
NOT_SECRETS = ["PYTHONPATH", "PATH", "HF_HOME", "CUDA_VISIBLE_DEVICES", "TOKENIZERS_PARALLELISM", "KEYBOARD",
               "PATIENCE", "RAY_ADDRESS", "NCCL_DEBUG",
               # counts of tokens (verl's launch scripts): TOKEN(S) beside MAX, MIN, NUM, LEN, LENGTH or COUNT
               "PPO_MAX_TOKEN_LEN_PER_GPU", "ppo_max_token_len_per_gpu", "max_num_batched_tokens",
               "NUM_SPECULATIVE_TOKENS", "MIN_TOKENS", "TOKEN_COUNT", "max_token_length"]


@pytest.mark.parametrize("name", SECRETS)
def test_secret_names_people_use(name):
    assert redaction.is_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRETS)
def test_ordinary_names_are_not_secret(name):
    assert not redaction.is_secret_name(name)


def test_a_site_name_is_secret():
    assert not redaction.is_secret_name("SITE_CODE")
    assert redaction.is_secret_name("SITE_CODE", ("SITE_CODE",))


def test_which_names_are_secret_follows_one_rule():
    """redaction.secret_names: a ray_config's own list (else the defaults), then a site's extra names, once each."""
    assert redaction.secret_names() == redaction.DEFAULT_SECRET_ENV_NAMES
    assert redaction.secret_names(None, ["SITE_CODE"]) == (*redaction.DEFAULT_SECRET_ENV_NAMES, "SITE_CODE")
    assert redaction.secret_names(["A_CODE"], ["B_CODE", "A_CODE", 7]) == ("A_CODE", "B_CODE")


# Values of every awkward shape: quotes (escaped differently by JSON and the shell), short, spaces, unicode.
AWKWARD = {"QUOTED_TOKEN": "it's\"quoted$x", "SHORT_TOKEN": "Zq", "ONE_KEY": "Q", "SPACE_SECRET": "two words here",
           "UNI_PASSWORD": "pässwörd✓", "BACKSLASH_PAT": "a\\b\\n", "SITE_CODE": "site-value-9876"}


def test_secrets_of_every_shape_stay_out_of_the_submit_command_and_the_record(ray, ray_config, capsys):
    rc = {**ray_config, "secret_env_names": ["SITE_CODE"]}
    spec = make_spec(rc, env=dict(AWKWARD))
    code, out = run(capsys, spec=spec, ray_config=rc)
    assert code == 0 and out["changed"]
    [call] = ray.submitted
    assert call["runtime_env"]["env_vars"]["QUOTED_TOKEN"] == AWKWARD["QUOTED_TOKEN"]  # Ray gets the real value
    written = files(record(ray_config))
    cmd = written["config/submit_cmd.txt"].decode()
    env_json = json.loads(written["config/runtime_env.json"])["env_vars"]
    spec_json = json.loads(written["config/job_spec.json"])["env"]
    for name, value in AWKWARD.items():
        assert env_json[name] == spec_json[name] == "<redacted>", name
        if len(value) >= 4:
            for path, content in written.items():
                assert value.encode() not in content, (name, path)
                assert json.dumps(value)[1:-1].encode() not in content, (name, path)
    # Short ones cannot be searched for everywhere; the command is rendered from the redacted env, so the
    # command has none of them in its runtime_env JSON.
    runtime_env_arg = cmd.split("--runtime-env-json ", 1)[1]
    assert '"SHORT_TOKEN": "<redacted>"' in runtime_env_arg and '"ONE_KEY": "<redacted>"' in runtime_env_arg
    assert "Zq" not in cmd
    for value in AWKWARD.values():
        assert len(value) < 4 or json.dumps(value)[1:-1] not in json.dumps(out)


def test_the_job_list_keeps_no_other_jobs_entrypoint(ray, ray_config, capsys):
    run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    ray.submit_job(entrypoint="curl -H 'Authorization: Bearer other-users-secret-1234' x", submission_id="other-1",
                   runtime_env={}, metadata={})
    ray.set(SID, "SUCCEEDED", driver_exit_code=0, driver_node_id="n-w1", start_time=1, end_time=2)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["done"]
    listing = files(record(ray_config))["debug/ray_job_list_post.txt"].decode()
    assert "other-1" in listing and "other-users-secret" not in listing and "curl" not in listing
    assert "smoke_probe" in listing  # this job's own entrypoint is kept


def test_site_secret_names_reach_the_module_and_the_invocation_is_redacted(ray, ray_config, capsys,
                                                                           monkeypatch, tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "smoke.yaml").write_text("workload: smoke\n")
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: {
        "spec": "smoke", "submission_id": "sec-1", "env.SITE_CODE": "site-value-9876", "env.MY_PAT": "pat-abcdef"})
    sent = []

    def executor(module_name, module_args, task_vars):
        sent.append(module_args)
        out = module_result(capsys, **{k: v for k, v in module_args.items() if k != "token_path"})
        # As the real _execute_module returns it: the module's own arguments echoed under invocation.
        return {**out, "invocation": {"module_args": module_args}}

    inventory = {"ray_config": ray_config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python",
                 "jobspec_secret_env_names": ["SITE_CODE"]}
    result = make_action({"extra_vars": True, "specs_dir": str(specs)}, inventory, executor).run(task_vars={})
    assert not result.get("failed"), result.get("msg")
    assert "SITE_CODE" in sent[0]["ray_config"]["secret_env_names"]
    shown = json.dumps(result)
    assert "site-value-9876" not in shown and "pat-abcdef" not in shown
    assert result["invocation"]["module_args"]["spec"]["env"]["SITE_CODE"] == "<redacted>"
    with open(os.path.join(ray_config["shared_root"], "jobs", "sec-1", "config", "submit_cmd.txt")) as handle:
        assert "site-value-9876" not in handle.read()


def test_bad_site_secret_names_are_refused(ray_config):
    inventory = {"ray_config": ray_config, "ray_auth_enabled": False, "ray_python": "/p",
                 "jobspec_secret_env_names": ["OK", "bad name"]}
    result = make_action({"action": "status", "submission_id": "x"}, inventory,
                         lambda **kw: pytest.fail("the module must not run")).run(task_vars={})
    assert result["failed"] and result["msg"].startswith("jobspec field 'jobspec_secret_env_names': ")
