"""Filters naming a code snapshot's source (module_utils/code_snapshot.py), run on the control host."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))
import code_snapshot


def code_snapshot_source(path):
    """What a code source is: its id, content digest, and whether it is an archive."""
    try:
        return {"path": path, "id": code_snapshot.default_code_id(path),
                "digest": code_snapshot.source_digest(path), "archive": code_snapshot.is_archive(path),
                "commit": code_snapshot.git_commit(path) if os.path.isdir(path) else None}
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"code_snapshot_verl_source {path}: {exc}") from None


class FilterModule:
    def filters(self):
        return {"code_snapshot_source": code_snapshot_source}
