"""How a module reaches the cluster: the argument spec every Ray module shares.

Its documentation is the doc fragment doc_fragments/ray_connection.py (extends_documentation_fragment:
ray_connection, plus ray_connection.dashboard or ray_connection.ray_config): keep the two in step.
"""

TOKEN_PATH = {"token_path": {"type": "path", "no_log": False}}
DASHBOARD = {"dashboard_url": {"type": "str", "required": True}}
RAY_CONFIG = {"ray_config": {"type": "dict", "required": True}}


def argument_spec(*, dashboard=False, ray_config=False, **options):
    """The shared connection options (token_path, and dashboard_url or ray_config) plus a module's own."""
    spec = dict(TOKEN_PATH)
    if dashboard:
        spec.update(DASHBOARD)
    if ray_config:
        spec.update(RAY_CONFIG)
    spec.update(options)
    return spec
