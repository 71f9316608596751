"""Lookup: the Ray version installed beside ansible-playbook (the control host submits with it)."""

DOCUMENTATION = r"""
name: ray_control_version
short_description: The Ray version of the control host's Python
description:
  - Reads the installed distribution's metadata (no import of Ray, so it costs nothing).
  - Returns C(none) when Ray is not installed there.
"""

import importlib.metadata

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        try:
            return [importlib.metadata.version("ray")]
        except importlib.metadata.PackageNotFoundError:
            return ["none"]
