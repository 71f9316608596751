"""Hiding secrets in everything a job writes or shows: record files, command lines, module output.

Imported by modules as ansible.module_utils.redaction (standard library only).
"""

import copy
import json
import re

DEFAULT_SECRET_ENV_NAMES = ("WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "RAY_AUTH_TOKEN")
REDACTED = "<redacted>"

# Names people give secrets: *_TOKEN, *_SECRET, *_KEY (API, access, secret, private keys; AWS_SECRET_ACCESS_KEY),
# *_PAT (personal access tokens), *_PASSWD, *_PASSPHRASE, *_CREDENTIALS and PASSWORD/PASSWD anywhere. Hiding a
# harmless value by mistake costs little; printing a key costs a lot. A site adds its own names (secret_env_names).
_SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|KEY|PAT|PASSWD|PASSPHRASE|CREDENTIALS?)$|PASSWORD|PASSWD",
                          re.IGNORECASE)


def is_secret_name(key, secret_names=DEFAULT_SECRET_ENV_NAMES) -> bool:
    return isinstance(key, str) and (key in secret_names or _SECRET_NAME.search(key) is not None)


def secret_names(configured=None, extra=()):
    """The env names whose values are hidden, by the one rule: configured (a ray_config's secret_env_names, the
    defaults when it names none), then each extra name (a site's jobspec_secret_env_names) not among them."""
    names = [n for n in (configured or DEFAULT_SECRET_ENV_NAMES) if isinstance(n, str)]
    return tuple(names + [n for n in extra or () if isinstance(n, str) and n not in names])


def redact(obj, secret_names, extra_values=()):
    """A deep copy of obj with secrets hidden.

    Values under a secret key (in any mapping) become "<redacted>", and every occurrence of
    such a value, or of an extra_value, inside any string (a rendered command) is replaced.
    """
    found = [v for v in extra_values if isinstance(v, str)]

    def collect(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if is_secret_name(key, secret_names) and isinstance(value, str):
                    found.append(value)
                else:
                    collect(value)
        elif isinstance(node, (list, tuple)):
            for item in node:
                collect(item)

    collect(obj)
    # Also the JSON-escaped form (commands embed runtime_env as JSON). Values shorter than 4
    # characters would garble every string; they are still hidden under their key.
    needles = sorted({form for v in found if len(v) >= 4 for form in (v, json.dumps(v)[1:-1])},
                     key=len, reverse=True)

    def scrub(node):
        if isinstance(node, dict):
            return {key: REDACTED if is_secret_name(key, secret_names) else scrub(value)
                    for key, value in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(scrub(item) for item in node)
        if isinstance(node, str):
            for needle in needles:
                node = node.replace(needle, REDACTED)
            return node
        return copy.deepcopy(node)

    return scrub(obj)
