"""A retry goes around the workers its failed attempt blames: they are cordoned first (cordons/cordons.py, as cordon.yml
does, `by: retry`), Ray holds them (cordons/cordons.py), and the next attempt is submitted only when enough healthy
workers remain for the job's resources. Otherwise the job stays FAILED with its blame and one line says why, instead
of landing on the same node again. Fail closed: a blamed worker Ray does not hold yet (the stopped attempt's
processes still keep its GPUs) is not retried onto either.

Automatic cordons are bounded, since each takes a worker out of service until a person gives it back: only a
worker Ray lists (with worker_node), at most CHAIN_MAX per chain of attempts, and never so many that fewer than half
the workers stay uncordoned. Past that a person decides (cordon.yml by hand, then do=resume)."""

from ansible.module_utils.base import conventions
from ansible.module_utils.cordons import cordons
from ansible.module_utils.jobs.record.job import Failed
from ansible.module_utils.jobs.record.record import read_json, status_of
from ansible.module_utils.jobs.submission import attempts

HOLD_WAIT_S = 60  # how long a stopped attempt's processes may keep a blamed worker's GPUs before the retry gives up
CHAIN_MAX = 2  # automatic cordons over a chain of attempts: more blamed workers than that is a person's call


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
    return sorted(ip for ip, node in cordons.alive_workers(nodes).items()
                  if ip not in cordoned and float((node.get("resources_total") or {}).get("GPU") or 0) >= gpus)


def workers(nodes):
    """The addresses Ray lists as workers (a node carrying worker_node, in any state: a dead worker is one)."""
    return {ip for n in nodes if (ip := cordons.canonical(n.get("node_ip")))
            and "worker_node" in (n.get("resources_total") or {})}


def chain_cordoned(config, sid):
    """The workers the retries of sid's chain cordoned so far (each attempt's status.json `cordoned`)."""
    found = set()
    for member in attempts.chain(config, sid)[1]:
        status = status_of(config.shared_root, member)
        found |= set(status.cordoned or ()) if status is not None else set()
    return found


def bounded(sid, fresh, cordoned, all_workers, chain, blame_line):
    """None when cordoning fresh keeps within the bounds, else the one line that says which bound and what to do."""
    if not fresh:
        return None
    left = all_workers - cordoned - set(fresh)
    if len(chain | set(fresh)) > CHAIN_MAX:
        bound = (f"its chain would have {len(chain | set(fresh))} automatic cordons (at most {CHAIN_MAX}: "
                 f"{', '.join(sorted(chain)) or 'none'} so far)")
    elif 2 * len(left) < len(all_workers):
        bound = (f"cordoning {', '.join(fresh)} would leave {len(left)} of {len(all_workers)} workers uncordoned "
                 "(at least half stay)")
    else:
        return None
    return (f"{sid}: not retried: {bound}; it stays FAILED, blamed: {blame_line}. A person decides: cordon.yml -e "
            f"host=... for each, then job.yml -e id={sid} -e do=resume")


def go_around(module, job, status):
    """Before the next attempt of this final job (status: its record's), cordon the workers its blame names (its
    spec's retries.cordon, on unless false; each once: a worker a person gave back stays so) and say whether the
    attempt can run on the healthy ones: the result's `progress` says what was cordoned. Failed (one line) when it
    cannot; the caller (chain.py) then leaves the job FAILED for a person to decide. A job that did not fail (a person
    stopped it) blames no one: only the healthy workers count."""
    config, url = job.config, job.config.dashboard_url
    nodes = job.client.nodes()
    known = {cordons.canonical(n.get("node_ip")): n for n in nodes if cordons.canonical(n.get("node_ip"))}
    try:
        found, problems = cordons.read_all(config.shared_root, whole=True)
    except cordons.CordonError as exc:
        raise Failed(f"{job.sid}: not retried: {exc}") from None
    blamed = blamed_ips(status) if status.state == "FAILED" and status.retries.cordon is not False else []
    # Only a worker Ray lists is cordoned by a retry: a head offers no work to keep off, and an address Ray does not
    # list (a node gone from its table, one on another network) is no lever a failed attempt may pull. A worker
    # already cordoned (by a person, by another run) needs nothing more.
    all_workers = workers(nodes)
    fresh = [ip for ip in blamed if ip in all_workers and ip not in status.cordoned and ip not in found]
    why = {b.node_ip: b.why for b in status.blame or ()}
    refused = bounded(job.sid, fresh, set(found) & all_workers, all_workers, chain_cordoned(config, job.sid),
                      ", ".join(f"{b.node_ip} ({b.why})" for b in status.blame or ()))
    if refused:
        raise Failed(refused, **job.result(status, "", cordoned=[], healthy=[], problems=problems))
    if fresh and not module.check_mode:
        for ip in fresh:
            cordons.add(config.shared_root, cordons.make(
                ip, by="retry", why=f"blamed by {job.sid}: {why.get(ip) or 'its evidence'}", job=job.sid))
        job.record.note_cordoned(fresh)
    found, problems = cordons.read_all(config.shared_root)
    changes = cordons.sync(lambda: cordons.cordoned(config.shared_root), nodes,
                           lambda: cordons.list_groups(url), config.address, check=module.check_mode)
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
    held = result["held"] = (cordons.wait_held(lambda: cordons.list_groups(url), waited, HOLD_WAIT_S,
                                               nodes=nodes) if waited and not module.check_mode else {})
    waiting = sorted(ip for ip, state in held.items() if state != "CREATED")
    if waiting:
        raise Failed(f"{job.sid}: not retried: Ray does not hold the cordoned {', '.join(waiting)} after "
                     f"{HOLD_WAIT_S} s (the stopped attempt's processes still keep its GPUs); it stays FAILED: "
                     f"job.yml -e id={job.sid} -e do=resume once status.yml shows it held", **result)
    if fresh:
        result["progress"] = conventions.one_line(
            f"{job.sid}: cordoned {named} (blamed) before its next attempt, which may run on {', '.join(free)}", 400)
    return result
