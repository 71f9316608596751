"""The preflight's kept verdicts: the probe's answer for a job that passed, kept on the shared root under a key of
everything that answer depends on, so the next submission of the same spec skips the probe (seconds of importing
torch and verl and composing verl's config). <shared_root>/jobs/.preflight/<sha256>.json

The key (key()) covers the job's Python, the probe's own source and request, and the trainer, its overrides and its
whole runtime_env as rendered for a fixed placeholder id (keyed_spec: the fields derived from the submission id
rebased, so two submissions of one spec key alike whatever their ids, and no value is rewritten for holding an id's
text), a secret env var by its name only; and what the probe reads, seen on the head (fingerprint()): each file of
every PYTHONPATH folder (the code snapshot, the site's plugins), the site-packages of the job's Python (its listing,
and each file of verl, hydra and omegaconf, the code the verdict comes from) and the model's top-level files (its
config, tokenizer and code), each by its size, inode, mtime and ctime. Stat-based, not a content hash: its cost is
the number of files, never their size (a tokenizer or weights of gigabytes), and every write sets a file's ctime,
which no one can set back, so a file edited in place changes the key; a copy with the same bytes is only a miss.

No verdict is kept where the probe reads what the head cannot see: a job without a code snapshot (code_id:
read-only, a new one is a new id) or with the share's user code (anyone may write it), a Python that is not a venv's
on the head (a worker's could change unseen), a model or tokenizer given as a Hub id (or any path that is not a
folder on the head), a symlink that leads out of its folder, a relative PYTHONPATH entry, or more than FILES_CAP
files in all. Only an answer that passed on the head is kept, and the checks run again on it with the cluster's nodes
of the moment (a kept answer that no longer passes, or whose facts break a check, is set aside and the probe runs).
Every file here is data: read as a small regular file through no symlink and its shape checked; anything else is a
miss, never an error.
"""

import dataclasses
import hashlib
import json
import os
import shlex
import stat

from ansible.module_utils.base import conventions, files
from ansible.module_utils.base.redaction import is_secret_name
from ansible.module_utils.jobspec import render
from ansible.module_utils.jobspec.model import as_ray_config
from ansible.module_utils.jobspec.owned import is_inside

FOLDER = ".preflight"
CAP = 64 << 10  # a kept answer's size: the probe's facts are a few hundred bytes
KEEP = 500  # kept answers at most; the oldest go first
VERSION = 2
# The id every job's config is rendered with for its key: a valid id, so the rendering is the submitted one's shape.
PLACEHOLDER = "preflight-key"
FILES_CAP = 20000  # files stat-ed for one key at most (verl 0.9.1's package: about 800); past it no verdict is kept
WATCHED = ("verl", "hydra", "omegaconf")  # packages in site-packages whose every file is seen
MODEL_KEYS = ("tokenizer_path", "hf_config_path")  # verl's HFModelConfig reads these besides its path
_SKIPPED = ("__pycache__",)  # what Python writes itself, from the sources seen beside it


class Unseen(Exception):
    """What the probe reads cannot be seen from the head: no verdict is kept."""


def keyed_spec(spec):
    """The spec as submitted under PLACEHOLDER: the fields derived from the submission id (the record, the
    checkpoints inside it, the experiment named after it) rebased, every other value as it is."""
    sid = spec.submission_id
    output_dir = conventions.job_dir(spec.shared_root, PLACEHOLDER)
    checkpoint_dir = spec.checkpoint_dir
    if is_inside(checkpoint_dir, spec.output_dir):
        checkpoint_dir = os.path.join(output_dir, os.path.relpath(checkpoint_dir, spec.output_dir))
    return dataclasses.replace(spec, submission_id=PLACEHOLDER, output_dir=output_dir, checkpoint_dir=checkpoint_dir,
                               experiment_name=PLACEHOLDER if spec.experiment_name == sid else spec.experiment_name)


def key(spec, config, resume_path, probe_head, secret_names):
    """The key of the probe's answer for a job, or None when no answer is to be kept. probe_head: the probe's
    arguments before the trainer (-c, its source, its request)."""
    ray_config = as_ray_config(config)
    python = shlex.split(ray_config.python)
    keyed = keyed_spec(spec)
    runtime_env = render.render_runtime_env(keyed, ray_config)
    found = fingerprint(spec, python, runtime_env)
    if found is None:
        return None
    env = dict(runtime_env)
    env["env_vars"] = {k: ("<secret>" if is_secret_name(k, secret_names) else v)
                       for k, v in runtime_env["env_vars"].items()}
    material = {"v": VERSION, "python": python, "probe": list(probe_head),
                "args": render.compose_command(keyed, ray_config, resume_path)[len(python):], "runtime_env": env,
                "found": found}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class _Seen:
    """A digest of files by their stat, FILES_CAP of them at most."""

    def __init__(self):
        self.digest, self.left = hashlib.sha256(), FILES_CAP

    def add(self, *parts):
        self.digest.update(json.dumps(parts, default=str).encode("utf-8") + b"\n")

    def file(self, path, label, home):
        """One entry: a regular file by its stat; a symlink by its text and its target's stat, only when the
        target stays inside home (the folder it belongs to)."""
        self.left -= 1
        if self.left < 0:
            raise Unseen(f"more than {FILES_CAP} files")
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(path)
            if not (target == home or is_inside(target, home)):
                raise Unseen(f"{path} leads out of {home}")
            self.add(label, "->", os.readlink(path), _stat(target))
        elif stat.S_ISREG(st.st_mode):
            self.add(label, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def tree(self, root):
        """Every file below a folder (symlinked folders are not entered: one inside is seen where it lies)."""
        if not os.path.isdir(root):
            self.add(root, "absent")  # made later, it changes the key
            return
        home = os.path.realpath(root)

        def fail(error):
            raise Unseen(f"{root}: {error}")

        for folder, dirs, names in os.walk(root, onerror=fail):
            links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED and d not in links)
            for name in sorted([*names, *links]):
                self.file(os.path.join(folder, name), os.path.relpath(os.path.join(folder, name), root), home)

    def listing(self, folder):
        """A folder's entries: its regular files and symlinks as file() sees them, its folders by name."""
        home = os.path.realpath(folder)
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name in _SKIPPED:
                continue
            if os.path.islink(path) or not os.path.isdir(path):
                self.file(path, name, home)
            else:
                self.add(name)


def _site_packages(exe):
    venv = os.path.dirname(os.path.dirname(exe))
    lib = os.path.join(venv, "lib")
    return sorted(p for p in (os.path.join(lib, d, "site-packages") for d in
                              (os.listdir(lib) if os.path.isdir(lib) else []) if d.startswith("python"))
                  if os.path.isdir(p))


def _models(spec):
    """The folders verl reads a model's config and tokenizer from: the spec's model_path and any tokenizer or HF
    config path an override names. Raises Unseen for one that is not an absolute folder on the head (a Hub id)."""
    paths = [spec.model_path]
    for override in spec.overrides:
        name, _, value = str(override).partition("=")
        if name.lstrip("+~").rpartition(".")[2] in MODEL_KEYS and value.strip("'\"") not in ("null", ""):
            paths.append(value.strip("'\""))
    for path in paths:
        if not (isinstance(path, str) and os.path.isabs(path) and os.path.isdir(path)):
            raise Unseen(f"the model {path!r} is not a folder here (a Hub id?)")
    return list(dict.fromkeys(paths))


def fingerprint(spec, python, runtime_env):
    """A digest of what the probe reads besides its arguments (the module's docstring), or None when the answer is
    not to be kept."""
    exe = python[0] if python else ""
    if not spec.code_id or spec.user_code or not os.path.isabs(exe) or not os.path.exists(exe):
        return None
    seen = _Seen()
    try:
        packages = _site_packages(exe)
        if not packages:
            return None  # not a venv's Python: its packages cannot be told apart cheaply
        seen.add("python", _stat(os.path.realpath(exe)))
        for entry in runtime_env.get("env_vars", {}).get("PYTHONPATH", "").split(":"):
            if entry and not os.path.isabs(entry):
                raise Unseen(f"PYTHONPATH entry {entry!r} is relative")
            if entry:
                seen.tree(entry)
        for folder in packages:
            seen.listing(folder)
            for name in WATCHED:
                if os.path.islink(os.path.join(folder, name)):
                    raise Unseen(f"{os.path.join(folder, name)} is a symlink")
                seen.tree(os.path.join(folder, name))
        for model in _models(spec):
            seen.listing(model)
    except (Unseen, OSError):
        return None
    return seen.digest.hexdigest()


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
        files.make_folder(self.folder, "the kept verdicts' folder", owned=False)

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
