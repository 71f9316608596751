"""Which commands a verl launch script would run start Python on a module, and which of those are verl's trainers.

plugin_utils/verl_script.py follows the script's commands and keeps each simple one as a Command (its words, as
plugin_utils/shell_values.py expands them); here a command's words are read as the launchers read them: python (-m or a
verl/trainer/X.py script), torchrun and torch.distributed.run, uv run, ray job submit --, behind exec, nohup, env,
nice, stdbuf or timeout. Such a command is a Launch of its module, and one of a verl trainer module (verl.trainer.X) a
Trainer. It is apart from the reader because it is about verl's launchers' command lines, not about bash.
"""

import os
import re
from dataclasses import dataclass, replace

from plugin_utils.shell_lexer import ASSIGN

__all__ = ("Command", "Launch", "Trainer", "command_name", "launch_of")

_PYTHON = re.compile(r"python[0-9.]*")
_MODULE_FILE = re.compile(r"(?:^|.*/)verl/trainer/([A-Za-z0-9_]+)\.py")
_TORCH_RUN = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's and python's flags that take no value (every other -x or --flag takes the next word, unless --flag=x).
_TORCHRUN_BOOL = ("--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--module")
_PYTHON_VALUE = ("-X", "-W", "-Q")
_WRAPPERS = ("exec", "nohup", "command", "time", "builtin")
_UV_BOOL = ("--no-project", "--frozen", "--locked", "--isolated", "--no-sync", "--active", "--no-dev", "-q", "-v",
            "--quiet", "--verbose", "--offline")


@dataclass(frozen=True)
class Command:
    """One simple command as it would run: its words, the redirections kept aside ((line, text)), and maybe: why it
    runs only sometimes (inside a branch the script cannot decide, a loop, a function)."""

    line: int
    words: tuple
    redirects: tuple
    maybe: str | None


@dataclass(frozen=True)
class Launch:
    """A command that starts Python (or torchrun, uv run, ray job submit) on a module: module None when the words
    that would say which are unknown (why)."""

    command: Command
    module: str | None
    launcher: tuple  # the words before the module: python3, torchrun and its flags...
    args: tuple  # the words after it: hydra's key=value overrides, its flags
    why: str | None = None


@dataclass(frozen=True)
class Trainer:
    """A launch of a verl trainer module (verl.trainer.X), numbered in script order, with the environment it would
    get (name: Var; only for the trainer asked for)."""

    number: int
    launch: Launch
    env: dict | None

    @property
    def command(self):
        return self.launch.command

    @property
    def module(self):
        return self.launch.module

    @property
    def launcher(self):
        return self.launch.launcher

    @property
    def args(self):
        return self.launch.args


def command_name(command):
    """A command as the report may show it: its first word when that is a plain name, never its other words."""
    first = command.words[0] if command.words else None
    if first is not None and not first.unknowns and re.fullmatch(r"[A-Za-z0-9_./+-]{1,64}", first.text):
        return first.text
    return f"a command on line {command.line}"


def launch_of(command):
    """The Launch a command is (Python, torchrun, uv run or ray job submit on a module), or None."""
    words = list(command.words)
    k = 0
    while k < len(words) and not words[k].unknowns:
        base = os.path.basename(words[k].text)
        if base in _WRAPPERS:
            k += 1
        elif base == "env":
            k += 1
            while k < len(words) and (ASSIGN.match(words[k].text) or words[k].text.startswith("-")):
                k += 1
        elif base in ("nice", "stdbuf", "timeout"):
            k += 1
            while k < len(words) and words[k].text.startswith("-"):
                k += 2 if words[k].text in ("-n", "-s", "-k") else 1
            k += base == "timeout"
        else:
            break
    if k >= len(words):
        return None
    word = words[k]
    if word.unknowns:
        rest = [w.text for w in words[k + 1:] if not w.unknowns]
        module = next((rest[j + 1] for j, t in enumerate(rest[:-1]) if t == "-m"), None)
        if module and module.startswith("verl"):
            return Launch(command, None, tuple(words[:k + 1]), (), f"{word.unknowns[0].raw} runs {module}: "
                          f"{word.unknowns[0].raw} is {word.unknowns[0].why}")
        return Launch(command, None, tuple(words[:k + 1]), (), f"{word.unknowns[0].raw} is {word.unknowns[0].why}")
    base = os.path.basename(word.text)
    if base == "uv" and k + 1 < len(words) and words[k + 1].text == "run":
        k += 2  # uv run [its options] python ... (or uv run -m module)
        while k < len(words) and words[k].text.startswith("-") and words[k].text not in ("-m", "--module"):
            k += 1 if "=" in words[k].text or words[k].text in _UV_BOOL else 2
        if k < len(words) and words[k].text in ("-m", "--module"):
            return _module_of(command, words, k - 1, python=True)
        return _after_launcher(command, words, k)
    if base == "ray" and [w.text for w in words[k + 1:k + 3]] == ["job", "submit"]:
        rest = next((j for j in range(k + 3, len(words)) if words[j].text == "--"), None)
        if rest is None:
            return None
        return _after_launcher(command, words, rest + 1)
    if _PYTHON.fullmatch(base) or base == "torchrun":
        return _module_of(command, words, k, python=base != "torchrun")
    return None


def _after_launcher(command, words, k):
    """The launch of the words from k on (after uv run, ray job submit --): the words before are its launcher's."""
    launch = launch_of(replace(command, words=tuple(words[k:])))
    return launch and replace(launch, command=command, launcher=tuple(words[:k]) + launch.launcher)


def _module_of(command, words, k, python):
    """The module (or verl/trainer/X.py script) a python or torchrun command at k runs: its Launch, or None."""
    j = k + 1
    while j < len(words):
        word = words[j]
        text = word.text
        if word.unknowns and not text.startswith("-") and not _MODULE_FILE.fullmatch(text):
            if word.pieces[0].unknown is None and "=" in word.pieces[0].text:
                return None  # key=$VALUE where the script would be: no program a launcher runs
            return Launch(command, None, tuple(words[:j + 1]), (),
                          f"{word.unknowns[0].raw} (line {word.line}) is {word.unknowns[0].why}")
        if text in ("-m", "--module") and j + 1 < len(words):
            target = words[j + 1]
            if target.unknowns:
                return Launch(command, None, tuple(words[:j + 2]), (),
                              f"its module {target.unknowns[0].raw} is {target.unknowns[0].why}")
            module, end = target.text, j + 2
        elif text.startswith("-m") and not text.startswith("--") and len(text) > 2 and python:
            module, end = text[2:], j + 1
        elif _MODULE_FILE.fullmatch(text):
            module, end = "verl.trainer." + _MODULE_FILE.fullmatch(text).group(1), j + 1
        elif word.unknowns:  # an option whose value is not known (--nproc_per_node=$1): not the module
            j += 1
            continue
        elif text == "-c" and python or not text.startswith("-") or text.endswith(".py"):
            return None  # python -c, or another program (a script that is not one of verl's trainers)
        else:
            j += 2 if (text in _PYTHON_VALUE if python else text.startswith("-") and "=" not in text and
                       text not in _TORCHRUN_BOOL) else 1
            continue
        if module in _TORCH_RUN:
            return _module_of(command, words, end - 1, python=False)
        return Launch(command, module, tuple(words[:j]), tuple(words[end:]))
    return None
