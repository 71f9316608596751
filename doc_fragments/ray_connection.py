"""Documentation of the connection options every Ray module shares (module_utils/base/ray_connection.py)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  token_path:
    description:
      - File on the managed host with the cluster token (token authentication). Omit when authentication is off.
      - The module's action plugin fills it from C(ray_auth_token_path) when C(ray_auth_enabled) is true.
    type: path
"""

    DASHBOARD = r"""
options:
  dashboard_url:
    description:
      - The dashboard (job API) URL, e.g. C(http://10.20.0.10:8265).
      - The module's action plugin fills it from the inventory's C(ray_dashboard_url) when the task does not set it.
    type: str
    required: true
"""

    RAY_CONFIG = r"""
options:
  ray_config:
    description:
      - The cluster's RayConfig (inventory C(ray_config)), with address, dashboard_url, shared_root and entrypoint
        resources.
      - The ray_job action fills it from the inventory's C(ray_config) when the task does not set it.
    type: dict
    required: true
"""
