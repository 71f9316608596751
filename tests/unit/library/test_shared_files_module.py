"""library/shared_files.py: small files kept in place in one call (the code_tree lookup makes its entries:
tests/unit/lookup_plugins/test_code_tree_lookup.py)."""

import base64
import json
import os

import pytest
import shared_files
from ansible.module_utils.testing import patch_module_args


def entry(dest, text, mode="0644"):
    return {"dest": dest, "content_b64": base64.b64encode(text.encode()).decode(), "mode": mode}


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        shared_files.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_writes_what_differs_and_reads_back(tmp_path, capsys):
    root = str(tmp_path)
    files = [entry("smoke/probe.py", "print(1)\n"), entry("plugins/p/__init__.py", "")]
    code, out = run(capsys, {"root": root, "files": files, "read": ["verl/v1/marker.py"]})
    assert code == 0 and out["changed"] is True and out["written"] == ["smoke/probe.py", "plugins/p/__init__.py"]
    assert out["contents"] == {"verl/v1/marker.py": None}
    with open(tmp_path / "smoke" / "probe.py", encoding="utf-8") as handle:
        assert handle.read() == "print(1)\n"
    os.makedirs(tmp_path / "verl" / "v1")
    (tmp_path / "verl" / "v1" / "marker.py").write_text('DIGEST = "x"\n')
    code, out = run(capsys, {"root": root, "files": files, "read": ["verl/v1/marker.py"]})
    assert code == 0 and out["changed"] is False and out["contents"] == {"verl/v1/marker.py": 'DIGEST = "x"\n'}
    # A changed file or mode is written again.
    os.chmod(tmp_path / "smoke" / "probe.py", 0o600)
    code, out = run(capsys, {"root": root, "files": files})
    assert out["written"] == ["smoke/probe.py"] and os.stat(tmp_path / "smoke" / "probe.py").st_mode & 0o777 == 0o644


def test_check_mode_writes_nothing(tmp_path, capsys):
    code, out = run(capsys, {"root": str(tmp_path), "files": [entry("a.py", "x")], "_ansible_check_mode": True})
    assert code == 0 and out["changed"] is True and not os.path.exists(tmp_path / "a.py")


@pytest.mark.parametrize("dest", ["../escape.py", "/etc/passwd", "a/../../b"])
def test_a_path_outside_root_is_refused(tmp_path, capsys, dest):
    code, out = run(capsys, {"root": str(tmp_path / "root"), "files": [entry(dest, "x")]})
    assert code == 1 and "is not a path inside" in out["msg"]
