"""library/ray_node.py's fake host and how its tests run the module (test_ray_node_module.py, test_ray_node_store.py;
the fixtures over them are in conftest.py)."""

import json

import pytest
import ray_node
from ansible.module_utils.testing import patch_module_args

PYTHON = "/opt/ray/bin/python"
RAY = "/opt/ray/bin/ray"
VERSION_PROBE = [PYTHON, "-c", "import importlib.metadata as m; print(m.version('ray'))"]


class Host:
    """The processes of one host, as ray_node sees them through module_utils/node/ray_node.py and run_command."""

    def __init__(self):
        self.raylets, self.drivers, self.killed = [], [], []
        self.gcs_died = False  # a head whose GCS server exited while its raylet lives on
        self.commands, self.environs = [], []
        self.version = (0, "2.60.0\n", "")
        self.start = (0, "Ray runtime started.", "")

    def run_command(self, args, environ_update=None, **kwargs):
        self.commands.append(list(args))
        self.environs.append(environ_update)
        if list(args) == VERSION_PROBE:
            return self.version
        if args[1] == "stop":
            self.raylets = []
            return 0, "Stopped all 7 Ray processes.", ""
        if args[1] == "start":
            result = self.start.pop(0) if isinstance(self.start, list) else self.start
            if result[0] == 0:
                self.raylets = [4242]
            return result
        raise AssertionError(f"unexpected command {args}")

    def kill_pids(self, pids):
        self.killed += pids
        self.drivers = [p for p in self.drivers if p not in pids]
        return list(pids)


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ray_node.main()
    out = json.loads(capsys.readouterr().out)
    return exc.value.code, out


def read_text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def read_state(args):
    with open(args["state_file"], encoding="utf-8") as handle:
        return json.load(handle)
