"""Lookup: the files of source folders on the control host, to be placed on the shared root."""

DOCUMENTATION = r"""
name: code_tree
short_description: Files of folders (or single files) on the control host, as shared_files entries
description:
  - For each term, a file or a folder, returns one C({dest, content_b64, mode}) per file, where
    C(dest) is O(prefix)/ and the path relative to the term's parent (a folder C(verl_cpu) gives
    C(<prefix>/verl_cpu/...)).
  - Skips caches and compiled files.
options:
  _terms:
    description: Files or folders on the control host.
    required: true
  prefix:
    description: Folder the C(dest) paths start with.
    type: str
    default: ""
"""

import base64
import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

_SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache"}


def entries(path, prefix=""):
    path = os.path.normpath(path)
    if os.path.isfile(path):
        found = [(path, os.path.basename(path))]
    elif os.path.isdir(path):
        found = []
        base = os.path.dirname(path)
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            found += [(os.path.join(folder, name), os.path.relpath(os.path.join(folder, name), base))
                      for name in sorted(files) if not name.endswith((".pyc", ".pyo"))]
    else:
        raise AnsibleLookupError(f"code_tree: {path} is neither a file nor a folder")
    out = []
    for full, rel in found:
        with open(full, "rb") as handle:
            out.append({"dest": os.path.join(prefix, rel) if prefix else rel, "content_b64": base64.b64encode(handle.read()).decode("ascii"), "mode": "0644"})
    return out


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [entry for term in terms for entry in entries(str(term), self.get_option("prefix"))]
