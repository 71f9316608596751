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
    """action=around: before the next attempt of this final job, cordon the workers its blame names (its spec's
    retries.cordon, on unless false; each once: a worker a person gave back stays so) and say whether the attempt can
    run on the healthy ones; Failed (one line) when it cannot. A job that did not fail (a person stopped it) blames no
    one: only the healthy workers are counted."""
    status, _, _ = refresh(module, job)
    if not status.final or status.state == "SUCCEEDED":
        raise Failed(f"{job.sid}: {status.state}: nothing to resume")
    config, url = job.config, job.config.dashboard_url
    nodes = job.client.nodes()
    known = {cordons.canonical(n.get("node_ip")): n for n in nodes if cordons.canonical(n.get("node_ip"))}
    blamed = blamed_ips(status) if status.state == "FAILED" and status.retries.cordon is not False else []
    # A blamed address Ray lists without worker_node (a head) offers no work to keep off; one Ray does not list at all
    # (a node gone from its table, an address on another network) is cordoned all the same: held if it joins.
    ips = [ip for ip in blamed if ip not in known or "worker_node" in (known[ip].get("resources_total") or {})]
    fresh = [ip for ip in ips if ip not in status.cordoned]
    why = {b.node_ip: b.why for b in status.blame or ()}
    if fresh and not module.check_mode:
        for ip in fresh:
            cordons.add(config.shared_root, cordons.make(
                ip, by="retry", why=f"blamed by {job.sid}: {why.get(ip) or 'its evidence'}", job=job.sid))
        job.record.note_cordoned(fresh)
    found, problems = cordons.read_all(config.shared_root)
    changes = cordon_hold.sync(lambda: set(cordons.read_all(config.shared_root)[0]), nodes,
                               lambda: cordon_hold.list_groups(url), config.address, check=module.check_mode)
    want_nodes, want_gpus = needs(read_json(job.rec["job_spec"], base=job.rec["dir"]))
    free = healthy(nodes, set(found) | set(fresh), want_gpus)
    result = job.result(status, "", cordoned=fresh, healthy=free, problems=problems)
    named = ", ".join(fresh) or "none"
    if len(free) < want_nodes:
        raise Failed(f"{job.sid}: not retried: {len(free)} healthy worker(s) ({', '.join(free) or 'none'}) for its "
                     f"{want_nodes} node(s) of {want_gpus} GPU(s), with {named} cordoned for its blame; it stays "
                     f"{status.state}. Give a worker back (cordon.yml -e host=... -e state=absent) or add one, then "
                     f"job.yml -e id={job.sid} -e do=resume", **result)
    waited = [ip for ip in fresh if ip in known and ip not in changes["absent"]]  # a dead node takes no work
    held = result["held"] = (cordon_hold.wait_held(lambda: cordon_hold.list_groups(url), waited, HOLD_WAIT_S,
                                                   nodes=nodes) if waited and not module.check_mode else {})
    waiting = sorted(ip for ip, state in held.items() if state != "CREATED")
    if waiting:
        raise Failed(f"{job.sid}: not retried: Ray does not hold the cordoned {', '.join(waiting)} after "
                     f"{HOLD_WAIT_S} s (the stopped attempt's processes still keep its GPUs); it stays FAILED: "
                     f"job.yml -e id={job.sid} -e do=resume once status.yml shows it held", **result)
    unknown = [ip for ip in fresh if ip not in known]
    if fresh:
        result["progress"] = conventions.one_line(
            f"{job.sid}: cordoned {named} (blamed) before its next attempt, which may run on {', '.join(free)}"
            + (f" ({', '.join(unknown)}: no node Ray lists; held if it joins)" if unknown else ""), 400)
    return result

