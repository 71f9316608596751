"""plugin_utils/safe_yaml.py, the one YAML reader of spec and suite files: each YAML edge case is a one-line error
naming the file, never a traceback, a hang or a quoted value (issue 22, class 6)."""

import os

import pytest

from plugin_utils import jobspec_input, safe_yaml
from plugin_utils.jobspec_input import JobSpecError, SuiteError

SECRET = "s3cr3t-value-0123456789"


def laughs(levels=9):
    """Nested aliases: each level lists the one before nine times (9**levels leaves once expanded)."""
    lines = [f"  l0: &l0 [{SECRET}, {SECRET}]"]
    for i in range(1, levels + 1):
        lines.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "metadata:\n" + "\n".join(lines) + "\n"


BAD = {
    "billion-laughs": (laughs(), "aliases expand to more than"),
    "self-alias": ("metadata: &a\n  x: *a\n", "an alias refers to a node that contains it"),
    "self-alias-list": ("metadata:\n  x: &a [1, *a]\n", "an alias refers to a node that contains it"),
    "5000-digits": ("metadata:\n  n: " + "7" * 5000 + "\n", "a number of more than"),
    "long-float": ("metadata:\n  n: 1." + "7" * 5000 + "\n", "a number of more than"),
    "duplicate-key": (f"metadata:\n  a: {SECRET}\n  a: {SECRET}\n", "a key appears twice"),
    "deep": ("metadata: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
    "many-aliases": ("metadata:\n  a: &a 1\n  b: [" + ", ".join(["*a"] * 500) + "]\n", "more than 100 aliases"),
    "syntax": (f"metadata: {SECRET}: x\n", "mapping values are not allowed here"),
    "python-tag": ("metadata: !!python/object/apply:os.system [echo]\n", "could not determine a constructor"),
}


def one_line_without_values(message, path):
    assert "\n" not in message and path in message, message
    assert SECRET not in message and "7777" not in message, message


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_spec_file_is_refused_in_one_line(tmp_path, case):
    text, problem = BAD[case]
    path = str(tmp_path / "x.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("workload: smoke\n" + text)
    with pytest.raises(JobSpecError) as err:
        jobspec_input.load_spec_file(path)
    one_line_without_values(str(err.value), path)
    assert problem in str(err.value)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_suite_file_is_refused_in_one_line(tmp_path, case):
    text, problem = BAD[case]
    (tmp_path / "s.yaml").write_text("entries:\n  - {name: a, spec: smoke}\n" + text, encoding="utf-8")
    with pytest.raises(SuiteError) as err:
        jobspec_input.load_suite("s", str(tmp_path))
    one_line_without_values(str(err.value), str(tmp_path / "s.yaml"))
    assert problem in str(err.value)


def test_a_suite_with_a_duplicate_entries_key_is_refused(tmp_path):
    (tmp_path / "s.yaml").write_text("entries:\n  - {name: a, spec: smoke}\nentries:\n  - {name: b, spec: smoke}\n")
    with pytest.raises(SuiteError, match="line 3: a key appears twice"):
        jobspec_input.load_suite("s", str(tmp_path))


def test_the_line_is_named():
    with pytest.raises(safe_yaml.YamlError) as err:
        safe_yaml.load_text("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert str(err.value) == "f.yaml: line 3: a key appears twice in one mapping" and err.value.line == 3


def test_ordinary_yaml_still_loads_aliases_and_merges_included():
    text = "base: &b {x: 1, n: 123456789012345678901234567890}\nt:\n  <<: *b\n  y: 2.5\nl: [*b, *b]\n"
    data = safe_yaml.load_text(text, "f.yaml")
    assert data["t"] == {"x": 1, "n": 123456789012345678901234567890, "y": 2.5} and data["l"][1]["x"] == 1
    assert safe_yaml.load_text("", "f.yaml") is None


def test_files_that_are_not_yaml_text(tmp_path):
    (tmp_path / "bin.yaml").write_bytes(b"a: \xff\xfe\n")
    (tmp_path / "big.yaml").write_text("a: " + "x" * safe_yaml.MAX_BYTES)
    os.mkfifo(tmp_path / "fifo.yaml")
    for name, problem in (("bin.yaml", "not UTF-8"), ("big.yaml", "larger than"), ("fifo.yaml", "not a regular"),
                          ("none.yaml", "cannot read")):
        with pytest.raises(safe_yaml.YamlError, match=problem):
            safe_yaml.load_file(str(tmp_path / name))


def test_the_projects_own_spec_and_suite_files_load():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    for folder in ("jobspecs", "suites"):
        for name in os.listdir(os.path.join(root, folder)):
            if name.endswith(".yaml"):
                assert isinstance(safe_yaml.load_file(os.path.join(root, folder, name)), dict), name
