"""Why did a job fail? Known signatures in its logs, matched in order, each with a hint.

classify() reads what a failed job's record holds (the driver log, Ray's error logs of its workers
and the raylet logs of their nodes, the job's status) and returns the first signature that matches:
{kind, evidence: {file, line}, hint}. The more specific signatures come first (a CUDA out-of-memory
kills a worker, which then looks like a dead actor). Pure and standard-library only: the module on
the head imports it, and the unit tests run it on real log excerpts.

Logs are untrusted text: classify is linear in their length whatever their lines' lengths. A pattern never
repeats without a bound before more text it must find (`A.*B` is written as two patterns, A then B, each searched
once: see _compile), and a line longer than 2 * WINDOW is searched in its first and last WINDOW characters only.
"""

import collections
import re

from ansible.module_utils.base.conventions import one_line

# retryable: a retry may cure it (JobSpec retries.on takes only these): the cluster failed the job, not the job
# itself. User errors (hydra_config, import_error, ...) fail the same way again; a stop by a person or by Slurm is
# never retried.
Signature = collections.namedtuple("Signature", "kind patterns hint retryable", defaults=(False,))

# Signature(kind, patterns, hint, retryable). Patterns are searched line by line, case-sensitive, as Ray and verl
# print them; ".*" in a pattern splits it into parts found one after the other (see _compile).
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
    # Ray before 2.55 said "Task was killed ...", 2.60's raylet "N worker(s) were killed ..." (the node's IP follows).
    ("oom_kill", (r"ray\.exceptions\.OutOfMemoryError", r"Task was killed due to the node running low on memory",
                  r"were killed due to the node running low on memory",
                  r"Killed process \d+ .*oom", r"oom-kill", r"memory usage threshold"),
     "a node ran out of host memory and Ray or the kernel killed a worker: lower batch sizes or add memory", True),
    ("hydra_config", (r"Could not override '", r"Key '[^'\n]{1,500}' is not in struct", r"ConfigCompositionException",
                      r"omegaconf\.errors\.\w+", r"Could not append to config"),
     "a hydra override names a key the trainer's config does not have: check the overrides against the code_id"),
    ("import_error", (r"ModuleNotFoundError: No module named", r"ImportError: cannot import name"),
     "the code the job runs cannot be imported: check code_id / code_path and the snapshot's contents"),
    ("version_mismatch", (r"Version mismatch", r"Python version mismatch", r"was started with Ray \S+ but"),
     "nodes run different Ray or Python versions: run doctor.yml and install one version everywhere"),
    ("runtime_env_too_large", (r"HTTPRequestEntityTooLarge", r"Request Entity Too Large",
                               r"exceeds the (maximum|limit)", r"Package size .* exceeds"),
     "the runtime_env upload is too large: put the code on the shared root and pick it with code_id"),
    # gloo's pair.cc errors ("Connection closed by peer ...") are not a kind of their own: a rank whose peer's node
    # died logs them too, and signatures are tried in this order (node_died must win). blame.py reads the peer.
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


class _Parts:
    """A pattern `A.*B.*C` as its parts, each searched once from where the one before ended: the same lines match,
    in linear time (a regex `A.*B` tries `.*` from every A: quadratic on a line of many As and no B)."""

    def __init__(self, pattern):
        self.parts = tuple(re.compile(p) for p in pattern.split(".*"))

    def search(self, line):
        at = 0
        for part in self.parts:
            found = part.search(line, at)
            if found is None:
                return None
            at = found.end()
        return found


_COMPILED = tuple((s.kind, tuple(_Parts(p) for p in s.patterns), s.hint) for s in SIGNATURES)
KINDS = tuple(s.kind for s in SIGNATURES)
HINTS = {s.kind: s.hint for s in SIGNATURES}
RETRYABLE = tuple(s.kind for s in SIGNATURES if s.retryable)
# A line of evidence is cut to this many characters.
EVIDENCE_WIDTH = 300
# A longer line than twice this is searched in its first and its last WINDOW characters.
WINDOW = 4096


def _windows(text):
    """Each line of text as the patterns see it: (what to search, the line) (a long line: its two ends)."""
    for line in (text or "").splitlines():
        if len(line) <= 2 * WINDOW:
            yield (line,), line
        else:
            yield (line[:WINDOW], line[-WINDOW:]), line


def classify(sources, status=None):
    """The first known signature in sources [(file, text), ...] and the status fields, or None.

    status may hold reason, error_type and message (status.json); they are searched as the file
    "status.json", after the logs (Ray's message repeats the log's tail; the log is the evidence).
    """
    status = status or {}
    status_text = "\n".join(str(status.get(k) or "") for k in ("reason", "error_type", "message"))
    searched = [(name, list(_windows(text))) for name, text in [*sources, ("status.json", status_text)]]
    for kind, patterns, hint in _COMPILED:
        for name, lines in searched:
            for parts, line in lines:
                if any(p.search(part) for p in patterns for part in parts):
                    line = one_line(line[: 4 * EVIDENCE_WIDTH], EVIDENCE_WIDTH)
                    return {"kind": kind, "evidence": {"file": name, "line": line}, "hint": hint}
    return None
