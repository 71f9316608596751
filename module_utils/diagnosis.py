"""Why did a job fail? Known signatures in its logs, matched in order, each with a hint.

classify() reads what a failed job's record holds (the driver log, Ray's error logs of its workers
and the raylet logs of their nodes, the job's status) and returns the first signature that matches:
{kind, evidence: {file, line}, hint}. The more specific signatures come first (a CUDA out-of-memory
kills a worker, which then looks like a dead actor). Pure and standard-library only: the module on
the head imports it, and the unit tests run it on real log excerpts.
"""

import collections
import re

# retryable: a retry may cure it (JobSpec retries.on takes only these): the cluster failed the job, not the job
# itself. User errors (hydra_config, import_error, ...) fail the same way again; a stop by a person or by Slurm is
# never retried.
Signature = collections.namedtuple("Signature", "kind patterns hint retryable", defaults=(False,))

# Signature(kind, patterns, hint, retryable). Patterns are searched line by line, case-sensitive, as Ray and verl print them.
SIGNATURES = tuple(Signature(*row) for row in (
    # Set by ray_job itself (the status's reason) when a restarted head no longer knows a job.
    ("head_restarted", (r"^HEAD_RESTARTED$",),
     "Ray's head restarted during the job and forgot it: resubmit it (or resume it from its last whole checkpoint)",
     True),
    # Set by ray_job itself (the status's reason) when it stopped a job that made no progress for its stall_s; the
    # evidence is then the summary of the stacks it took (status.json's stall).
    ("hung", (r"^HUNG$",),
     ("the job made no progress for its stall_s: its stacks are in debug/stacks/ (look for ranks waiting in a "
      "collective while another is stopped or elsewhere); it can resume from its last whole checkpoint"), True),
    # Set by scripts/slurm_batch.py (through job.yml do=stop) when Slurm ends the allocation under the job.
    ("slurm_allocation_ending", (r"^SLURM_ALLOCATION_ENDING$",),
     ("the Slurm allocation ended (its time limit, or scancel) before the job did: ask for more time "
      "(sbatch --time) or resume the job from its last whole checkpoint")),
    ("cuda_oom", (r"CUDA out of memory", r"torch\.(cuda\.)?OutOfMemoryError"),
     "a GPU ran out of memory: lower the micro batch size, enable offload or gradient checkpointing"),
    ("oom_kill", (r"ray\.exceptions\.OutOfMemoryError", r"Task was killed due to the node running low on memory",
                  r"Killed process \d+ .*oom", r"oom-kill", r"memory usage threshold"),
     "a node ran out of host memory and Ray or the kernel killed a worker: lower batch sizes or add memory", True),
    ("hydra_config", (r"Could not override '", r"Key '[^']+' is not in struct", r"ConfigCompositionException",
                      r"omegaconf\.errors\.\w+", r"Could not append to config"),
     "a hydra override names a key the trainer's config does not have: check the overrides against the code_id"),
    ("import_error", (r"ModuleNotFoundError: No module named", r"ImportError: cannot import name"),
     "the code the job runs cannot be imported: check code_id / code_path and the snapshot's contents"),
    ("version_mismatch", (r"Version mismatch", r"Python version mismatch", r"was started with Ray \S+ but"),
     "nodes run different Ray or Python versions: run doctor.yml and install one version everywhere"),
    ("runtime_env_too_large", (r"HTTPRequestEntityTooLarge", r"Request Entity Too Large",
                               r"exceeds the (maximum|limit)", r"Package size .* exceeds"),
     "the runtime_env upload is too large: put the code on the shared root and pick it with code_id"),
    ("nccl_gloo", (r"connectFullMesh failed", r"\bNCCL error\b", r"ncclSystemError", r"ncclInternalError",
                   r"ProcessGroupNCCL.*(timed out|Timeout)", r"Gloo.*(Connection refused|timed out)"),
     "collectives could not connect: run doctor.yml, check NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME and firewalls",
     True),
    ("node_died", (r"has been marked dead", r"NodeDiedError", r"The actor died unexpectedly",
                   r"ActorDiedError", r"JOB_SUPERVISOR_ACTOR_DIED", r"raylet (died|exited)", r"Raylet is terminated",
                   r"node .* (was|is) dead"),
     ("a node (or a worker process on it) died: check the node (ray status, dmesg); the job can resume from its "
     "last whole checkpoint"), True),
    ("resources_pending", (r"PENDING_TIMEOUT", r"JOB_SUPERVISOR_ACTOR_START_TIMEOUT",
                           r"No available node types can fulfill", r"\binfeasible\b", r"Infeasible"),
     "no node offers what the job asks for: check the GPUs and custom resources (worker_node) the spec requests"),
))

_COMPILED = tuple((s.kind, tuple(re.compile(p) for p in s.patterns), s.hint) for s in SIGNATURES)
KINDS = tuple(s.kind for s in SIGNATURES)
HINTS = {s.kind: s.hint for s in SIGNATURES}
RETRYABLE = tuple(s.kind for s in SIGNATURES if s.retryable)
# A line of evidence is cut to this many characters.
EVIDENCE_WIDTH = 300


def classify(sources, status=None):
    """The first known signature in sources [(file, text), ...] and the status fields, or None.

    status may hold reason, error_type and message (status.json); they are searched as the file
    "status.json", after the logs (Ray's message repeats the log's tail; the log is the evidence).
    """
    status = status or {}
    status_text = "\n".join(str(status.get(k) or "") for k in ("reason", "error_type", "message"))
    searched = [*sources, ("status.json", status_text)]
    for kind, patterns, hint in _COMPILED:
        for name, text in searched:
            for line in (text or "").splitlines():
                if any(p.search(line) for p in patterns):
                    line = " ".join(line.split())
                    if len(line) > EVIDENCE_WIDTH:
                        line = line[: EVIDENCE_WIDTH - 3] + "..."
                    return {"kind": kind, "evidence": {"file": name, "line": line}, "hint": hint}
    return None
