"""The one language of the project's data models: a field is declared once (its kind, doc, bounds or choices, default)
as a Field, values are checked by one walk over a table of them (check, check_fields), and one generator writes their
JSON Schema (json_schema). The JobSpec (module_utils/jobspec/fields.py) and a job record's status.json
(module_utils/jobs/record/status.py) are both such tables; each wraps FieldError in its own one-line error. An object's
value can be held typed (part_class: a dataclass made from its Field). Standard library only: the nodes import it."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import keyword
import posixpath
from typing import ClassVar

from ansible.module_utils.base import conventions

# Paths go unquoted into hydra overrides and PYTHONPATH: no , = : spaces or quotes. (regex, what a valid value
# looks like), as conventions' rules.
PATH_RULE = (r"^/[A-Za-z0-9._/+@-]*$", "an absolute path of letters, digits and ._-/+@")
# The largest number a model holds (about 9.2e18: ms since the epoch, steps, sizes, bytes all fit), so no
# arithmetic on a value read from a file overflows, however many digits the file gave it.
NUMBER_LIMIT = 2 ** 63 - 1
KINDS = ("str", "int", "number", "bool", "path", "paths", "list", "map", "object", "mapping")
# The value of a FieldError about a field that was not given at all: its message says nothing of a value.
ABSENT = object()


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a model: its kind, constraints, default and doc.

    kinds: str, int, number, bool, path (an absolute path, PATH_RULE, normalised), paths (a path or a non-empty list
    of them), list (of `item`), map (keys match `pattern`, values are `item`), object (the sub-`fields`; other keys
    are refused, or kept when `open`), mapping (free-form). Numbers lie within ±NUMBER_LIMIT and `minimum`/`maximum`,
    or are one of `also`'s values."""

    name: str
    kind: str
    doc: str = ""
    default: object = None  # the static default of an absent field
    derived: str = ""  # a default worked out later from other values (resolve()), in words
    nullable: bool = False  # null is a valid value, meaning "not set"
    required: bool = False  # must be given
    minimum: float | None = None
    maximum: float | None = None
    exclusive: bool = False  # minimum itself is not allowed
    pattern: tuple | None = None  # (regex, description) of str values or of map keys
    choices: tuple = ()
    also: tuple = ()  # (value, meaning) pairs a number may be besides its bounds: save_freq's (-1, "no checkpoints")
    item: Field | None = None
    fields: tuple = ()
    open: bool = False  # an object whose unknown keys are kept (a newer version's), not refused

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"field '{self.name}': no kind {self.kind!r}")


class FieldError(ValueError):
    """A value that does not fit its field. `path` names it from the top (names, list indexes); `value` is kept for
    code, never shown: str() is one line naming the field and saying only what kind of value was given."""

    def __init__(self, path, problem, value=ABSENT, f=None):
        self.path, self.problem, self.value = tuple(path), problem, value
        self.field = dotted(self.path)
        self.got = "" if value is ABSENT else f" (got {kind_of(value, f)})"
        super().__init__(f"field '{conventions.one_line(self.field, 200)}': {conventions.one_line(problem)}{self.got}")


def kind_of(value, f=None):
    """What kind of value this is, in words, never the value itself: 'a string', 'an integer', 'null'; a number
    outside the bounds of number field f says which: 'an integer below 1', 'an integer beyond ±9223372036854775807'."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true or false"
    for types, word in ((int, "an integer"), (float, "a number"), (str, "a string"), (dict, "a mapping"),
                        ((list, tuple), "a list")):
        if isinstance(value, types):
            bounded = types in (int, float) and f is not None and f.kind in ("int", "number")
            return word + (_outside(f, value) if bounded else "")
    return "a value of another kind"


def _outside(f, value):
    if not abs(value) <= NUMBER_LIMIT:  # a NaN compares false with everything: it is outside every bound
        return f" beyond ±{NUMBER_LIMIT}" if abs(value) > NUMBER_LIMIT else " that is not finite"
    if f.minimum is not None and (value <= f.minimum if f.exclusive else value < f.minimum):
        return f" of {f.minimum} or less" if f.exclusive else f" below {f.minimum}"
    return f" above {f.maximum}" if f.maximum is not None and value > f.maximum else ""


def join_path(path, name):
    """The dotted path of field `name` under `path` (as error messages name it)."""
    return f"{path}.{name}" if path else str(name)


def dotted(parts):
    """A path of names and list indexes as one string: resources.nnodes, train_files[1]."""
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else join_path(out, part)
    return out


def _bounds(f, value):
    low = -NUMBER_LIMIT if f.minimum is None else f.minimum
    high = NUMBER_LIMIT if f.maximum is None else min(f.maximum, NUMBER_LIMIT)
    # A NaN compares false with everything: the bounds refuse it too.
    return (value > low if f.exclusive else value >= low) and value <= high or value in (v for v, _ in f.also)


def _is_number(f, value):
    """A number of f's kind (an int for int) within its bounds, which refuse a NaN and an infinity."""
    types = int if f.kind == "int" else (int, float)
    return isinstance(value, types) and not isinstance(value, bool) and _bounds(f, value)


def _number_words(f, noun):
    low, high = f.minimum, f.maximum
    if noun == "integer" and not f.exclusive and low in (0, 1):
        text = "a non-negative integer" if low == 0 else "a positive integer"
    elif low is None:
        text = f"an {noun}" if noun == "integer" else f"a {noun}"
    else:
        text = f"{'an' if noun == 'integer' else 'a'} {noun} {'>' if f.exclusive else '>='} {low}"
    return text + (f" up to {high}" if high is not None else "") + "".join(f", or {v} for {why}" for v, why in f.also)


def expect(f):
    """How an error message describes a valid value of field f."""
    kind = f.kind
    if kind in ("int", "number"):
        text = _number_words(f, "integer" if kind == "int" else "number")
    elif kind == "bool":
        text = "true or false"
    elif kind == "str":
        text = "one of " + ", ".join(f.choices) if f.choices else f.pattern[1] if f.pattern else "a string"
    elif kind == "path":
        text = PATH_RULE[1]
    elif kind == "paths":
        text = f"{PATH_RULE[1]}, or a non-empty list of them"
    elif kind == "list":
        text = f"a list, each item {expect(f.item)}"
    elif kind == "map":
        text = f"a mapping, each value {expect(f.item)}"
    else:
        text = "a mapping"
    return text + " or null" if f.nullable else text


def check(f, value, path=(), *, complete=True, allow_nul=False):
    """Return value normalised (paths cleaned, containers copied); raise FieldError, naming path, if it is bad.

    complete: the absent fields of nested objects count as null (see check_fields). allow_nul: strings may hold NUL
    (by default none may, anywhere: C strings, argv, env and paths, would cut it there silently)."""
    path = tuple(path)
    if value is None and f.nullable:
        return None
    if not allow_nul:
        _no_nul(value, path)
    kind, rules = f.kind, {"complete": complete, "allow_nul": allow_nul}
    if kind == "object":
        return check_fields(f.fields, value, path, open=f.open, **rules)
    if (kind in ("int", "number") and _is_number(f, value)) or (kind == "bool" and isinstance(value, bool)):
        return value
    if kind == "str" and isinstance(value, str) and (not f.choices or value in f.choices) and (
            not f.pattern or conventions.matches(f.pattern, value)):
        return value
    if kind in ("path", "paths") and conventions.matches(PATH_RULE, value):
        # normpath keeps a leading "//" (POSIX allows it); one "/" is what we compare against.
        return "/" + posixpath.normpath(value).lstrip("/")
    if (kind == "paths" and isinstance(value, list) and value) or (kind == "list" and isinstance(value, list)):
        return [check(f.item, v, (*path, i), **rules) for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or not key or (f.pattern and not conventions.matches(f.pattern, key)):
                what = f.pattern[1] if f.pattern else "a non-empty string"
                raise FieldError((*path, key), f"the name must be {what}", key)
        return {key: check(f.item, v, (*path, key), **rules) for key, v in value.items()}
    if kind == "mapping" and isinstance(value, dict):
        return copy.deepcopy(value)
    raise FieldError(path, f"must be {expect(f)}", value, f)  # (got ...) says a number's bound: kind_of


def _no_nul(value, path):
    if isinstance(value, str) and "\x00" in value:
        raise FieldError(path, "must not contain a NUL character", value)
    pairs = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in pairs:
        for part in (key, item) if isinstance(value, dict) else (item,):  # a mapping's keys too
            _no_nul(part, (*path, key))


def check_fields(fields, value, path=(), *, complete, open=False, allow_nul=False):
    """Check a mapping against a field table (open: unknown keys are kept as they are, not refused).

    A required field must be given. complete: an absent field counts as null (so it must be nullable); else absent
    fields are left out."""
    path = tuple(path)
    if not isinstance(value, dict):
        raise FieldError(path, "must be a mapping", value)
    known = {f.name: f for f in fields}
    unknown = [key for key in value if key not in known]
    if unknown and not open:
        close = difflib.get_close_matches(str(unknown[0]), known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise FieldError((*path, unknown[0]), f"unknown field{hint}")
    out = {key: copy.deepcopy(value[key]) for key in unknown}
    for f in fields:
        if f.name in value:
            out[f.name] = check(f, value[f.name], (*path, f.name), complete=complete, allow_nul=allow_nul)
        elif f.required:
            raise FieldError((*path, f.name), f"is required ({expect(f)})")
        elif complete:
            out[f.name] = check(f, None, (*path, f.name), complete=complete, allow_nul=allow_nul)
    return out


def fill_static(values, fields):
    """Add the static defaults of absent fields (nested objects included), in place."""
    for f in fields:
        if f.kind == "object":
            values[f.name] = fill_static(values.get(f.name) or {}, f.fields)
        elif f.name not in values and f.default is not None:
            values[f.name] = copy.deepcopy(f.default)
    return values


def walk(fields, path=""):
    """(dotted path, field) of every field of a table, each object's own fields after it."""
    for f in fields:
        yield join_path(path, f.name), f
        if f.kind == "object":
            yield from walk(f.fields, join_path(path, f.name))


# ---------------------------------------------------------------- JSON Schema (draft 2020-12)


def describe(f):
    """A field's doc with its derived default, as the schema and the docs say it."""
    return " ".join(part for part in (f.doc, f"Default: {f.derived}." if f.derived else "") if part)


def object_schema(fields, open=False):
    """The schema of a mapping of these fields: closed unless open, its required fields listed."""
    schema = {"type": "object", "properties": {f.name: schema_of(f) for f in fields}}
    if not open:
        schema["additionalProperties"] = False
    required = [f.name for f in fields if f.required]
    if required:
        schema["required"] = required
    return schema


def schema_of(f):
    """The JSON Schema of one field."""
    kind = f.kind
    if kind == "object":
        schema = object_schema(f.fields, open=f.open)
    elif kind in ("int", "number"):
        schema = {"type": "integer" if kind == "int" else "number"}
        if f.minimum is not None:
            schema["exclusiveMinimum" if f.exclusive else "minimum"] = f.minimum
        if f.maximum is not None:
            schema["maximum"] = f.maximum
        if f.also:
            schema = {"anyOf": [schema, *({"const": v} for v, _ in f.also)]}
    elif kind == "bool":
        schema = {"type": "boolean"}
    elif kind == "str":
        schema = {"type": "string"}
        if f.choices:
            schema["enum"] = list(f.choices)
        if f.pattern:
            schema["pattern"] = f.pattern[0]
    elif kind == "path":
        schema = {"type": "string", "pattern": PATH_RULE[0]}
    elif kind == "paths":
        one = schema_of(f.item)
        schema = {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}]}
    elif kind == "list":
        schema = {"type": "array", "items": schema_of(f.item)}
    elif kind == "map":
        schema = {"type": "object", "additionalProperties": schema_of(f.item)}
        if f.pattern:
            schema["propertyNames"] = {"pattern": f.pattern[0]}
    else:
        schema = {"type": "object"}
    if f.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    if f.default is not None:
        schema = {"default": f.default, **schema}
    text = describe(f)
    return {"description": text, **schema} if text else schema


def json_schema(fields, *, title, description, open=False):
    """The JSON Schema (draft 2020-12) of a document holding these fields (open: other keys may appear)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, "description": description,
            **object_schema(fields, open=open)}


# ---------------------------------------------------------------- typed objects


def attribute(name):
    """The Python attribute of a field: a keyword (an outage's `from`) gets a trailing underscore."""
    return f"{name}_" if keyword.iskeyword(name) else name


def typed_fields(fields):
    """{attribute: function making its typed value} of a table's objects (a Part) and lists of objects (of Parts)."""
    out = {}
    for f in fields:
        if f.kind == "object":
            out[attribute(f.name)] = part_class(f).of
        elif f.kind == "list" and f.item.kind == "object":
            out[attribute(f.name)] = functools.partial(
                lambda cls, value: None if value is None else [cls.of(item) for item in value], part_class(f.item))
    return out


class Typed:
    """Keeps a table's objects typed (TYPING, from typed_fields): a mapping or None assigned becomes a Part."""

    TYPING: ClassVar[dict] = {}

    def __setattr__(self, name, value):
        convert = self.TYPING.get(name)
        super().__setattr__(name, value if convert is None else convert(value))


def plain(value):
    """value as JSON holds it: each Part as its to_dict()."""
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value.to_dict() if isinstance(value, Part) else value


class Part(Typed):
    """The typed value of an object Field (its class made by part_class): an attribute per sub-field (None when
    unset; an object typed too) and `extra`, the keys of an open object this version does not know (a newer one's).
    A part absent or null reads as an empty part (falsy; each attribute None or its default), so a reader writes
    status.retries.on and needs no `or {}`. It is written as it was read: null when absent, else its kept keys and
    the sub-fields given or set since (a part made by calling its class: all of them)."""

    FIELD = None  # the object Field the class was made from
    _given = None  # the attributes given or set (None: the part is absent)

    @classmethod
    def of(cls, value):
        """The part a value holds: a checked mapping (model.check's), None (an empty part) or a part already."""
        if isinstance(value, cls):
            return value
        part, known = cls(), {f.name: attribute(f.name) for f in cls.FIELD.fields}
        object.__setattr__(part, "_given", None if value is None else set())
        for key, item in (value or {}).items():
            if key in known:
                setattr(part, known[key], copy.deepcopy(item))
        part.extra = {key: copy.deepcopy(item) for key, item in (value or {}).items() if key not in known}
        return part

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name != "extra":
            object.__setattr__(self, "_given", {*(self._given or ()), name})

    def __bool__(self):
        return bool(self._given or self.extra)

    def to_dict(self):
        """The part as status.json holds it (see the class); None when it is absent."""
        if self._given is None and not self.extra:
            return None
        given = [f.name for f in self.FIELD.fields if attribute(f.name) in (self._given or ())]
        return {**copy.deepcopy(self.extra), **{name: plain(getattr(self, attribute(name))) for name in given}}


_MADE = {}  # id(field) -> (field, its class): one class per Field


def _default(sub):
    if isinstance(sub.default, (list, dict)):  # (an object's default, None, becomes its empty part: Typed)
        return dataclasses.field(default_factory=functools.partial(copy.deepcopy, sub.default))
    return dataclasses.field(default=sub.default)


def part_class(f):
    """The dataclass (a Part) of object Field f: its sub-fields as attributes, in their order, and `extra`. Made once
    per Field and named from it (resumed_from: ResumedFrom): a field is declared once, and typed from there."""
    if id(f) not in _MADE:
        name = "".join(word.title() for word in f.name.split("_")) or "Part"
        specs = [*((attribute(sub.name), object, _default(sub)) for sub in f.fields),
                 ("extra", dict, dataclasses.field(default_factory=dict))]
        _MADE[id(f)] = (f, dataclasses.make_dataclass(name, specs, bases=(Part,), namespace={
            "FIELD": f, "TYPING": typed_fields(f.fields), "__module__": __name__,
            "__doc__": f"{describe(f) or name} (the typed part of field '{f.name}')"}))
    return _MADE[id(f)][1]
