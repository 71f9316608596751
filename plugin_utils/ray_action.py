"""What the Ray modules' action plugins share: connection options filled from the inventory.

A task names only what is particular to it; the cluster's address (ray_config or ray_dashboard_url),
the token (ray_auth_token_path when ray_auth_enabled) and the Ray Python that runs the module on the
node (ray_python) come from the inventory unless the task sets them. The options themselves are
module_utils/base/ray_connection.py (argument spec) and doc_fragments/ray_connection.py (documentation).
"""

from ansible.errors import AnsibleUndefinedVariable

REQUIRED = object()


def inventory_value(templar, name, default=None):
    """An inventory variable, templated; default when it is undefined (REQUIRED: the error stands)."""
    try:
        return templar.resolve_variable_expression(name)
    except AnsibleUndefinedVariable:
        if default is REQUIRED:
            raise
        return default


def connection(templar, args, *, address):
    """(module args, interpreter): token_path and `address` (ray_config or dashboard_url) for the module."""
    source = {"ray_config": "ray_config", "dashboard_url": "ray_dashboard_url"}[address]
    out = {address: args.get(address) or inventory_value(templar, source, REQUIRED)}
    token_path = args.get("token_path")
    if token_path is None and inventory_value(templar, "ray_auth_enabled", False):
        token_path = inventory_value(templar, "ray_auth_token_path", REQUIRED)
    if token_path:
        out["token_path"] = token_path
    return out, args.get("python") or inventory_value(templar, "ray_python", REQUIRED)
