"""Filters of roles/ray_store: its settings checked (plugin_utils/store.py) before any file is written."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import store


def ray_store_settings(settings):
    try:
        return store.settle(settings)
    except store.StoreSettingError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ray_store_password(text):
    try:
        return store.check_password(text)
    except store.StoreSettingError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ray_store_namespace(head_ip, gcs_port):
    return store.namespace_for(head_ip, gcs_port)


class FilterModule:
    def filters(self):
        return {"ray_store_settings": ray_store_settings, "ray_store_password": ray_store_password,
                "ray_store_namespace": ray_store_namespace}
