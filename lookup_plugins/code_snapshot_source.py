"""Lookup: what a code source on the control host is (module_utils/node/code_snapshot.py)."""

DOCUMENTATION = r"""
name: code_snapshot_source
short_description: Identify a code source (an archive or a directory) for a snapshot on the shared root
description:
  - Returns C({path, id, digest, archive, commit}) for the source path; the id is C(<name>-<12 hex>), the hex
    from a checkout's git commit, else from a hash of the content.
options:
  _terms:
    description: The source's path on the control host.
    required: true
"""

EXAMPLES = r"""
- name: Code snapshot | Identify the verl source
  ansible.builtin.set_fact:
    verl_source: "{{ lookup('code_snapshot_source', '/srv/src/verl-0.9.1.tar.gz') }}"
  # {path: /srv/src/verl-0.9.1.tar.gz, id: verl-0.9.1-<12 hex>, digest: ..., archive: true, commit: null}

- name: Code snapshot | A git checkout is named by its commit (verl-<its first 12 hex>)
  ansible.builtin.debug:
    msg: "{{ lookup('code_snapshot_source', '/srv/src/verl').id }}"
"""

RETURN = r"""
_raw:
  description:
    - One dict for each term, with C(path) (as given), C(id) (C(<name>-<12 hex>) of the checkout's git commit, else
      of the content hash), C(digest) (the content hash), C(archive) (whether it is an archive rather than a
      directory) and C(commit) (the git commit of a directory, else none).
    - A path that cannot be read fails the lookup with one line naming it.
  type: list
  elements: dict
"""

import os
import sys

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.node import code_snapshot  # isort: skip


def describe(path):
    return {"path": path, "id": code_snapshot.default_code_id(path),
            "digest": code_snapshot.source_digest(path), "archive": code_snapshot.is_archive(path),
            "commit": code_snapshot.git_commit(path) if os.path.isdir(path) else None}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        try:
            return [describe(str(path)) for path in terms]
        except (OSError, ValueError) as exc:
            raise AnsibleLookupError(f"code_snapshot_verl_source {terms[0]}: {exc}") from None
