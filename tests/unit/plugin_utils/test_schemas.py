"""plugin_utils/schemas.py: jobspecs/README.md's field table is generated from SPEC_FIELDS, as the JSON Schemas are
(their own tests: tests/unit/module_utils/test_jobspec.py, tests/unit/module_utils/jobs/test_status.py)."""

import dataclasses
import os

import pytest
from ansible.module_utils.base import model
from ansible.module_utils.jobspec.fields import SPEC_FIELDS

from plugin_utils import PROJECT_ROOT, schemas


def readme():
    with open(os.path.join(PROJECT_ROOT, schemas.README), encoding="utf-8") as handle:
        return handle.read()


def test_the_readme_s_field_table_is_the_generated_one():
    assert readme() == schemas.readme_text(readme()), "regenerate: .venv/bin/python -m plugin_utils.schemas"


def test_the_table_has_a_row_for_every_field_nested_ones_included():
    text = readme()
    paths = [path for path, _ in model.walk(SPEC_FIELDS)]
    assert {"retries.max", "retries.on", "resume_from", "debug.breakpoints", "debug.post_mortem"} <= set(paths)
    for path in paths:
        assert f"\n| `{path}` | " in text, path


def test_a_field_s_doc_changed_in_the_table_makes_the_readme_stale(monkeypatch):
    changed = tuple(dataclasses.replace(f, doc="Another meaning.") if f.name == "save_freq" else f
                    for f in SPEC_FIELDS)
    monkeypatch.setattr(schemas, "SPEC_FIELDS", changed)
    assert schemas.readme_text(readme()) != readme()
    assert "| `save_freq` | a positive integer, or -1 for no checkpoints | `10` | Another meaning. |" in \
        schemas.field_table()


def test_placeholders_are_code_so_markdown_keeps_them():
    row = next(line for line in schemas.field_table().splitlines() if line.startswith("| `output_dir` |"))
    assert "`<shared_root>/jobs/<submission_id>`" in row


def test_a_readme_without_the_marks_is_an_error_naming_them():
    with pytest.raises(ValueError, match="jobspecs/README.md: no <!-- fields"):
        schemas.readme_text("# JobSpecs\n\nno table here\n")
