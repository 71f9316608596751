"""What the project publishes from its models, each generated; unit tests fail when a file differs from its model.

  .venv/bin/python -m plugin_utils.schemas      # rewrites them all

jobspec.schema.json: a spec file (module_utils/jobspec/fields.py SPEC_FIELDS, through plugin_utils/jobspec_schema.py).
job_status.schema.json: a job record's status.json (module_utils/jobs/record/status.py FIELDS), for dashboards and a
site's scripts that read records.
jobspecs/README.md: its field table, between the two FIELD_TABLE marks, from SPEC_FIELDS.
"""

import json
import os
import re

from plugin_utils import PROJECT_ROOT, jobspec_schema

from ansible.module_utils.base import model  # isort: skip
from ansible.module_utils.jobs.record import status  # isort: skip
from ansible.module_utils.jobspec.fields import SPEC_FIELDS  # isort: skip

SCHEMAS = {"jobspec.schema.json": jobspec_schema.json_schema, "job_status.schema.json": status.json_schema}
README = os.path.join("jobspecs", "README.md")
FIELD_TABLE = ("<!-- fields: generated from SPEC_FIELDS by python -m plugin_utils.schemas; do not edit -->",
               "<!-- end of fields -->")
# A placeholder such as <shared_root>/jobs/<submission_id>, with the path around it: code in Markdown, else a
# renderer takes <shared_root> for an HTML tag and drops it.
_PLACEHOLDER = re.compile(r"[\w./:-]*(?:<[^<>|]+>[\w./:-]*)+")


def schema_text(name) -> str:
    return json.dumps(SCHEMAS[name](), indent=2) + "\n"


def _cell(text):
    text = _PLACEHOLDER.sub(lambda m: f"`{m.group(0).rstrip('.:')}`{m.group(0)[len(m.group(0).rstrip('.:')):]}",
                            text)
    return text.replace("|", "\\|")


def _default(f):
    if f.required:
        return "required"
    if f.default is not None:
        return f"`{f.default if isinstance(f.default, str) else json.dumps(f.default)}`"
    if f.derived:
        return _cell(f.derived)
    return "null" if f.nullable else ""


def field_table() -> str:
    """jobspecs/README.md's table of every field of a spec file (nested ones dotted), from SPEC_FIELDS."""
    rows = ["| field | value | default | meaning |", "|---|---|---|---|"]
    for path, f in model.walk(SPEC_FIELDS):
        value = ("a mapping of the fields below" if f.kind == "object"
                 else f"a mapping, each name {f.pattern[1]}, each value {model.expect(f.item)}"
                 if f.kind == "map" and f.pattern
                 else model.expect(f))
        rows.append(f"| `{path}` | {_cell(value)} | {_default(f)} | {_cell(f.doc)} |")
    return "\n".join(rows) + "\n"


def readme_text(text) -> str:
    """text (jobspecs/README.md) with field_table() between its FIELD_TABLE marks; ValueError without them."""
    begin, end = (text.find(mark) for mark in FIELD_TABLE)
    if begin < 0 or end < begin:
        raise ValueError(f"{README}: no {FIELD_TABLE[0]} ... {FIELD_TABLE[1]}")
    return f"{text[:begin]}{FIELD_TABLE[0]}\n{field_table()}{text[end:]}"


def _main():
    for name in SCHEMAS:
        with open(os.path.join(PROJECT_ROOT, name), "w", encoding="utf-8") as handle:
            handle.write(schema_text(name))
        print(f"wrote {name}")
    path = os.path.join(PROJECT_ROOT, README)
    with open(path, encoding="utf-8") as handle:
        text = readme_text(handle.read())
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {README}'s field table")


if __name__ == "__main__":
    _main()
