"""A regression entry's chain of attempts as its report shows it: the chain's goodput (productive share, lost by cause)
and the nodes its attempts blame, read through the record's model (goodput.py's view). The entry's record is
its last attempt's (library/ray_regression_report.py); the goodput is kept in the first job's record beside it."""

import posixpath

from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.evidence import goodput
from ansible.module_utils.jobs.record.status import RecordError, StatusFile


def _shared_root(record_dir, sid):
    """The shared root whose job_dir of sid record_dir is, or None (then no other record is read)."""
    if not isinstance(record_dir, str):
        return None
    root = posixpath.dirname(posixpath.dirname(record_dir.rstrip("/")))
    return root if conventions.job_dir(root, sid) == record_dir.rstrip("/") else None


def entry_chain(status, record_dir):
    """report.json's `chain` of an entry: goodput.view's goodput, account, attempts, blame and unreadable, or None for
    a job of one attempt that blames no node (nothing to say). status: the entry's status.json as a dict."""
    if not isinstance(status, dict):
        return None
    try:
        own = StatusFile.from_dict(status)
    except (RecordError, RecursionError):
        # The library reads it through the model (an untrusted one is rebuilt as UNKNOWN and the report says why): a
        # dict the model refuses is no record's, and has no chain.
        return None
    sid = own.submission_id
    first = own.attempt_of if conventions.matches(conventions.ID_RULE, own.attempt_of) else sid
    shared_root = _shared_root(record_dir, sid)
    if (first == sid and not own.attempts) or shared_root is None:
        blame = [{"node_ip": b.node_ip, "why": b.why, "attempt": sid} for b in own.blame][:goodput.BLAME_SHOWN]
        return {"goodput": "", "account": None, "attempts": 1, "blame": blame, "unreadable": []} if blame else None
    found = goodput.view(shared_root, first, known={} if first == sid else {sid: (own, None)})
    return {k: found[k] for k in ("goodput", "account", "attempts", "blame", "unreadable")}


def section(entries, md):
    """summary.md's `## Goodput and blame` lines (md: report.md, the one way job text becomes Markdown), or []."""
    lines = []
    for entry in entries:
        found = entry.get("chain") if isinstance(entry.get("chain"), dict) else {}
        said = [found["goodput"]] if isinstance(found.get("goodput"), str) and found["goodput"] else []
        for blame in found.get("blame") if isinstance(found.get("blame"), list) else []:
            if isinstance(blame, dict):
                said.append(f"blamed: {blame.get('node_ip')}: {blame.get('why')} (in {blame.get('attempt')})")
        unread = found.get("unreadable") if isinstance(found.get("unreadable"), list) else []
        said += [f"unreadable: {why}" for why in unread if isinstance(why, str)]
        if said:
            lines.append(f"- **{md(entry.get('name'))}**: {md('; '.join(said))}")
    return ["", "## Goodput and blame", ""] + lines if lines else []
