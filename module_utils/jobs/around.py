"""A retry goes around the workers its failed attempt blames: they are cordoned first (base/cordons.py, as cordon.yml
does, `by: retry`), Ray holds them (base/cordon_hold.py), and the next attempt is submitted only when enough healthy
workers remain for the job's resources. Otherwise the job stays FAILED with its blame and one line says why, instead
of landing on the same node again. Fail closed: a blamed worker Ray does not hold yet (the stopped attempt's
processes still keep its GPUs) is not retried onto either."""

from ansible.module_utils.base import conventions, cordon_hold, cordons
from ansible.module_utils.jobs.follow import refresh
from ansible.module_utils.jobs.job import Failed
from ansible.module_utils.jobs.record import read_json

HOLD_WAIT_S = 60  # how long a stopped attempt's processes may keep a blamed worker's GPUs before the retry gives up


def blamed_ips(status):
    """The addresses the attempt's blame names, strongest first, each once."""
    found = []
    for blamed in status.blame or ():
        try:
            ip = cordons.node_ip(blamed.node_ip)
        except cordons.CordonError:
            continue
        if ip not in found:
            found.append(ip)
    return found


def needs(spec):
    """(nodes, GPUs per node) the job's resources ask for, read from its job_spec.json (1, 0 when unreadable)."""
    res = spec.get("resources") if isinstance(spec, dict) else None
    res = res if isinstance(res, dict) else {}
    nodes, gpus = res.get("nnodes"), res.get("n_gpus_per_node")
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (nodes, gpus))
    return (max(nodes, 1), gpus) if ok else (1, 0)


def healthy(nodes, cordoned, gpus):
    """The ALIVE workers, not cordoned, that offer at least `gpus` GPUs: where the next attempt may run."""
    return sorted(ip for ip, node in cordon_hold.alive_workers(nodes).items()
                  if ip not in cordoned and float((node.get("resources_total") or {}).get("GPU") or 0) >= gpus)


def around_action(module, job):
    """action=around: cordon the workers this final, failed job's blame names (its spec's retries.cordon, on unless
    false) and say whether its next attempt can run on the healthy ones; Failed (one line) when it cannot."""
    status, _, _ = refresh(module, job)
    if not status.final or status.state != "FAILED":
        raise Failed(f"{job.sid}: {status.state}: only a failed job's next attempt goes around its blamed workers")
    config, url = job.config, job.config.dashboard_url
    nodes = job.client.nodes()
    # Only a worker is cordoned: a blamed head (a one-box site's aside) offers no work to keep off.
    workers = {n.get("node_ip") for n in nodes if "worker_node" in (n.get("resources_total") or {})}
    ips = [ip for ip in blamed_ips(status) if ip in workers] if status.retries.cordon is not False else []
    why = {b.node_ip: b.why for b in status.blame or ()}
    made = []
    for ip in ips:
        entry = cordons.make(ip, by="retry", why=f"blamed by {job.sid}: {why.get(ip) or 'its evidence'}", job=job.sid)
        if not module.check_mode and cordons.add(config.shared_root, entry)[0]:
            made.append(ip)
    found, problems = cordons.read_all(config.shared_root)
    changes = cordon_hold.plan(set(found) | set(ips), nodes, cordon_hold.list_groups(url))
    if not module.check_mode:
        cordon_hold.apply(config.address, changes)
    want_nodes, want_gpus = needs(read_json(job.rec["job_spec"], base=job.rec["dir"]))
    free = healthy(nodes, set(found) | set(ips), want_gpus)
    result = job.result(status, "", cordoned=ips, cordoned_now=made, healthy=free, problems=problems)
    blamed = ", ".join(ips) or "none"
    if len(free) < want_nodes:
        raise Failed(f"{job.sid}: not retried: {len(free)} healthy worker(s) ({', '.join(free) or 'none'}) for its "
                     f"{want_nodes} node(s) of {want_gpus} GPU(s), with {blamed} cordoned for its blame; it stays "
                     "FAILED. Give a worker back (cordon.yml -e host=... -e state=absent) or add one, then "
                     f"job.yml -e id={job.sid} -e do=resume", **result)
    waited = [ip for ip in ips if ip not in changes["absent"]]  # a dead node takes no work: nothing to hold
    held = result["held"] = (cordon_hold.wait_held(lambda: cordon_hold.list_groups(url), waited, HOLD_WAIT_S)
                             if waited and not module.check_mode else {})
    waiting = sorted(ip for ip, state in held.items() if state != "CREATED")
    if waiting:
        raise Failed(f"{job.sid}: not retried: Ray does not hold the cordoned {', '.join(waiting)} after "
                     f"{HOLD_WAIT_S} s (the stopped attempt's processes still keep its GPUs); it stays FAILED: "
                     f"job.yml -e id={job.sid} -e do=resume once status.yml shows it held", **result)
    result["progress"] = (f"{job.sid}: cordoned {blamed} (blamed) before its next attempt, which may run on "
                          f"{', '.join(free)}" if ips else "")
    result["progress"] = conventions.one_line(result["progress"], 400)
    return result
