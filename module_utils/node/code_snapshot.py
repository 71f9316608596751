"""Identify a code source (a source archive or a directory) for a snapshot on the shared root.

A snapshot lives at <shared_root>/common/code/verl/<code_id>/ and is never modified once written,
so its id must say which code it holds: the git commit of a checkout, or a content hash.
"""

import hashlib
import os
import re

_SKIP_DIRS = {".git", "__pycache__", ".tox", ".venv", "node_modules"}
_ARCHIVE = re.compile(r"\.(tar\.gz|tgz|tar\.bz2|tar\.xz|tar|zip)$")


def source_digest(path):
    """sha256 of an archive's bytes, or of a directory's relative paths and file contents."""
    digest = hashlib.sha256()
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()
    if not os.path.isdir(path):
        raise ValueError(f"code source {path} is neither a file nor a directory")
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            full = os.path.join(folder, name)
            if name.endswith(".pyc") or os.path.islink(full):
                continue
            digest.update(os.path.relpath(full, path).encode() + b"\0")
            with open(full, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def git_commit(path):
    """The commit a git checkout is at (read from .git, no git binary needed), or None."""
    git = os.path.join(path, ".git")
    try:
        with open(os.path.join(git, "HEAD"), encoding="utf-8") as handle:
            head = handle.read().strip()
    except OSError:
        return None
    if not head.startswith("ref: "):
        return head or None
    ref = head[5:]
    try:
        with open(os.path.join(git, ref), encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        pass
    try:
        with open(os.path.join(git, "packed-refs"), encoding="utf-8") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        pass
    return None


def is_archive(path):
    return bool(_ARCHIVE.search(path))


def default_code_id(path):
    """<name>-<12 hex>: the git commit for a checkout, else a content hash."""
    base = os.path.basename(os.path.normpath(path))
    name = re.sub(r"[^A-Za-z0-9._-]", "-", _ARCHIVE.sub("", base)) or "code"
    commit = None if os.path.isfile(path) else git_commit(path)
    return f"{name}-{(commit or source_digest(path))[:12]}"
