"""A Slurm allocation as a Ray cluster: which node is the head, which are workers, how many GPUs each got.

Control host only (no module ships it): the inventory plugin and the batch entry point (scripts/slurm_batch.py,
on the allocation's first node) import it. Standard library only. What Slurm says comes from `scontrol`
through one runner, so the parsing below is tested with Slurm's real output as text.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess

# A Slurm job id as scontrol takes it (an array task is 12_3).
JOB_ID_RULE = re.compile(r"^[0-9]{1,12}(_[0-9]{1,9})?$")
# Node names and addresses become inventory hosts and ssh targets: plain names and IPv4/IPv6 only.
NODE_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")
ADDR_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
# One GRES of a detail line: name[:type]:count[(IDX:...)], e.g. gpu:a100:4(IDX:0-3).
_GRES = re.compile(r"(?:^|,)([A-Za-z][\w.-]*)(?::([\w.-]+))?:(\d+)(?:\([^)]*\))?")
_GRES_FIELD = re.compile(r"\sGRES=(\S*)")


# The allocation as the batch entry point read it when it started (JSON). Slurm's own view shrinks while a
# cancelled job completes (released nodes leave its NodeList), but Ray must still be stopped on all of them.
PINNED_ENV = "VERL_RAY_SLURM_ALLOCATION"
# States in which the job holds its nodes: COMPLETING is a cancelled or timed-out job whose batch script
# still runs (until KillWait), which is when the batch entry point stops the job and takes Ray down.
HOLDING_STATES = ("RUNNING", "COMPLETING")


class SlurmError(Exception):
    """One line for the user: what Slurm said, or what is wrong with the allocation."""


@dataclasses.dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple  # in Slurm's order: the first is the Ray head
    gpus: dict  # node -> GPUs this job holds on it
    addresses: dict  # node -> NodeAddr (the address ssh and Ray use)

    @property
    def head(self):
        return self.nodes[0]

    @property
    def workers(self):
        return self.nodes[1:]

    def to_json(self):
        return json.dumps({"job_id": self.job_id, "nodes": list(self.nodes), "gpus": self.gpus,
                           "addresses": self.addresses}, sort_keys=True)


def checked_job_id(job_id, what="job_id"):
    job_id = str(job_id or "").strip()
    if not job_id:
        raise SlurmError(f"{what}: no Slurm job id (run inside an allocation, where SLURM_JOB_ID is set, "
                         "or give the job id)")
    if not JOB_ID_RULE.match(job_id):
        raise SlurmError(f"{what}: {job_id[:40]!r} is not a Slurm job id (digits, or 12_3 for an array task)")
    return job_id


def parse_fields(text):
    """key=value words of scontrol's output, the first of each key: free text (a job's Comment, WorkDir, a
    node's Reason) may hold words that look like fields, and scontrol prints it after the fields we read."""
    fields = {}
    for key, value in re.findall(r"(?:^|\s)([A-Za-z_/:]+)=(\S*)", text):
        fields.setdefault(key, value)
    return fields


def _line_fields(text, key):
    """The fields of the first line that starts with key= (scontrol puts JobState, NodeList... each at the
    start of its own line, before any free text)."""
    for line in text.splitlines():
        if line.lstrip().startswith(key + "="):
            return parse_fields(line.split(" JobName=")[0])
    return {}


def gpu_count(gres):
    """GPUs in a GRES string such as 'gpu:4(IDX:0-3)' or 'gpu:a100:2(IDX:0-1),nvme:1'."""
    return sum(int(count) for name, _type, count in _GRES.findall(gres or "") if name == "gpu")


def parse_job(text, job_id):
    """(state, nodelist expression, [(nodes expression, gpus)]) from `scontrol show job -d`."""
    text = text.split("\n\n")[0]  # one record (a heterogeneous job prints one per component)
    ids = _line_fields(text, "JobId")
    array_id = f"{ids.get('ArrayJobId')}_{ids.get('ArrayTaskId')}" if "ArrayTaskId" in ids else None
    if job_id not in (ids.get("JobId"), array_id):
        raise SlurmError(f"job_id: scontrol did not describe Slurm job {job_id}")
    details = []
    for line in text.splitlines():
        if line.lstrip().startswith("Nodes=") and "CPU_IDs=" in line:
            gres = _GRES_FIELD.search(line)
            details.append((parse_fields(line)["Nodes"], gpu_count(gres.group(1) if gres else "")))
    job_gres = _line_fields(text, "JOB_GRES").get("JOB_GRES", "")
    if "gpu" in job_gres and not any(count for _, count in details):
        # Fail closed: a job that holds GPUs must not become a cluster whose workers offer none.
        raise SlurmError(f"job_id: Slurm job {job_id} holds {job_gres} but no node's GPUs could be read from "
                         "`scontrol show job -d` (its detail lines have no GRES=gpu:N)")
    return (_line_fields(text, "JobState").get("JobState", ""), _line_fields(text, "NodeList").get("NodeList", ""),
            details)


def parse_node_addresses(text):
    """NodeName -> NodeAddr from `scontrol show node -o` (one node per line)."""
    addresses = {}
    for line in text.splitlines():
        fields = parse_fields(line)
        if fields.get("NodeName"):
            addresses[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return addresses


def scontrol_runner(scontrol="scontrol", timeout=30):
    """The boundary: run scontrol, return its output, or raise SlurmError with what it said."""
    def run(*args):
        try:
            proc = subprocess.run([scontrol, *args], check=False, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise SlurmError(f"{scontrol} not found: run on a node of the Slurm cluster (a login or compute "
                             "node), or give scontrol's path") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{scontrol} {' '.join(args)}: no answer in {timeout}s: is slurmctld up?") from None
        if proc.returncode != 0:
            said = " ".join((proc.stderr or proc.stdout).split())[:300]
            raise SlurmError(f"{scontrol} {' '.join(args)}: {said or f'exit {proc.returncode}'}")
        return proc.stdout
    return run


def checked_allocation(job_id, nodes, gpus, addresses):
    """An Allocation whose every name, address and count was checked (they become hosts and ssh targets)."""
    nodes = tuple(nodes)
    for node in nodes:
        if not isinstance(node, str) or not NODE_RULE.match(node):
            raise SlurmError(f"Slurm job {job_id}: node name {str(node)[:60]!r} is not a plain host name")
    if len(nodes) < 2:
        raise SlurmError(f"Slurm job {job_id} holds {len(nodes)} node(s): the Ray head takes no work, so an "
                         "allocation needs at least 2 nodes (sbatch/salloc --nodes=2 or more)")
    for node in nodes:
        address = addresses.get(node, node)
        if not isinstance(address, str) or not ADDR_RULE.match(address):
            raise SlurmError(f"Slurm job {job_id}: node {node}'s address {str(address)[:60]!r} is not a "
                             "host name or IP address")
        count = gpus.get(node, 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SlurmError(f"Slurm job {job_id}: node {node}'s GPU count {str(count)[:20]!r} is not a number")
    return Allocation(job_id=job_id, nodes=nodes, gpus={n: gpus.get(n, 0) for n in nodes},
                      addresses={n: addresses.get(n, n) for n in nodes})


def pinned(job_id, text):
    """The allocation the batch entry point pinned (PINNED_ENV), when it is this job's; else None."""
    job_id = checked_job_id(job_id)
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("job_id") != job_id:
            return None
        if not isinstance(doc["nodes"], list) or not all(isinstance(n, str) for n in doc["nodes"]):
            raise TypeError("nodes is not a list of names")
        return checked_allocation(job_id, doc["nodes"], dict(doc["gpus"]), dict(doc["addresses"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise SlurmError(f"{PINNED_ENV}: not an allocation ({type(exc).__name__}); unset it to read Slurm") from None


def allocation(job_id, run):
    """The allocation of a running Slurm job, read through `run` (see scontrol_runner)."""
    job_id = checked_job_id(job_id)
    state, nodelist, details = parse_job(run("show", "job", "-d", job_id), job_id)
    if state not in HOLDING_STATES:
        raise SlurmError(f"job_id: Slurm job {job_id} is {state or 'in an unknown state'}, not RUNNING: "
                         "it holds no nodes to run Ray on")
    expanded = {nodelist: run("show", "hostnames", nodelist).split()}
    nodes = tuple(expanded[nodelist])
    gpus = {}
    for expr, count in details:  # a detail line often names the whole NodeList again: expand each once
        if expr not in expanded:
            expanded[expr] = run("show", "hostnames", expr).split()
        gpus.update(dict.fromkeys(expanded[expr], count))
    checked_allocation(job_id, nodes, gpus, {})  # names and size, before they reach scontrol again
    addresses = parse_node_addresses(run("show", "node", "-o", nodelist))
    return checked_allocation(job_id, nodes, gpus, addresses)


def inventory_vars(alloc):
    """Host variables per node: the address, the worker's GPUs, and the Slurm job it belongs to."""
    hosts = {}
    for node in alloc.nodes:
        hv = {"slurm_job_id": alloc.job_id}
        if alloc.addresses[node] != node:
            hv["ansible_host"] = alloc.addresses[node]
        if node != alloc.head:
            hv["ray_worker_num_gpus"] = alloc.gpus[node]
        hosts[node] = hv
    return hosts
