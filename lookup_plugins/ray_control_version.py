"""Lookup: the Ray version installed beside ansible-playbook (the control host submits with it)."""

DOCUMENTATION = r"""
name: ray_control_version
short_description: The Ray version of the control host's Python
description:
  - Reads the installed distribution's metadata (no import of Ray, so it costs nothing).
  - Returns C(none) when Ray is not installed there.
"""

EXAMPLES = r"""
- name: Ray | The nodes run the control host's Ray version
  ansible.builtin.assert:
    that: lookup('ray_control_version') == ray_version
    fail_msg: the control host has Ray {{ lookup('ray_control_version') }}, the nodes {{ ray_version }}
"""

RETURN = r"""
_raw:
  description: One string, the version (e.g. C(2.60.0)), or C(none) (the string) without Ray.
  type: list
  elements: str
"""

import importlib.metadata

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        try:
            return [importlib.metadata.version("ray")]
        except importlib.metadata.PackageNotFoundError:
            return ["none"]
