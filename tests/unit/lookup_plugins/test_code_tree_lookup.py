"""lookup_plugins/code_tree.py: the files of a folder on the control host, as library/shared_files.py's entries."""

import base64

import code_tree


def test_code_tree_lists_a_folder_under_a_prefix(tmp_path):
    pkg = tmp_path / "plug"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("a")
    (pkg / "sub" / "m.py").write_text("b")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    found = code_tree.entries(str(pkg), "common/code/plugins")
    assert [e["dest"] for e in found] == ["common/code/plugins/plug/__init__.py", "common/code/plugins/plug/sub/m.py"]
    assert base64.b64decode(found[1]["content_b64"]) == b"b"
    assert [e["dest"] for e in code_tree.entries(str(pkg / "__init__.py"))] == ["__init__.py"]
