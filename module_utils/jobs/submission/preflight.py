"""The preflight of a verl trainer job, before it is submitted: the probe (module_utils/verl/probe.py) in the job's
own Python, then the checks of module_utils/jobs/submission/preflight_checks.py.

Where the probe runs: on the head, with ray_config.python and the job's environment, as the compose always ran (no
second process, so no time added); when that Python cannot import the job's libraries (the probe says so with
verl_probe.MISSING_RC before importing anything, in a few milliseconds) or does not exist, on one ALIVE worker: a
Ray task there (0 CPUs, pinned to the node, the job's own runtime_env) runs the same command and returns its exit
code and output. The task's driver joins the cluster in a namespace under Ray's `_ray_internal_` prefix, whose
drivers Ray's job list (job API and state API alike) leaves out, so no entry is added beside the jobs the records
are keyed by.
"""

import contextlib
import inspect
import json
import os
import shlex
import sys
import tempfile

from ansible.module_utils.base.redaction import secret_names
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.submission import preflight_checks as checks
from ansible.module_utils.jobs.submission import verdicts
from ansible.module_utils.jobspec import render
from ansible.module_utils.jobspec.model import as_ray_config
from ansible.module_utils.verl import probe as verl_probe

REMOTE_TIMEOUT_S = 300  # a worker's import of torch and verl and the compose: about 20 s on a busy GPU host
# Ray leaves drivers of a namespace under this prefix (ray._raylet.RAY_INTERNAL_NAMESPACE_PREFIX, "_ray_internal_")
# out of its job list; a unit test holds the two together.
NAMESPACE = "_ray_internal_ray_verl_preflight"
_OUTPUT_LINES = 6


def source():
    """The probe's source, passed to the job's Python with -c (nothing of it needs to be installed there)."""
    return inspect.getsource(verl_probe)


def job_env(runtime_env):
    env = dict(os.environ)
    env.update(runtime_env.get("env_vars", {}))
    env.pop("RAY_ADDRESS", None)
    return env


def run(module, spec, config, runtime_env, resume_path=None, nodes=None):
    """Compose the job's config and check it, in the job's Python; raise Failed with one line, or return the facts
    (`kept`: they are an earlier run's for the same code, trainer, overrides, env and files read: verdicts.py)."""
    compose = render.compose_command(spec, config, resume_path)
    if compose is None:
        return None
    ray_config = as_ray_config(config)
    python = shlex.split(ray_config.python)
    probe = [*python, "-c", source(), json.dumps(checks.request(spec.workload)), *compose[len(python) + 1:]]
    keyed = verdicts.key(spec, config, resume_path, probe[len(python):len(python) + 3],
                         secret_names(ray_config.secret_env_names))
    kept = keyed and verdicts.Kept(ray_config.shared_root, keyed)
    facts = kept and kept_facts(spec, kept, nodes, compose, module.check_mode)
    if facts:
        return facts
    answer = on_head(module, probe, job_env(runtime_env))
    if isinstance(answer, str):
        answer = on_worker(config, probe, runtime_env, nodes, spec.submission_id, answer)
    facts, problem, local = judge(spec, answer, nodes, compose)
    if local and facts["where"] == "the head" and not carries_work(nodes) and pick_worker(nodes):
        # The verdict came from the head's own libraries and files (flash_attn, verl's platform, the model verl's
        # checks read), which need not be the workers': a worker, where the job runs, decides before anything is
        # refused. Overrides verl's config refuses are the job's verl's wherever it runs.
        answer = on_worker(config, probe, runtime_env, nodes, spec.submission_id,
                           f"it would refuse the job ({problem.split(': ', 1)[-1][:120]}...), and jobs run on workers")
        facts, problem, local = judge(spec, answer, nodes, compose)
    if problem:
        raise Failed(problem, compose_cmd=" ".join(compose))
    # Only the head's answer: the key sees the head's files, which need not be a worker's.
    if kept and facts["where"] == "the head" and not module.check_mode:  # --check changes nothing, on the share neither
        kept.keep(facts)
    return facts


def kept_facts(spec, kept, nodes, compose, check_mode):
    """The facts of a kept answer that still passes the checks, or None (then the probe runs)."""
    found = kept.facts()
    if found is None:
        return None
    try:
        facts, problem, _ = judge(spec, (0, f"{verl_probe.MARK} {json.dumps(found[0])}", "", found[1]), nodes, compose)
    except Exception:  # noqa: BLE001 - kept facts of a shape the checks break on are a miss, never an error
        problem = "unusable"
    if not problem:
        return dict(facts, kept=True)
    if not check_mode:
        kept.forget()  # what passed then does not now (the cluster changed): the probe decides afresh
    return None


def judge(spec, answer, nodes, compose):
    """(facts, the one-line refusal of every problem found or None, whether one of them depends on the node the
    probe ran on) from one run of the probe; Failed when verl refused the config and no override explains it."""
    rc_, out, err, where = answer
    if rc_ != 0:
        lines = [line.strip() for line in (err or out or "").strip().splitlines() if line.strip()]
        raise Failed(f"{spec.submission_id}: verl rejected the job's config on {where} (nothing submitted): "
                     f"{' | '.join(lines[-_OUTPUT_LINES:])}", compose_cmd=" ".join(compose))
    facts = parse(out)
    if facts is None:
        raise Failed(f"{spec.submission_id}: the preflight on {where} printed no {verl_probe.MARK} line "
                     f"(nothing submitted); -e preflight=false skips it", compose_cmd=" ".join(compose))
    facts["where"] = where
    config = [*checks.refused(facts), checks.compose_error(facts), *checks.batches(spec.workload, facts)]
    local = [*checks.startup(facts), checks.attention(spec.workload, facts, where),
             checks.placement(spec.workload, facts, spec.resources, nodes)]
    return facts, checks.verdict(spec.submission_id, where, config + local), any(local)


def parse(out):
    """The probe's facts (its last MARK line), or None."""
    for line in reversed((out or "").splitlines()):
        if line.startswith(verl_probe.MARK + " "):
            try:
                facts = json.loads(line[len(verl_probe.MARK) + 1:])
            except ValueError:
                return None
            return facts if isinstance(facts, dict) else None
    return None


def on_head(module, probe, env):
    """(rc, out, err, "the head"), or a string saying why the head's Python is not the job's."""
    with tempfile.TemporaryDirectory(prefix="verl-compose-") as cwd:
        try:
            rc_, out, err = module.run_command(probe, cwd=cwd, environ_update=env, handle_exceptions=False)
        except OSError as exc:
            return f"{probe[0]}: {exc.strerror or exc}"
    if rc_ == verl_probe.MISSING_RC:
        lines = [line for line in (err or "").splitlines() if line.startswith(verl_probe.MARK + "-missing: ")]
        return lines[-1].split(": ", 1)[1] if lines else f"{probe[0]} lacks the job's libraries"
    return rc_, out, err, "the head"


def _workers(nodes):
    """The ALIVE nodes jobs run on: those carrying worker_node (a one-box site's head among them)."""
    return [n for n in nodes or () if n.get("state") == "ALIVE" and "worker_node" in (n.get("resources_total") or {})]


def carries_work(nodes):
    """Whether the head is one of them (a one-box site): its verdict is then a worker's."""
    return any(n.get("is_head_node") for n in _workers(nodes))


def pick_worker(nodes):
    """The ALIVE worker the probe runs on: the first by IP, or None."""
    return min(_workers(nodes), key=lambda n: str(n.get("node_ip")), default=None)


def on_worker(config, probe, runtime_env, nodes, sid, why, timeout_s=REMOTE_TIMEOUT_S, ray_module=None):
    """Run the probe on a worker as a Ray task; (rc, out, err, "worker <ip>")."""
    node = pick_worker(nodes)
    if node is None:
        raise Failed(f"{sid}: the head cannot compose the job's config ({why}) and no ALIVE worker can: "
                     "run up.yml, or -e preflight=false to skip the preflight (nothing submitted)")
    where = f"{'the head, a worker here,' if node.get('is_head_node') else 'worker'} {node.get('node_ip')}"
    late = (f"{sid}: the preflight on {where} did not finish in {timeout_s} s (the head's Python cannot: {why}): "
            "is the node busy or its Python slow to import verl? -e preflight=false skips it (nothing submitted)")
    ray = ray_module or _import_ray()
    with contextlib.redirect_stdout(sys.stderr):  # the module's stdout is its JSON answer
        try:
            ray.init(address=as_ray_config(config).address, namespace=NAMESPACE, log_to_driver=False,
                     logging_level="ERROR")
            # coreutils' timeout ends the probe itself (a cancelled task would leave its child running).
            ref = _remote_run(ray, node, runtime_env).remote(
                ["timeout", "-k", "10", str(timeout_s), *probe], capture_output=True, text=True, cwd="/")
            try:
                done = ray.get(ref, timeout=timeout_s + 60)  # + the task's placement and its runtime_env
            except ray.exceptions.GetTimeoutError:
                ray.cancel(ref, force=True)
                raise Failed(late) from None
        except Failed:
            raise
        except Exception as exc:  # noqa: BLE001 - Ray's own errors, one line each
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
            raise Failed(f"{sid}: the preflight could not run on {where} (the head's Python cannot: {why}): "
                         f"{type(exc).__name__}: {first}; -e preflight=false skips it (nothing submitted)") from None
        finally:
            with contextlib.suppress(Exception):
                ray.shutdown()
    if done.returncode in (124, 137):
        raise Failed(late)
    return done.returncode, done.stdout, done.stderr, where


def _import_ray():
    import ray.exceptions  # binds ray; ray.exceptions.GetTimeoutError is caught above

    return ray


def _remote_run(ray, node, runtime_env):
    """subprocess.run as a Ray task on `node`: it needs nothing of ours on the worker (pickled by reference), holds
    no CPU (a busy worker still answers), and runs in the job's runtime_env (its env vars, PYTHONPATH)."""
    import subprocess

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(subprocess.run).options(
        num_cpus=0, max_retries=0, runtime_env=runtime_env,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False))
