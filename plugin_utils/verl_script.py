"""A verl launch script read as text, split the way a POSIX shell splits it, and never run.

A launch script is data, like every file a user hands the project: no line of it runs, no variable is looked up in
this process's environment, no substitution is evaluated. What the script itself sets to a literal (`NAME=VALUE`,
`export NAME=VALUE`) expands where it is used ($NAME, ${NAME}, split into words like the shell's unquoted expansion);
anything else that would expand when the script ran ($HOME, $1, $@, $(...), `...`, ${X:-y}, $((...)), ~) stays in the
word as the script wrote it, with an Unknown that says what it is and where, for the user to settle.

The words are plugin_utils/shell_lexer.py's; here they are expanded command by command, and the shell's compound
commands are followed only as far as knowing what runs conditionally: a variable set inside an if, a loop, a case or a
function depends on how the script runs, so its value is unknown. Errors are ScriptError, one line naming the file,
the line and the problem, never a value. Control host only (plugin_utils/verl_import.py makes a JobSpec of it).
"""

import re
from dataclasses import dataclass, replace

from plugin_utils.shell_lexer import ASSIGN, MAX_BYTES, NAME, SPECIAL, Lexer, Op, Redirect, ScriptError, Seg, read

__all__ = ("MAX_BYTES", "NOT_SET", "Command", "Piece", "ScriptError", "Trainer", "Unknown", "Var", "Word", "parse",
           "read", "trainers")

NOT_SET = "not set by the script (it would come from the environment of whoever runs it)"
_DECLARE = ("export", "declare", "typeset", "readonly", "local")
# The module of a trainer command: `python -m verl.trainer.X`, `-mverl.trainer.X`, or the file verl/trainer/X.py.
_MODULE = re.compile(r"verl\.trainer\..+")
_MODULE_FILE = re.compile(r"(?:^|.*/)verl/trainer/([A-Za-z0-9_]+)\.py")


@dataclass(frozen=True)
class Unknown:
    """Something that would expand when the script ran, as the script wrote it ($HOME, $(date)), and why it is not
    known here."""

    raw: str
    why: str
    line: int


@dataclass(frozen=True)
class Piece:
    """Part of a word: literal text, or an Unknown kept as written. quoted: safe from the shell's word splitting."""

    text: str
    quoted: bool = False
    unknown: Unknown | None = None


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal and the expansions the script itself makes known."""

    pieces: tuple
    line: int

    @property
    def text(self):
        return "".join(p.text for p in self.pieces)

    @property
    def unknowns(self):
        return [p.unknown for p in self.pieces if p.unknown is not None]


@dataclass(frozen=True)
class Var:
    """A shell variable the script set: its value's pieces, the line, whether exported, and when its value depends on
    how the script runs (set inside an if, a loop or a function; after a `source`), why."""

    pieces: tuple
    line: int
    exported: bool = False
    doubt: str | None = None


@dataclass(frozen=True)
class Command:
    """One simple command: its words; `env`, the variables exported when it runs and its NAME=VALUE prefixes (name:
    Var); the redirections kept aside ((line, text)); how deep inside compound commands it is (0: it always runs)."""

    line: int
    words: tuple
    env: dict
    redirects: tuple
    depth: int


@dataclass(frozen=True)
class Trainer:
    """A command that runs a verl trainer: `python -m verl.trainer.<module> key=value ...` (or under torchrun)."""

    number: int  # 1-based, in script order
    command: Command
    module: str
    launcher: tuple  # the words before the module: python3, torchrun and its flags...
    args: tuple  # the words after it: hydra's key=value overrides, its flags


def _why(raw):
    """What an expansion the script cannot know is, in words."""
    if raw.startswith("$(("):
        return "arithmetic: not evaluated"
    if raw.startswith(("$(", "`")):
        return "a command substitution: never run"
    if raw.startswith("$'"):
        return "ANSI-C quoting: not decoded"
    if raw.startswith("~"):
        return "the home directory of whoever runs it"
    if raw.startswith("("):
        return "an array: not read"
    inner = raw[2:-1] if raw.startswith("${") else raw[1:]
    if inner.isdigit():
        return "one of the script's arguments"
    if inner in SPECIAL:
        return SPECIAL[inner]
    return "a parameter expansion with an operator: not evaluated"


class _Shell:
    """The script's simple commands, in order, each with the words it would run: the variables the script sets are
    followed as a shell follows them, without running anything."""

    def __init__(self, name):
        self.name, self.vars, self.stack, self.commands = name, {}, [], []

    def run(self, tokens):
        words, redirects = [], []
        for tok in tokens:
            if isinstance(tok, Op):
                self._command(words, redirects)
                words, redirects = [], []
                if tok.text == "(":
                    self.stack.append("(")
                elif tok.text == ")" and self.stack and self.stack[-1] == "(":
                    self.stack.pop()  # else a case pattern's )
            elif isinstance(tok, Redirect):
                redirects.append(tok)
            else:
                words.append(tok)
        self._command(words, redirects)
        return self.commands

    def _command(self, words, redirects):
        while words:  # reserved words: only what runs conditionally matters here
            first = words[0].plain()
            if first in ("then", "do", "else", "elif", "!", "time"):
                words = words[1:]
            elif first in ("if", "while", "until", "{"):
                self.stack.append(first)
                words = words[1:]
            elif first in ("fi", "done", "esac", "}"):
                self.stack[-1:] = []
                words = words[1:]
            elif first in ("for", "select", "case", "function"):
                if first != "function" or words[-1].plain() == "{":
                    self.stack.append(first)
                name = words[1].plain() if len(words) > 1 else None
                if first in ("for", "select") and name and NAME.fullmatch(name):
                    self.vars[name] = Var((), words[0].line, doubt=f"the loop variable of line {words[0].line}")
                return
            else:
                break
        if not words:
            return
        line = words[0].line
        doubt = (f"set inside an if, a loop, a case or a function (line {line}): its value depends on how the "
                 "script runs") if self.stack else None
        prefix = []
        while words and self._assignment(words[0]):
            prefix.append(self._assignment(words[0]))
            words = words[1:]
        if not words:
            for name, append, segs, at in prefix:
                self._set(name, append, segs, at, doubt)
            return
        expanded = [w for raw in words for w in self._expand(raw)]
        first = expanded[0].text if expanded and not expanded[0].unknowns else None
        if first in _DECLARE:
            return self._declare(first, words[1:], doubt)
        if first in ("source", ".", "eval"):
            for name, var in self.vars.items():
                self.vars[name] = replace(var, doubt=var.doubt or f"line {line} ({first}) may change it")
        elif first in ("unset", "read"):
            for raw in words[1:]:
                name = raw.plain()
                if name and NAME.fullmatch(name):
                    self.vars[name] = Var((), line, doubt=f"read on line {line}" if first == "read" else doubt)
        env = {n: v for n, v in self.vars.items() if v.exported}
        for name, _append, segs, at in prefix:
            env[name] = Var(self._pieces(segs), at, True, doubt)
        self.commands.append(Command(line, tuple(expanded), env, tuple((r.line, r.text) for r in redirects),
                                     len(self.stack)))

    def _declare(self, builtin, words, doubt):
        """export/declare/typeset/readonly/local: their NAME=VALUE are assignments; export (declare -x) marks the
        variable for the environment of every later command."""
        export, unexport = builtin == "export", False
        for raw in words:
            plain = raw.plain()
            if plain and plain.startswith("-"):
                export, unexport = export or "x" in plain, "n" in plain  # -n: no longer exported
                continue
            found = self._assignment(raw)
            if found:
                self._set(*found, doubt, exported=False if unexport else export or None)
            elif plain and NAME.fullmatch(plain) and unexport and plain in self.vars:
                self.vars[plain] = replace(self.vars[plain], exported=False)
            elif plain and NAME.fullmatch(plain) and export:
                old = self.vars.get(plain)
                pieces = old.pieces if old else (Piece("$" + plain, False, Unknown("$" + plain, NOT_SET, raw.line)),)
                self.vars[plain] = Var(pieces, old.line if old else raw.line, True, old.doubt if old else doubt)

    @staticmethod
    def _assignment(raw):
        """(name, append, value segments, line) of a NAME=VALUE word, or None."""
        first = raw.segs[0] if raw.segs else None
        m = ASSIGN.match(first.text) if first and first.kind == "lit" and not first.quoted else None
        if not m:
            return None
        rest = first.text[m.end():]
        segs = ((Seg("lit", rest, False, first.line),) if rest else ()) + raw.segs[1:]
        return m.group(1), bool(m.group(2)), segs, raw.line

    def _set(self, name, append, segs, line, doubt, exported=None):
        old = self.vars.get(name)
        pieces = (old.pieces if append and old else ()) + self._pieces(segs)
        was = bool(old and old.exported)
        self.vars[name] = Var(pieces, line, was if exported is None else exported,
                              doubt or (old.doubt if append and old else None))

    def _pieces(self, segs):
        out = []
        for seg in segs:
            if seg.kind == "lit":
                out.append(Piece(seg.text, seg.quoted))
                continue
            var = self.vars.get(seg.text.strip("${}")) if seg.kind == "var" else None
            if seg.kind == "var" and var is not None and var.doubt is None:
                out.extend(Piece(p.text, seg.quoted, p.unknown) for p in var.pieces)
            else:
                why = _why(seg.text) if seg.kind == "unknown" else var.doubt if var is not None else NOT_SET
                out.append(Piece(seg.text, seg.quoted, Unknown(seg.text, why, seg.line)))
        return tuple(out)

    def _expand(self, raw):
        """The words one raw word makes: an unquoted known value is split at blanks, as the shell splits it."""
        fields, cur, has = [], [], False
        for seg in raw.segs:
            for p in self._pieces((seg,)):
                if seg.kind == "var" and not seg.quoted and p.unknown is None:
                    for k, part in enumerate(re.split(r"[ \t\n]+", p.text)):
                        if k and has:
                            fields.append(cur)
                            cur, has = [], False
                        if part:
                            cur.append(Piece(part))
                            has = True
                else:
                    cur.append(p)
                    has = has or bool(p.text) or p.quoted
        if has:
            fields.append(cur)
        return [Word(tuple(f), raw.line) for f in fields]


def parse(text, name):
    """The simple commands of a script's text, in order (ScriptError naming `name` and the line when it cannot)."""
    return _Shell(name).run(Lexer(text, name).tokens())


def trainers(commands):
    """The commands that run a verl trainer, numbered in script order."""
    found = []
    for command in commands:
        words = command.words
        for k, word in enumerate(words):
            text, module, rest = word.text, None, k + 1
            if text == "-m" and k + 1 < len(words) and _MODULE.fullmatch(words[k + 1].text):
                module, rest = words[k + 1].text, k + 2
            elif text.startswith("-m") and _MODULE.fullmatch(text[2:]):
                module = text[2:]
            elif _MODULE_FILE.fullmatch(text):
                module = "verl.trainer." + _MODULE_FILE.fullmatch(text).group(1)
            if module:
                found.append(Trainer(len(found) + 1, command, module, words[:k], words[rest:]))
                break
    return found
