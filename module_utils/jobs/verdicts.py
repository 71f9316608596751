"""The preflight's kept verdicts: the probe's answer for a job that passed, kept on the shared root under a digest of
everything that answer depends on, so the next submission of the same spec skips the probe (seconds of importing
torch and verl and composing verl's config). <shared_root>/jobs/.preflight/<sha256>.json

The digest covers the job's Python, the probe's own source and request, the trainer and its overrides as composed
(the submission id, which names the record's paths, replaced by a mark), the job's whole runtime_env (a secret env
var by its name only) and what may change under the same names (fingerprint): the Python's site-packages folder,
the site's plugins folder and the model's config.json, each by its inode and times. Only a job whose code is a
snapshot (code_id: read-only, a new one is a new id) and without the share's user code (anyone may write it) is
kept, and only when the job's Python is on the head (a worker's could change unseen). Only an answer that passed is
kept, and the checks run again on it with the cluster's nodes of the moment (a kept answer that no longer passes,
or whose facts break a check, is set aside and the probe runs). Every file here is data: read as a small regular
file through no symlink and its shape checked; anything else is a miss, never an error.
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


DIRS_CAP = 200  # folders of the plugins tree whose times are read


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _tree(path):
    """The newest change of a folder tree's folders (a file replaced inside one changes its folder's times)."""
    newest = []
    for count, (root, dirs, _) in enumerate(os.walk(path), 1):  # symlinked folders are not entered
        newest.append(_stat(root))
        if count >= DIRS_CAP:
            dirs[:] = []
    return max((s for s in newest if s), default=None, key=lambda s: s[3])


def fingerprint(spec, python):
    """What the probe's answer depends on besides the arguments, or None when the answer is not to be kept."""
    exe = python[0] if python else ""
    if not spec.code_id or spec.user_code or not os.path.isabs(exe) or not os.path.exists(exe):
        return None
    venv = os.path.dirname(os.path.dirname(exe))
    lib = os.path.join(venv, "lib")
    packages = sorted(p for p in (os.path.join(lib, d, "site-packages") for d in
                                  (os.listdir(lib) if os.path.isdir(lib) else []) if d.startswith("python"))
                      if os.path.isdir(p))
    if not packages:
        return None  # not a venv's Python: its packages cannot be told apart cheaply
    model = os.path.join(spec.model_path, "config.json") if spec.model_path else None
    return {"python": _stat(os.path.realpath(exe)), "packages": [_stat(p) for p in packages],
            "plugins": _tree(conventions.plugins_code_dir(spec.shared_root)), "model": model and _stat(model)}


def digest(python, probe_args, runtime_env, submission_id, secret_names, found):
    """The key of a probe's answer: probe_args are the probe's arguments after the Python (-c, its source, the
    request, the trainer and its overrides); found is fingerprint()'s."""
    env = dict(runtime_env or {})
    env["env_vars"] = {k: ("<secret>" if is_secret_name(k, secret_names) else str(v).replace(submission_id, "<id>"))
                       for k, v in (env.get("env_vars") or {}).items()}
    material = {"v": VERSION, "python": python, "args": [a.replace(submission_id, "<id>") for a in probe_args],
                "runtime_env": env, "found": found}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode("utf-8")).hexdigest()


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
            entries = [(n, os.stat(n, dir_fd=fd, follow_symlinks=False)) for n in os.listdir(fd)
                       if n.endswith(".json") and not n.startswith(".")]
            names = [n for n, st in entries if stat.S_ISREG(st.st_mode)]  # anything else is not ours to remove
            if len(names) <= KEEP:
                return
            aged = sorted((st.st_mtime, n) for n, st in entries if stat.S_ISREG(st.st_mode))
            for _, name in aged[:len(names) - KEEP]:
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
