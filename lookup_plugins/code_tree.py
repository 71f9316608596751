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

EXAMPLES = r"""
- name: Code snapshot | Place the plugins on the shared root
  shared_files:
    root: /private
    files: "{{ lookup('code_tree', 'files/verl_cpu', 'files/probe.py', wantlist=true, prefix='common/code/plugins') }}"
  # [{dest: common/code/plugins/verl_cpu/__init__.py, content_b64: ..., mode: '0644'}, ...,
  #  {dest: common/code/plugins/probe.py, content_b64: ..., mode: '0644'}]
"""

RETURN = r"""
_raw:
  description:
    - One dict for each file, with C(dest) (O(prefix) joined with the path relative to the term's parent),
      C(content_b64) (the file's bytes, base64) and C(mode) (C(0644)), in the form M(shared_files)'
      O(shared_files#module:files) takes.
    - A term that is neither a file nor a folder fails the lookup.
  type: list
  elements: dict
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
            out.append({"dest": os.path.join(prefix, rel) if prefix else rel,
                        "content_b64": base64.b64encode(handle.read()).decode("ascii"), "mode": "0644"})
    return out


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [entry for term in terms for entry in entries(str(term), self.get_option("prefix"))]
