"""The preflight's kept verdicts: the probe's answer for a job that passed, kept on the shared root under a digest of
everything that answer depends on, so the next submission of the same spec skips the probe (seconds of importing
torch and verl and composing verl's config). <shared_root>/jobs/.preflight/<sha256>.json

The digest covers the job's Python, the probe's own source and request, the trainer and its overrides as composed
(the submission id, which names the record's paths, replaced by a mark) and the job's env (a secret by its name
only). The code a job imports is the read-only snapshot its code_id names on PYTHONPATH, so a new code id is a new
digest. Only an answer that passed is kept, and the checks run again on it with the cluster's nodes of the moment
(a kept answer that no longer passes is set aside and the probe runs). Every file here is data: read as a small
regular file through no symlink and its shape checked; anything else is a miss, never an error.
"""

import hashlib
import json
import os
import stat

from ansible.module_utils.base import conventions, files
from ansible.module_utils.base.redaction import is_secret_name

FOLDER = ".preflight"
CAP = 64 << 10  # a kept answer's size: the probe's facts are a few hundred bytes
KEEP = 500  # kept answers at most; the oldest go first
VERSION = 1


def digest(python, probe_args, env_vars, submission_id):
    """The key of a probe's answer: probe_args are the probe's arguments after the Python (-c, its source, the
    request, the trainer and its overrides)."""
    env = {k: ("<secret>" if is_secret_name(k) else str(v).replace(submission_id, "<id>"))
           for k, v in (env_vars or {}).items()}
    material = {"v": VERSION, "python": python, "args": [a.replace(submission_id, "<id>") for a in probe_args],
                "env": env}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8")).hexdigest()


class Kept:
    """The kept answer of one digest on one shared root."""

    def __init__(self, shared_root, key):
        self.jobs = conventions.paths(shared_root)["jobs"]
        self.folder = os.path.join(self.jobs, FOLDER)
        self.path = os.path.join(self.folder, key + ".json")

    def facts(self):
        """(facts, where) of the kept answer, or None."""
        kept = files.read_json(self.path, base=self.jobs, limit=CAP)
        if not (isinstance(kept, dict) and kept.get("v") == VERSION and isinstance(kept.get("facts"), dict)
                and isinstance(kept.get("where"), str) and len(kept["where"]) <= 200):
            return None
        return kept["facts"], kept["where"]

    def keep(self, facts):
        """Keep the facts of an answer that passed (best effort: a share that refuses costs the next run a probe)."""
        where = facts.get("where")
        kept = {"v": VERSION, "where": where, "facts": {k: v for k, v in facts.items() if k not in ("where", "kept")}}
        try:
            self._ensure()
            files.write_json(self.path, kept, base=self.jobs)
            self._prune()
        except (OSError, files.RecordError):
            pass

    def forget(self):
        try:
            fd = self._open_folder()
        except OSError:
            return
        try:
            os.unlink(os.path.basename(self.path), dir_fd=fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _ensure(self):
        try:
            os.mkdir(self.folder, 0o755)
        except FileExistsError:
            mode = os.lstat(self.folder).st_mode
            if not stat.S_ISDIR(mode):
                raise files.UnsafeFile(f"{self.folder}: is {files.kind(mode)}, not the kept verdicts' folder") from None

    def _open_folder(self):
        return os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def _prune(self):
        """The oldest answers past KEEP go, so the folder stays small however many specs a site tries."""
        fd = self._open_folder()
        try:
            names = [n for n in os.listdir(fd) if n.endswith(".json") and not n.startswith(".")]
            if len(names) <= KEEP:
                return
            aged = sorted((os.stat(n, dir_fd=fd, follow_symlinks=False).st_mtime, n) for n in names)
            for _, name in aged[:len(names) - KEEP]:
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
