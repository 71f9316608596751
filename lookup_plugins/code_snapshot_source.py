"""Lookup: what a code source on the control host is (module_utils/node/code_snapshot.py)."""

DOCUMENTATION = r"""
name: code_snapshot_source
short_description: Identify a code source (an archive or a directory) for a snapshot on the shared root
description:
  - Returns C({path, id, digest, archive, commit}) for the source path; the id is the git commit of a
    checkout or C(<name>-<12 hex of a content hash>).
options:
  _terms:
    description: The source's path on the control host.
    required: true
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
