"""Hiding secrets in everything a job writes or shows: record files, command lines, module output.

Imported by modules as ansible.module_utils.base.redaction (standard library only).
"""

import copy
import itertools
import json
import re

DEFAULT_SECRET_ENV_NAMES = ("WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "RAY_AUTH_TOKEN")
REDACTED = "<redacted>"

# The one rule for secret env names (docs/security.md), case-insensitive, on the name's word parts (split at _ and
# other punctuation, at a lower-to-upper case change and between letters and digits: GITHUB_TOKEN2, hfToken):
# - a part TOKEN, SECRET, PASSWORD, PASSWD, PASSPHRASE, APIKEY, CREDENTIAL, COOKIE (or their plurals), anywhere:
#   HF_TOKEN_RW, MY_SECRET_VALUE, OPENAI_APIKEY, GOOGLE_APPLICATION_CREDENTIALS;
# - the parts API KEY, PRIVATE KEY or ACCESS KEY next to each other, anywhere: WANDB_API_KEY, PRIVATE_KEY_PEM;
# - a last word part (digits aside) KEY, PAT or PASS: AWS_SECRET_ACCESS_KEY, SSH_KEY_2, GH_PAT, DB_PASS;
# - PASSWORD or PASSWD inside any part: DBPASSWORD.
# TOKENIZERS_PARALLELISM or KEYRING_BACKEND are not secret: TOKENIZERS and KEYRING are other words; nor is a count of
# tokens, TOKEN(S) in a name with a part MAX, MIN, NUM, LEN, LENGTH or COUNT (PPO_MAX_TOKEN_LEN_PER_GPU,
# max_num_batched_tokens: verl's launch scripts are full of them). Hiding a harmless value by mistake costs little;
# printing a key costs a lot. A site adds its own names (secret_env_names).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "APIKEY", "CREDENTIAL", "COOKIE")
COUNT_WORDS = ("MAX", "MIN", "NUM", "LEN", "LENGTH", "COUNT")
SECRET_PAIRS = (("API", "KEY"), ("PRIVATE", "KEY"), ("ACCESS", "KEY"))
SECRET_LAST_WORDS = ("KEY", "PAT", "PASS")
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_WORD = re.compile(rf"^(?:{'|'.join(SECRET_WORDS)})(?:S|ES)?$")
_INSIDE = re.compile(r"PASSWORD|PASSWD")
_TOKEN = re.compile(r"^TOKENS?$")


def _parts(name):
    """The word parts of name, upper case: 'hfToken_RW2' -> ['HF', 'TOKEN', 'RW', '2']."""
    return [p.upper() for p in _PARTS.findall(name)]


def is_secret_name(key, secret_names=DEFAULT_SECRET_ENV_NAMES) -> bool:
    """Whether env name key holds a secret: one of secret_names (any case), or by the rule above."""
    if not isinstance(key, str):
        return False
    if key.upper() in {n.upper() for n in secret_names or () if isinstance(n, str)}:
        return True
    parts = _parts(key)
    words = [p for p in parts if not p.isdigit()]
    counts = any(p in COUNT_WORDS for p in parts)  # then TOKEN(S) counts tokens
    return (any(_WORD.match(p) and not (counts and _TOKEN.match(p)) or _INSIDE.search(p) for p in parts)
            or any(pair in SECRET_PAIRS for pair in itertools.pairwise(words))
            or (bool(words) and words[-1] in SECRET_LAST_WORDS))


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
