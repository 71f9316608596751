"""Checks of a site's settings before they reach a configuration file, a unit or a command line (the GCS store's,
the monitoring services'): each names the setting and its rule in one line, never the value, which may be a secret
or hold a newline meant to add a directive.

Imported on the control host as plugin_utils.settings (plugin_utils/store.py and monitoring.py use it).
"""

import re

_PATH = re.compile(r"/[A-Za-z0-9._/+@-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class SettingError(ValueError):
    """One line naming the bad setting and its rule (never its value)."""

    def __init__(self, field, rule):
        super().__init__(f"{field}: {rule}")


def path(field, value):
    """An absolute path of plain characters, without '..', '//' or the root itself."""
    value = str(value)
    if not _PATH.fullmatch(value) or "/../" in value + "/" or "//" in value or value == "/":
        raise SettingError(field, "must be an absolute path of letters, digits and ._-/+@ (no '..')")
    return value


def whole(field, value, low, high):
    """A whole number from low to high (written in decimal digits)."""
    try:
        number = int(str(value), 10)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise SettingError(field, f"must be a whole number from {low} to {high}")
    return number


def name(field, value):
    """A name a unit, a user or a file may have: 1-64 letters, digits and _.-, starting with a letter or digit."""
    if not _NAME.fullmatch(str(value)):
        raise SettingError(field, "must be 1-64 letters, digits and _.- (starting with a letter or digit)")
    return str(value)
