"""Ray's job API (JobSubmissionClient) and state API, as the job package needs them.

One place knows how Ray says "no such job" and how its objects become plain dicts (ray_cluster.job_summary).
"""

import re

from ansible.module_utils.base import ray_cluster as rc

# Ray's SDK raises RuntimeError("Request failed with status code 404: ...") for an id it does not know
# (dashboard_sdk._raise_error); older versions said "... does not exist".
_NOT_FOUND = re.compile(r"^Request failed with status code 404\b|\bdoes not exist\b")


# How a ray_job result says the head cannot be reached, the one reading of it (the follower's wait through an outage,
# scripts/watch.py's --heal): the module's one line when Ray's job API did not answer (runner.connection_problem), or
# Ansible's own word for a module whose process died, as it does on a head that goes down under it.
UNREACHABLE = "cannot talk to Ray's job API"
MODULE_DIED = "MODULE FAILURE"


def head_down(said):
    """Whether a failed ray_job result's message (or a pass's whole output) says the head cannot be reached."""
    text = str(said or "")
    return UNREACHABLE in text or MODULE_DIED in text


def is_not_found(exc):
    return isinstance(exc, RuntimeError) and _NOT_FOUND.search(str(exc)) is not None


class JobClient:
    """The cluster as one job sees it: its JobInfo, logs, stop and submit, and the cluster's state."""

    def __init__(self, dashboard_url, token, client=None):
        self.url = dashboard_url
        self.token = token
        self.sdk = client or rc.job_client(dashboard_url, token)
        self._driver_nodes = {}

    def info(self, sid):
        """Ray's JobInfo of sid, or None when Ray does not know it."""
        try:
            return self.sdk.get_job_info(sid)
        except RuntimeError as exc:
            if is_not_found(exc):
                return None
            raise

    def logs(self, sid):
        """The driver log whole (Ray's job API): only when the state API's stream cannot serve it."""
        return self.sdk.get_job_logs(sid)

    def log_tail(self, sid, lines):
        """The driver log's last lines (Ray's state API, which needs the driver's node)."""
        return rc.job_log_tail(self.url, sid, self.driver_node(sid), lines)

    def log_stream(self, sid):
        """The driver log whole, as byte chunks (Ray's state API)."""
        return rc.job_log_chunks(self.url, sid, self.driver_node(sid))

    def driver_node(self, sid):
        """The node the job's driver runs on (it never moves): asked once per client; LookupError before it has one."""
        if sid not in self._driver_nodes:
            info = self.info(sid)
            node = summary(info)["driver_node_id"] if info is not None else None
            if not node:
                raise LookupError(f"{sid}: no driver node yet")
            self._driver_nodes[sid] = node
        return self._driver_nodes[sid]

    def stop(self, sid):
        return self.sdk.stop_job(sid)

    def submit(self, **kwargs):
        return self.sdk.submit_job(**kwargs)

    def jobs(self):
        """Every job Ray knows, as job_summary dicts."""
        return [rc.job_summary(j) for j in self.sdk.list_jobs()]

    def nodes(self):
        return rc.list_nodes(self.url)

    def status_text(self):
        return rc.cluster_status_text(self.url, self.token)

    def actors(self):
        return rc.list_actor_summaries(self.url)

    def job_logs(self, node_ids, job_id):
        return rc.collect_job_logs(self.url, node_ids, job_id)

    def worker_log_names(self, node_id, job_id):
        """The names of a node's logs of the job's own Ray workers (worker-*-<job_id>-*), as Ray lists them."""
        listed = rc.node_logs(self.url, node_id, glob=f"worker-*-{job_id}-*")
        return [name for names in listed.values() if isinstance(names, list) for name in names]

    def worker_log_tail(self, node_id, name, lines, max_bytes):
        """A log's last `lines` lines on a node, at most its last max_bytes."""
        return rc.node_log_tail(self.url, node_id, name, lines, max_bytes=max_bytes)

    def head_started_ms(self, nodes=None):
        """When the head's node started, or None when that cannot be told (not exactly one ALIVE head).
        nodes: a node list the caller already has (else one is asked for)."""
        heads = [n for n in (self.nodes() if nodes is None else nodes) if n["is_head_node"] and n["state"] == "ALIVE"]
        return heads[0].get("start_time_ms") if len(heads) == 1 else None


def summary(info):
    """A JobInfo as a plain dict (ray_cluster.job_summary)."""
    return rc.job_summary(info)


def is_terminal(info):
    return info is not None and summary(info)["status"] in rc.TERMINAL_JOB_STATES
