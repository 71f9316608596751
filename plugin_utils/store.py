"""The GCS store's settings (roles/ray_store), validated before they reach a Redis config or a systemd unit.

Every value may come from -e or a site file: a newline in one would add a directive to redis.conf (`rename-command`,
`dir` elsewhere) or a line to a unit run as root. Each is checked against a strict rule; an error names the setting
and the rule, never the value (the password is one of them).
"""

import ipaddress
import re

from plugin_utils import settings
from plugin_utils.settings import SettingError

# What the role makes is 64 hex digits; a site's own password may use more, but nothing redis.conf would parse.
_PASSWORD = re.compile(r"[A-Za-z0-9._~+-]{16,256}")
FSYNC = ("always", "everysec", "no")


# Its errors are settings.SettingError (one line naming the setting and its rule, never the value).
StoreSettingError = SettingError
_path, _int, _name = settings.path, settings.whole, settings.name


def settle(settings):
    """The validated settings of roles/ray_store; raises StoreSettingError naming the first bad one."""
    out = dict(settings)
    try:
        out["bind"] = str(ipaddress.ip_address(str(settings["bind"])))
    except ValueError:
        raise StoreSettingError("ray_store_bind", "must be an IP address (the store host's cluster address; "
                                "never 0.0.0.0)") from None
    if ipaddress.ip_address(out["bind"]).is_unspecified:
        raise StoreSettingError("ray_store_bind", "must be the store host's cluster address, not every interface")
    out["port"] = _int("ray_store_port", settings["port"], 1, 65535)
    out["dir"] = _path("ray_store_dir", settings["dir"])
    out["config_path"] = _path("ray_store_config_path", settings["config_path"])
    out["namespace"] = _name("ray_store_namespace", settings["namespace"])
    out["user"] = _name("ray_store_user", settings["user"])
    out["service"] = _name("ray_store_service_name", settings["service"])
    if settings["appendfsync"] not in FSYNC:
        raise StoreSettingError("ray_store_appendfsync", "must be always, everysec or no")
    return out


def check_password(text):
    """The password as read from its file (one line); StoreSettingError, never quoting it, if unfit."""
    password = str(text).strip()
    if not _PASSWORD.fullmatch(password):
        raise StoreSettingError("ray_store_control_password_path", "the password file must hold one line of 16-256 "
                                "letters, digits or ._~+-")
    return password


def namespace_for(head_ip, gcs_port):
    """The default storage namespace of a cluster: one per head address, so clusters may share a store."""
    return "ray-verl-" + re.sub(r"[^A-Za-z0-9]", "-", str(head_ip))[:40] + f"-{int(gcs_port)}"
