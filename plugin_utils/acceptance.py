"""The site acceptance's two jobs as ray_job overrides (acceptance.yml; docs/acceptance.md), on the control host.

measure_overrides: the `acceptance` spec (a command job) pointed at the measuring code on the shared root, with its
entrypoint (the site's Ray Python, then acceptance_probe's arguments, each quoted) and a fresh submission id.
sft_overrides: the `sft` spec with the site's defaults, over every worker (nnodes = the workers), on the tiny model
and data on the shared root, with a batch that divides evenly over the data-parallel ranks.
"""

import shlex

from ansible.module_utils.acceptance import judgement
from ansible.module_utils.base import conventions
from ansible.module_utils.jobspec.fields import JobSpecError

from plugin_utils import jobspec_input

# Rows of the tiny SFT set (lab/assets/make_tiny_assets.py's TRAIN_ROWS): a batch never asks for more.
TINY_TRAIN_ROWS = 256
MICRO_BATCH = 4


def _positive_int(value, field):
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(value) < 1:
        raise JobSpecError(field, "must be a positive integer", value)
    return int(value)


def measure_overrides(shared_root, submission_id, python, payload_bytes=None, warmup=None, timed=None,
                      matmul_n=None):
    """ray_job overrides of the measuring job: id, code_path and the entrypoint that writes its record's result."""
    conventions.check_id("submission_id", submission_id)
    args = ["-m", "acceptance_probe", "--out", judgement.result_path(shared_root, submission_id)]
    for flag, value, field in (("--payload-bytes", payload_bytes, "acceptance_payload_bytes"),
                               ("--warmup", warmup, "acceptance_warmup"), ("--timed", timed, "acceptance_timed"),
                               ("--matmul-n", matmul_n, "acceptance_matmul_n")):
        number = _positive_int(value, field)
        if number is not None:
            args += [flag, str(number)]
    if (warmup in (None, "")) != (timed in (None, "")):
        raise JobSpecError("acceptance_warmup", "must be given together with acceptance_timed", None)
    # python is the site's ray_config.python, a command prefix (it may be "uv run python"), as rendered entrypoints
    # use it.
    return {"submission_id": submission_id, "code_path": conventions.acceptance_code_dir(shared_root),
            "entrypoint": f"{python} {shlex.join(args)}"}


def sft_overrides(site_defaults, nnodes, shared_root, submission_id):
    """ray_job overrides of the SFT: id, every worker, the tiny assets, a batch of MICRO_BATCH (or fewer) a rank."""
    conventions.check_id("submission_id", submission_id)
    nnodes = _positive_int(nnodes, "nnodes")
    resources = jobspec_input.site_layer(site_defaults or {}, "sft").get("resources") or {}
    gpus = resources.get("n_gpus_per_node") or 1
    ranks = nnodes * _positive_int(gpus, "jobspec_defaults resources.n_gpus_per_node")
    micro = max(1, min(MICRO_BATCH, TINY_TRAIN_ROWS // ranks))
    tiny = conventions.tiny_assets_dir(shared_root)
    return {"submission_id": submission_id, "resources.nnodes": nnodes,
            "model_path": f"{tiny}/model", "train_files": f"{tiny}/data/train.parquet",
            "val_files": f"{tiny}/data/val.parquet",
            "overrides": [f"data.train_batch_size={ranks * micro}", f"data.micro_batch_size_per_gpu={micro}"]}
