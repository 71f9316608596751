"""plugin_utils/acceptance.py (and its filters): the acceptance's two jobs resolve as ray_job would submit them."""

import os
import shlex

import pytest
import yaml
from acceptance_filters import ray_verl_acceptance_measure, ray_verl_acceptance_sft
from ansible.errors import AnsibleFilterError
from ansible.module_utils.jobspec import render

from plugin_utils import PROJECT_ROOT, acceptance, jobspec_input

RC = {"address": "198.18.0.10:6379", "dashboard_url": "http://198.18.0.10:8265",
      "python": "/root/ray verl/.venv-verl/bin/python"}
SPECS = os.path.join(PROJECT_ROOT, "jobspecs")


def site_defaults(site):
    path = os.path.join(PROJECT_ROOT, "inventory", site, "group_vars", "ray_cluster.yml")
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["jobspec_defaults"]


def test_the_measuring_job_runs_the_probe_from_the_shared_root_into_its_record():
    overrides = ray_verl_acceptance_measure("acc-1-measure", "/shared", "/root/ray verl/.venv-verl/bin/python",
                                            payload_bytes="1048576", warmup=1, timed="3")
    spec = jobspec_input.resolve_job("acceptance", ray_config={**RC, "shared_root": "/shared"}, specs_dir=SPECS,
                                     site_defaults=site_defaults("lab"), overrides=overrides)
    assert spec.workload == "command" and spec.submission_id == "acc-1-measure"
    assert spec.code_path == "/shared/common/code/acceptance"
    entry = render.render_entrypoint(spec, RC)
    # The site's Python is a command prefix (as rendered entrypoints use it); the probe's arguments are quoted.
    assert entry.startswith("/root/ray verl/.venv-verl/bin/python -m acceptance_probe ")
    assert shlex.split(entry.split(" -m ", 1)[1]) == [
        "acceptance_probe", "--out", "/shared/jobs/acc-1-measure/checkpoints/acceptance/acceptance.json",
        "--payload-bytes", "1048576", "--warmup", "1", "--timed", "3"]
    env = render.render_runtime_env(spec, RC)["env_vars"]
    assert env["PYTHONPATH"].split(":")[0] == "/shared/common/code/acceptance"


@pytest.mark.parametrize("kwargs, field", [
    ({"payload_bytes": "1; rm -rf /"}, "acceptance_payload_bytes"),
    ({"payload_bytes": 0}, "acceptance_payload_bytes"),
    ({"warmup": 2}, "acceptance_warmup"),
    ({"matmul_n": True}, "acceptance_matmul_n"),
])
def test_a_bad_knob_is_refused_naming_it(kwargs, field):
    with pytest.raises(AnsibleFilterError, match=f"^jobspec field '{field}': must be"):
        ray_verl_acceptance_measure("acc-1-measure", "/private", "python", **kwargs)
    with pytest.raises(AnsibleFilterError, match="^submission_id: must be"):
        ray_verl_acceptance_measure("../x", "/private", "python")


@pytest.mark.parametrize("site, nodes, batch, micro", [("lab", 3, 12, 4), ("example", 16, 256, 4),
                                                       ("example", 64, 256, 1), ("example", 128, 512, 1)])
def test_the_sft_trains_the_tiny_assets_over_every_worker(site, nodes, batch, micro):
    defaults = site_defaults(site)
    overrides = ray_verl_acceptance_sft("acc-1-sft", "/private", nodes, defaults)
    spec = jobspec_input.resolve_job("sft", ray_config=RC, specs_dir=SPECS, site_defaults=defaults,
                                     overrides=overrides)
    assert spec.submission_id == "acc-1-sft" and spec.resources.nnodes == nodes
    assert spec.model_path == "/private/common/tiny/model"
    assert spec.train_files in ("/private/common/tiny/data/train.parquet", ["/private/common/tiny/data/train.parquet"])
    # The batch divides over the ranks (nodes x the site's GPUs a node) and is appended last, so it wins in hydra.
    assert spec.overrides[-2:] == [f"data.train_batch_size={batch}", f"data.micro_batch_size_per_gpu={micro}"]
    entry = render.render_entrypoint(spec, RC)
    assert f"trainer.nnodes={nodes}" in entry


def test_sft_overrides_need_a_positive_worker_count():
    with pytest.raises(AnsibleFilterError, match="^jobspec field 'nnodes': must be a positive integer"):
        ray_verl_acceptance_sft("acc-1-sft", "/private", 0, {})
    assert acceptance.sft_overrides({}, 1, "/p", "a-sft")["overrides"] == ["data.train_batch_size=4",
                                                                           "data.micro_batch_size_per_gpu=4"]
