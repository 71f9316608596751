"""module_utils/base/model.py: the one model language of the JobSpec and of status.json: one Field class, one walk
that checks values, one JSON Schema generator, and the two agree."""

import dataclasses

import pytest
from ansible.module_utils.base import model
from ansible.module_utils.jobs.record import status
from ansible.module_utils.jobs.record.status import RecordError, StatusFile
from ansible.module_utils.jobspec import fields as jobspec_fields
from ansible.module_utils.jobspec.model import JobSpecError, resolve

RC = {"address": "10.0.0.1:6379", "dashboard_url": "http://10.0.0.1:8265"}
HUGE = 10 ** 400  # json.loads and safe_yaml both read such a number as a Python int


def every_field(fields):
    for f in fields:
        yield f
        yield from every_field(f.fields)
        if f.item is not None:
            yield from every_field((f.item,))


@pytest.mark.parametrize("table", [jobspec_fields.SPEC_FIELDS, jobspec_fields.RAY_CONFIG_FIELDS, status.FIELDS])
def test_both_models_are_tables_of_the_one_field_class(table):
    assert all(type(f) is model.Field for f in every_field(table))


def test_a_field_of_an_unknown_kind_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match="no kind 'text'"):
        model.Field("x", "text")


def test_a_number_too_big_for_the_module_s_arithmetic_is_refused_by_both_models():
    beyond = f"(got an integer beyond ±{model.NUMBER_LIMIT})"
    with pytest.raises(JobSpecError) as exc:
        resolve({"workload": "smoke", "save_freq": HUGE}, name="j", ray_config=RC)
    assert str(exc.value) == f"jobspec field 'save_freq': must be a positive integer, or -1 for no checkpoints {beyond}"
    with pytest.raises(RecordError) as exc:
        StatusFile.from_dict({"submission_id": "a-1", "state": "RUNNING", "progress": {"step": HUGE}})
    assert str(exc.value) == ("status.json: field 'progress': field 'step' must be a non-negative integer up to "
                              f"{10 ** 12} or null {beyond}")
    with pytest.raises(RecordError) as exc:
        StatusFile.from_dict({"submission_id": "a-1", "state": "RUNNING", "first_loss": float("nan")})
    assert str(exc.value) == ("status.json: field 'first_loss' must be a number or null "
                              "(got a number that is not finite)")


# A number of the right kind outside its bounds says which bound, never "(got an integer)" alone (issue 32: save_freq
# -2 was "must be a positive integer (got an integer)"), and never the value itself.
OUTSIDE = [
    (model.Field("x", "int", minimum=1), 0, "must be a positive integer (got an integer below 1)"),
    (model.Field("x", "int", minimum=1, maximum=5), 6, "must be a positive integer up to 5 (got an integer above 5)"),
    (model.Field("x", "int", minimum=2), 1, "must be an integer >= 2 (got an integer below 2)"),
    (model.Field("x", "number", minimum=0, exclusive=True), -3, "must be a number > 0 (got an integer of 0 or less)"),
    (model.Field("x", "number", minimum=0), -0.5, "must be a number >= 0 (got a number below 0)"),
    (model.Field("x", "int", minimum=1, also=((-1, "off"),)), -7,
     "must be a positive integer, or -1 for off (got an integer below 1)"),
    (model.Field("x", "int", minimum=1), 1.5, "must be a positive integer (got a number)"),  # a kind refused
    (model.Field("x", "int", minimum=1), True, "must be a positive integer (got true or false)"),
    (model.Field("x", "int", minimum=1), "-1", "must be a positive integer (got a string)"),
]


@pytest.mark.parametrize(("field", "value", "message"), OUTSIDE)
def test_a_number_outside_its_bounds_says_which_bound_and_never_its_value(field, value, message):
    with pytest.raises(model.FieldError) as exc:
        model.check(field, value, ("x",))
    assert str(exc.value) == f"field 'x': {message}" and exc.value.value is value


def test_an_open_object_keeps_unknown_keys_and_a_closed_one_names_the_nearest_field():
    fields = (model.Field("a", "object", fields=(model.Field("nnodes", "int"),)),)
    opened = (dataclasses.replace(fields[0], open=True),)
    assert model.check_fields(opened, {"a": {"nnodes": 1, "new": [1]}}, complete=True) == {"a": {"nnodes": 1,
                                                                                                 "new": [1]}}
    with pytest.raises(model.FieldError) as exc:
        model.check_fields(fields, {"a": {"nnode": 1}}, complete=True)
    assert exc.value.field == "a.nnode" and "did you mean 'nnodes'" in str(exc.value) and exc.value.got == ""


def test_a_required_field_is_required_even_when_absent_fields_are_left_out():
    fields = (model.Field("kind", "str", required=True), model.Field("hint", "str"))
    with pytest.raises(model.FieldError, match="field 'kind': is required"):
        model.check_fields(fields, {"hint": "h"}, complete=False)
    assert model.check_fields(fields, {"kind": "k"}, complete=False) == {"kind": "k"}
    with pytest.raises(model.FieldError, match="field 'hint': must be a string"):
        model.check_fields(fields, {"kind": "k"}, complete=True)  # complete: absent is null, and hint is not nullable


def test_nul_is_refused_unless_the_model_keeps_strings_as_given():
    text = model.Field("env", "map", item=model.Field("", "str"))
    with pytest.raises(model.FieldError) as exc:
        model.check(text, {"A": "x\x00y"}, ("env",))
    assert exc.value.field == "env.A" and "\x00" not in str(exc.value)
    assert model.check(text, {"A": "x\x00y"}, allow_nul=True) == {"A": "x\x00y"}


# One field of each kind, with values the walk takes and values it refuses: the schema must say the same.
KINDS = [
    (model.Field("x", "str", choices=("a", "b")), ["a"], ["c", 1, None]),
    (model.Field("x", "str", pattern=(r"^[a-z]+$", "letters")), ["ab"], ["a1", ""]),
    (model.Field("x", "int", minimum=1, maximum=5), [1, 5], [0, 6, 1.5, True, "1"]),
    (model.Field("x", "int", nullable=True), [None, -3], ["x"]),
    (model.Field("x", "int", minimum=1, also=((-1, "off"),)), [1, 7, -1], [0, -2, True, -1.5, "-1"]),
    (model.Field("x", "number", minimum=0, exclusive=True), [0.5, 2], [0, -1, False]),
    (model.Field("x", "bool"), [True], [1, "true"]),
    (model.Field("x", "path"), ["/a/b"], ["a/b", "/a b"]),
    (model.Field("x", "paths", item=model.Field("", "path")), ["/a", ["/a", "/b"]], [[], ["a"]]),
    (model.Field("x", "list", item=model.Field("", "int")), [[], [1]], [[1, "a"], {}]),
    (model.Field("x", "map", pattern=(r"^[A-Z]+$", "capitals"), item=model.Field("", "str")), [{"A": "1"}],
     [{"a": "1"}, {"A": 1}]),
    (model.Field("x", "object", fields=(model.Field("k", "int", required=True),)), [{"k": 1}],
     [{}, {"k": 1, "j": 2}]),
    (model.Field("x", "object", open=True, fields=(model.Field("k", "int"),)), [{"k": 1, "j": 2}], [{"k": "1"}]),
    (model.Field("x", "mapping"), [{"any": [1]}], [[1]]),
]


@pytest.mark.parametrize(("field", "good", "bad"), KINDS, ids=[f"{f.kind}-{i}" for i, (f, _, _) in enumerate(KINDS)])
def test_the_schema_generator_agrees_with_the_walk(field, good, bad):
    jsonschema = pytest.importorskip("jsonschema")
    schema = model.json_schema((field,), title="t", description="d")
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in good:
        model.check(field, value)
        assert validator.is_valid({"x": value}), value
    for value in bad:
        with pytest.raises(model.FieldError):
            model.check(field, value)
        assert not validator.is_valid({"x": value}), value


def test_a_derived_default_is_said_in_the_schema():
    schema = model.schema_of(model.Field("x", "str", "The thing.", derived="<a>/b"))
    assert schema["description"] == "The thing. Default: <a>/b."


# Typed parts: a dataclass made from an object Field, its attributes its sub-fields.
NESTED = model.Field("resumed_from", "object", open=True, nullable=True, fields=(
    model.Field("from", "int", nullable=True), model.Field("path", "str", nullable=True),
    model.Field("skipped", "list", nullable=True, default=[], item=model.Field("", "str")),
    model.Field("evidence", "object", nullable=True, fields=(model.Field("line", "str", nullable=True),))))


def test_a_part_is_a_dataclass_of_its_fields_sub_fields_made_once():
    part = model.part_class(NESTED)
    assert part is model.part_class(NESTED) and part.__name__ == "ResumedFrom" and part.FIELD is NESTED
    # A keyword names its attribute with a trailing underscore; the rest are the sub-fields' names, in order.
    assert [f.name for f in dataclasses.fields(part)] == ["from_", "path", "skipped", "evidence", "extra"]
    made = part.of({"from": 3, "evidence": {"line": "l"}, "newer": {"kept": 1}})
    assert (made.from_, made.path, made.evidence.line, made.extra) == (3, None, "l", {"newer": {"kept": 1}})
    assert made.to_dict() == {"newer": {"kept": 1}, "from": 3, "evidence": {"line": "l"}}  # as it was given


def test_a_part_absent_or_null_reads_as_an_empty_part_and_is_written_as_it_was_read():
    part = model.part_class(NESTED)
    empty = part.of(None)
    assert not empty and empty.from_ is None and empty.skipped == [] and empty.evidence.line is None
    assert empty.to_dict() is None and not empty.evidence and empty.evidence.to_dict() is None
    assert part.of({}).to_dict() == {} and not part.of({})
    given = {"from": None, "evidence": None}
    assert part.of(given) and part.of(given).to_dict() == given  # a null given stays, an absent one stays absent
    empty.path = "/c"  # set since: written
    assert empty and empty.to_dict() == {"path": "/c"}
    assert part(from_=1).to_dict() == {"from": 1, "path": None, "skipped": [], "evidence": None}


def test_a_mapping_or_none_assigned_to_a_part_becomes_one():
    part = model.part_class(NESTED)
    made = part.of({"evidence": {"line": "a"}})
    made.evidence = {"line": "b"}
    assert isinstance(made.evidence, model.Part) and made.evidence.line == "b"
    made.evidence = None
    assert isinstance(made.evidence, model.Part) and not made.evidence and made.to_dict() == {"evidence": None}
