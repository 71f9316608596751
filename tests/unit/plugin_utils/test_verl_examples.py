"""import.yml over verl's own example launch scripts (issue 39): each of the 55 v0.9.0 scripts in the shared corpus
(../shared/verl-examples/, beside the project's checkout; the corpus missing is a failure) is imported and compared
with what bash hands verl for it, as the corpus's argv-of.sh prints it (bash over stubs: nothing of verl runs).

A script is imported faithfully when the workload is its trainer's and estimator's, every word bash hands the trainer
is accounted for (an override kept as bash passes it, a spec field holding its value, a commented line, or a line of
the report), and no override or field carries a value bash would not pass (the overrides in bash's order; the only
ones bash does not pass are what a --config-name means, each said). The rest is refused in one line naming the file,
the line and what could not be read: REFUSED."""

import glob
import json
import os
import re
import subprocess

import pytest
from ansible.module_utils.jobspec import owned
from ansible.module_utils.jobspec.fields import check

from plugin_utils import PROJECT_ROOT, verl_import
from plugin_utils.verl_script import ScriptError, read

CORPUS = os.path.join(os.path.dirname(PROJECT_ROOT), "shared", "verl-examples")
EXAMPLES = os.path.join(CORPUS, "examples")
SCRIPTS = sorted(os.path.relpath(p, EXAMPLES) for p in glob.glob(os.path.join(EXAMPLES, "**", "*.sh"), recursive=True))
# What argv-of.sh needs to launch a script: the positional arguments its usage line asks for, the variables it
# requires (set -u, ${NAME:?}). The importer reads the script without them (their values stay unknown: commented).
ORACLE_ARGS = {"sft/gsm8k/run_gemma_7b_fsdp.sh": ["--", "8", "/home/user/ckpt"],
               "sft/gsm8k/run_qwen2_5_0_5b_automodel.sh": ["--", "8", "/home/user/ckpt"],
               "sft/gsm8k/run_qwen3_30b_automodel.sh": ["--", "8", "/home/user/ckpt"],
               "grpo_trainer/run_deepseek_v4_flash_megatron.sh": ["HDFS_ROOT=/hdfs", "DATA_ROOT=/data"],
               "tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh": ["LORA_ADAPTER_PATH=/adapters/a1"]}
# The scripts refused, with what the one line names: at most 5 % of the corpus (the bar).
REFUSED = {
    "mtp_trainer/run_mimo_7b_mtp_fully_async_megatron_multinode.sh":
        "mtp_trainer/run_mimo_7b_mtp_fully_async_megatron_multinode.sh:62: launches "
        "verl.experimental.fully_async_policy.fully_async_main, not one of verl's trainers a JobSpec runs",
    "remax_trainer/run_qwen2.5_math_7b_sync_fsdp.sh":
        "remax_trainer/run_qwen2.5_math_7b_sync_fsdp.sh:106: verl.trainer.main_ppo_sync is not a trainer a JobSpec "
        "runs"}


def test_the_corpus_is_there_and_whole():
    assert os.path.isfile(os.path.join(CORPUS, "argv-of.sh")), f"the shared corpus is missing: {CORPUS}"
    assert len(SCRIPTS) == 55
    assert set(REFUSED) <= set(SCRIPTS) and len(REFUSED) <= 0.05 * len(SCRIPTS)


def bash_argv(script):
    """What bash hands verl for the script (its one launch), from argv-of.sh."""
    done = subprocess.run(["bash", os.path.join(CORPUS, "argv-of.sh"), os.path.join(EXAMPLES, script),
                           *ORACLE_ARGS.get(script, [])], capture_output=True, text=True, timeout=120, check=True)
    launches = json.loads(done.stdout)
    assert len(launches) == 1, f"{script}: argv-of.sh saw {len(launches)} launches"
    return launches[0]


def _key(arg):
    return arg.partition("=")[0]


def _commented(text):
    """The keys the spec's commented lines name: overrides ('# - "k=v"  # why'), fields ('# f: v  # line N: k: ...')."""
    keys = set()
    for line in text.splitlines():
        m = re.match(r'\s*# - (".*?(?<!\\)")  # ', line)
        if m:
            keys.add(_key(json.loads(m.group(1))))
        m = re.match(r"#\s+[\w.]+: .*  # line \d+: (\S+?)(?: \(.*\))?: ", line)
        if m:
            keys.add(m.group(1))
    return keys


def _field(spec, name):
    node = spec
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def unfaithful(script, imported, argv):
    """What makes an import unfaithful to bash's argv (empty: faithful)."""
    problems = []
    module_at = next(i for i, a in enumerate(argv) if a.startswith(("verl.", "-mverl.")) or "verl/trainer/" in a)
    module = argv[module_at].removeprefix("-m")
    launcher, args = argv[:module_at], argv[module_at + 1:]
    spec = imported.spec
    # The workload: the trainer's and the estimator's.
    estimators = [a.partition("=")[2].strip("'\"") for a in args if _key(a).lstrip("+") == owned.ESTIMATOR]
    estimator = estimators[-1] if estimators else verl_import.VERL_DEFAULT_ESTIMATOR
    expected = verl_import.MODULES[module] or verl_import.estimators().get(estimator, "ppo")
    if spec["workload"] != expected:
        problems.append(f"workload {spec['workload']}, bash runs {module} with {estimator}")
    if module == "verl.trainer.main_ppo" and estimator not in verl_import.estimators() and \
            f"{owned.ESTIMATOR}={estimator}" not in spec["overrides"]:
        problems.append(f"the estimator {estimator} is not kept")
    # Every word accounted for, no value bash would not pass.
    commented, left = _commented(imported.text), set()
    for line in imported.lines:
        m = re.match(r"line \d+: (\S+?)(?: \(.*?\))?(?::| ->) ", line)
        if m:
            left.add(m.group(1))
    kept = list(spec["overrides"])
    for arg in args:
        key = _key(arg)
        if arg in kept:
            kept.remove(arg)
            continue
        owned_key = key.lstrip("+")
        owned_key = verl_import.ALIASES.get(spec["workload"], {}).get(owned_key, owned_key)
        if owned_key in owned.OWNED_KEYS and owned_key != owned.ESTIMATOR:
            name = owned.OWNED_KEYS[owned_key]
            target = verl_import.spec_field(name)
            value = _field(spec, name)
            if value is not None:
                bash_value = check(target, verl_import.hydra_value(arg.partition("=")[2], target.kind), name)
                if value != bash_value:
                    problems.append(f"{name} is {value!r}, bash passes {arg}")
                continue
        if key in commented or key in left or key.lstrip("+") in left or arg in left:
            continue
        problems.append(f"{arg} is not accounted for")
    for flag, name in (("--nnodes", "resources.nnodes"), ("--nproc_per_node", "resources.n_gpus_per_node"),
                       ("--nproc-per-node", "resources.n_gpus_per_node")):
        for word in launcher:
            if word.startswith(flag + "="):
                value = _field(spec, name)
                if value is None and flag not in commented:
                    problems.append(f"{word} is not accounted for")
                elif value is not None and str(value) != word.partition("=")[2]:
                    problems.append(f"{name} is {value}, bash passes {word}")
    for override in kept:  # in the spec, not in bash's argv: only what a --config-name means
        flag = imported.derived.get(override)
        if flag is None or not any(a.strip("'\"") == flag or a.replace("'", "") == flag for a in args):
            problems.append(f"{override} is an override bash does not pass")
    order = [o for o in spec["overrides"] if o not in imported.derived]
    position = 0
    for override in order:
        if override not in args[position:]:
            problems.append(f"{override} is out of bash's order")
            break
        position = args.index(override, position) + 1
    return problems


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_example_imports_faithfully_or_is_refused_in_one_line(script):
    argv = bash_argv(script)
    path = os.path.join(EXAMPLES, script)
    if script in REFUSED:
        with pytest.raises(ScriptError) as err:
            verl_import.convert(read(path), script)
        assert str(err.value).startswith(REFUSED[script]) and "\n" not in str(err.value)
        return
    imported = verl_import.convert(read(path), script)
    assert unfaithful(script, imported, argv) == []


DATA = os.path.join(PROJECT_ROOT, "tests", "unit", "data", "verl_scripts")
OWN = sorted(name for name in os.listdir(DATA) if name.endswith(".sh"))
OWN_ARGS = {"sft_peft.sh": ["--", "8", "/home/user/ckpt"]}


@pytest.mark.parametrize("name", OWN)
def test_the_projects_own_scripts_import_faithfully_each_trainer_command(name):
    """The project's own scripts (shaped after verl's, older and newer) against bash too: each trainer command."""
    path = os.path.join(DATA, name)
    done = subprocess.run(["bash", os.path.join(CORPUS, "argv-of.sh"), path, *OWN_ARGS.get(name, [])],
                          capture_output=True, text=True, timeout=120, check=True)
    launches = json.loads(done.stdout)
    assert launches
    for number, argv in enumerate(launches, 1):
        imported = verl_import.convert(read(path), name, number if len(launches) > 1 else None)
        assert unfaithful(name, imported, argv) == []
