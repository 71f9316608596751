"""A verl launch script read as bash would run it, and never run: what each command would be handed.

A launch script is data, like every file a user hands the project: no line of it runs, nothing is looked up in this
process's environment, no substitution is evaluated. plugin_utils/shell_lexer.py gives its commands as bash groups
them; here they are followed in order, as bash follows them, with one model of a shell variable (Var): its value's
pieces, each literal text or an Unknown that says what it is and why it is not known here, and where it came from.

* What the script sets (NAME=..., export, arrays NAME=(...) and NAME+=(...)) expands where it is used ($NAME,
  "${NAME[@]}", ${NAME[*]}), split into words as bash splits unquoted expansions; $((...)) is computed over the
  integers the script has set.
* ${NAME:-word}, ${NAME-word}, ${NAME:=word} (and :+, +, :?) of a NAME the script never sets take their default:
  each such value says so (Default), for the report to tell where it came from.
* Conditions are decided where bash would decide them from what is known ([ ], test, [[ ]], true, false, case
  patterns); otherwise each branch is followed apart and what they set is merged: a value they agree on stays known,
  one they differ on is unknown (saying why), and an array's items added only in some branches are `maybe`, with the
  branch they depend on. An `exit` in a branch ends that branch only.
* A value set where bash would not keep it (a pipeline, `&`, a ( ) subshell) or after something that may change any
  value (source, eval, unset of an unknown name) is unknown from there on.
* $HOME, $1, $@, $(...), `...`, ~ and anything else that would expand when the script runs stay Unknown; a secret's
  value (a name redaction.is_secret_name calls secret) is never expanded: it stays Unknown too, named, never shown.
* Each simple command is kept with its words; a command that launches Python or torchrun on a module is a Launch,
  and one on a verl trainer module (verl.trainer.X) a Trainer, with the environment it would get.

Errors are ScriptError, one line naming the file, the line and the problem, never a value. The time is linear in the
script's size: a variable's value is looked up through at most MAX_DEPTH scopes, what may change every value is
one mark (never a pass over every variable), and values and words past MAX_WORK bytes in all are refused. Control
host only (plugin_utils/verl_import.py makes a JobSpec of it).
"""

import gc
import os
import re
from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple

from ansible.module_utils.base import redaction

from plugin_utils.shell_lexer import (
    ASSIGN,
    MAX_BYTES,
    MAX_DEPTH,
    NAME,
    SPECIAL,
    AndOr,
    Arith,
    ArithCommand,
    ArrayWord,
    Case,
    Function,
    Group,
    If,
    Lit,
    Loop,
    Opaque,
    Pipeline,
    ScriptError,
    Sequence,
    Simple,
    read,
)
from plugin_utils.shell_lexer import parse as parse_syntax

__all__ = ("ASSIGN", "MAX_BYTES", "NOT_SET", "SCRIPT_ARGS", "Command", "Default", "Items", "Launch", "Piece",
           "Script", "ScriptError", "Trainer", "Unknown", "Var", "Word", "command_name", "read", "read_script")

NOT_SET = "not set by the script (it would come from the environment of whoever runs it)"
SCRIPT_ARGS = "the script's arguments (read here as run without any)"
# A launch script's values and words are a few times its size: what grows past this (a value doubled line after line,
# values copied again and again) is refused, so that the time stays linear in the script's size whatever it holds.
MAX_WORK = 16 * MAX_BYTES  # the bytes of all the values the script sets and all the words its commands get
_DECLARE = ("export", "declare", "typeset", "readonly", "local")
_IFS = re.compile(r"[ \t\n]+")
_BRACES = re.compile(r"\{[^{}\s]*(?:,|\.\.)[^{}\s]*\}")  # {a,b} and {1..3} in unquoted text: brace expansion
_INTEGER = re.compile(r"\s*[-+]?(?:0|[1-9][0-9]*)\s*")
_PYTHON = re.compile(r"python[0-9.]*")
_MODULE_FILE = re.compile(r"(?:^|.*/)verl/trainer/([A-Za-z0-9_]+)\.py")
_TORCH_RUN = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's and python's flags that take no value (every other -x or --flag takes the next word, unless --flag=x).
_TORCHRUN_BOOL = ("--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--module")
_PYTHON_VALUE = ("-X", "-W", "-Q")
_WRAPPERS = ("exec", "nohup", "command", "time", "builtin")
_UV_BOOL = ("--no-project", "--frozen", "--locked", "--isolated", "--no-sync", "--active", "--no-dev", "-q", "-v",
            "--quiet", "--verbose", "--offline")


class Unknown(NamedTuple):
    """Something that would expand when the script ran, as the script wrote it ($HOME, $(date ...)), and why it is
    not known here; secret: a secret's name, never its value; args: the script's own arguments ($@)."""

    raw: str
    why: str
    line: int
    secret: bool = False
    args: bool = False


class Default(NamedTuple):
    """${NAME:-word} (or -, :=, =, :+, +) of a NAME the script never sets: its default was taken on this line."""

    name: str
    line: int


class Piece(NamedTuple):
    """Part of a word: literal text, or an Unknown kept as written. quoted: safe from splitting and patterns;
    default: the default it came from; maybe: why it is passed only sometimes (an array item added in one branch)."""

    text: str
    quoted: bool = False
    unknown: Unknown | None = None
    default: Default | None = None
    maybe: str | None = None


class Word(NamedTuple):
    """One shell word after quote removal and the expansions the script itself makes known."""

    pieces: tuple
    line: int

    @property
    def text(self):
        return "".join(p.text for p in self.pieces)

    @property
    def unknowns(self):
        return [p.unknown for p in self.pieces if p.unknown is not None]

    @property
    def defaults(self):
        return list(dict.fromkeys(p.default for p in self.pieces if p.default is not None))

    @property
    def maybe(self):
        return next((p.maybe for p in self.pieces if p.maybe), None)


class Var(NamedTuple):
    """A shell variable as the script leaves it: a scalar's pieces, or an array's Items; the line that set it;
    whether exported; doubt: why its value is not known here (then pieces and items mean nothing); unset: the script
    unset it."""

    pieces: tuple = ()
    items: object = None  # Items, or None for a scalar
    line: int = 0
    exported: bool = False
    doubt: str | None = None
    unset: bool = False
    seq: int = 0

    def same(self, other):
        if other is None or other is self:
            return other is self
        if (self.pieces, self.exported, self.doubt, self.unset) != (other.pieces, other.exported, other.doubt,
                                                                    other.unset):
            return False
        a, b = self.items, other.items
        return a is b or (a is not None and b is not None and a.count == b.count and a.all() == b.all())


class Items(NamedTuple):
    """An array's items (each a tuple of pieces), kept as the items it had before and those added to them, so that
    appending costs what it adds, never what the array already holds (all() lays them out in order)."""

    before: object  # Items, or None
    added: tuple
    count: int

    def all(self):
        runs, node = [], self
        while node is not None:
            runs.append(node.added)
            node = node.before
        return tuple(item for run in reversed(runs) for item in run)

    def added_since(self, start):
        """The items appended to start to make these (walking only what was added), or None when they are not."""
        node, runs, floor = self, [], start.count if start is not None else 0
        while node is not None and node is not start and node.count > floor:
            runs.append(node.added)
            node = node.before
        if node is not start:
            return None
        return tuple(item for run in reversed(runs) for item in run)


def _items(added, before=None):
    return Items(before, tuple(added), (before.count if before is not None else 0) + len(added))


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


@dataclass(frozen=True)
class Script:
    commands: tuple
    launches: tuple
    trainers: tuple
    lines: int


class _Frame:
    """The variables one branch (or subshell) sets over its parent's; stopped: exit, return or break ran here."""

    __slots__ = ("depth", "parent", "stopped", "vars")

    def __init__(self, parent):
        self.parent, self.vars, self.stopped = parent, {}, None
        self.depth = parent.depth + 1 if parent else 0


_BREAK = object()  # between the items of "${NAME[@]}": a word ends there even when quoted


def _merged(pieces):
    """Adjacent literal pieces of one kind as one, each run's text joined once (a value built in many steps stays a
    few pieces, in time linear in its size)."""
    out, run = [], []
    for p in pieces:
        first = run[0] if run else None
        if first is not None and (p.unknown is not None
                                  or (p.quoted, p.default, p.maybe) != (first.quoted, first.default, first.maybe)):
            out.append(run[0] if len(run) == 1 else run[0]._replace(text="".join(r.text for r in run)))
            run = []
        if p.unknown is not None:
            out.append(p)
        elif p.text or p.quoted:
            run.append(p)
    if run:
        out.append(run[0] if len(run) == 1 else run[0]._replace(text="".join(r.text for r in run)))
    return tuple(out)


def _unquoted(pieces):
    """A variable's value as it expands: open to splitting, whatever quotes it was set with."""
    return tuple(p._replace(quoted=False) if p.quoted else p for p in pieces)


def _size(pieces):
    return sum(len(p.text) for p in pieces)


def _glob_regex(pieces):
    """A case pattern (or [[ == ]]'s right side) as a regex: unquoted * ? [...] are patterns, the rest literal."""
    out = []
    for p in pieces:
        if p.quoted:
            out.append(re.escape(p.text))
            continue
        text, i = p.text, 0
        while i < len(text):
            c = text[i]
            end = text.find("]", i + 2) if c == "[" else -1
            if c == "*":
                out.append(".*")
            elif c == "?":
                out.append(".")
            elif c == "[" and end > 0:
                body = text[i + 1:end]
                negate = body[:1] in ("!", "^")
                body = body[1:] if negate else body
                out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
                i = end
            else:
                out.append(re.escape(c))
            i += 1
    return "".join(out)


class _Reader:
    """The script's commands followed in order, as bash would follow them, without running anything."""

    def __init__(self, name, want):
        self.name, self.want = name, want
        self.frame = _Frame(None)
        self.commands, self.launches, self.trainers = [], [], []
        self.maybe = []  # why the commands being read run only sometimes, outermost first
        self.seq = 0
        self.forgot = None  # (seq, line, what): every value set before it may have changed there (source, eval)
        self.functions = 0
        self.why = None  # why the last status asked for is not known
        self.work = 0  # bytes of values and words made so far (MAX_WORK)
        self.secrets = {}  # name: whether redaction calls it secret, asked once a name

    def fail(self, line, problem):
        raise ScriptError(self.name, line, problem)

    # ---- variables

    def lookup(self, name):
        frame = self.frame
        while frame is not None:
            if name in frame.vars:
                return frame.vars[name]
            frame = frame.parent
        return None

    def state(self, name):
        """(the Var or None, why its value is not known here or None)."""
        var = self.lookup(name)
        if self.forgot and (var is None or var.seq < self.forgot[0]):
            return var, f"line {self.forgot[1]} ({self.forgot[2]}) may change it"
        return var, var.doubt if var is not None else None

    def assign(self, name, var):
        self.spend(_size(var.pieces) + sum(_size(item) + 1 for item in var.items.added) if var.items is not None else
                   _size(var.pieces), var.line)
        self.seq += 1
        self.frame.vars[name] = var._replace(seq=self.seq)

    def spend(self, size, line):
        self.work += size
        if self.work > MAX_WORK:
            self.fail(line, f"its values and words grow past {MAX_WORK} bytes: not a launch script")

    def secret(self, name):
        if name not in self.secrets:
            self.secrets[name] = redaction.is_secret_name(name)
        return self.secrets[name]

    def forget(self, line, what):
        """From here on every value the script set before may have changed (O(1): one mark, read on lookup)."""
        self.seq += 1
        self.forgot = (self.seq, line, what)

    # ---- running

    def status(self, node):
        """Run node; its exit status when known (True: success), else None with self.why saying why."""
        if self.frame.stopped:
            return None
        if isinstance(node, Sequence):
            result = True
            for item, background in node.items:
                if self.frame.stopped:
                    break
                if background:
                    self._subshell(lambda item=item: self.status(item), f"line {item.line}'s background job (&)")
                    result = True
                else:
                    result = self.status(item)
            return result
        if isinstance(node, AndOr):
            return self._and_or(node)
        if isinstance(node, Pipeline):
            if len(node.commands) == 1:
                result = self.status(node.commands[0])
            else:
                for command in node.commands:
                    self._subshell(lambda command=command: self.status(command), f"line {node.line}'s pipeline (|)")
                result = self._unknown_status("a pipeline's status is its last command's")
            return result if result is None or not node.negated else not result
        if isinstance(node, Simple):
            return self._simple(node)
        if isinstance(node, If):
            return self._if(node.clauses, node.orelse, node.line)
        if isinstance(node, Case):
            return self._case(node)
        if isinstance(node, Loop):
            return self._loop(node)
        if isinstance(node, Group):
            if node.subshell:
                self._subshell(lambda: self.status(node.body), f"line {node.line}'s ( ) subshell")
                return self._unknown_status("a subshell's status is its last command's")
            return self.status(node.body)
        if isinstance(node, Function):
            self.functions += 1
            self._fork([(f"when function {node.name} (line {node.line}) is called", lambda: self.status(node.body)),
                        ("when it is not", lambda: None)], "where a function is called is not followed here")
            self.functions -= 1
            return True
        if isinstance(node, ArithCommand):
            for name in node.names:
                self.assign(name, Var(line=node.line, doubt=f"line {node.line}'s (( )) may change it"))
            return self._unknown_status("(( )) is not evaluated")
        raise AssertionError(node)

    def _unknown_status(self, why):
        """An exit status not known here (None), and why (a Command: its status, said only when asked for)."""
        self.why = why

    def _why(self):
        why = self.why
        return f"the status of {command_name(why)}, never run" if isinstance(why, Command) else why

    def _and_or(self, node):
        result = self.status(node.first)
        for op, pipeline in node.rest:
            if self.frame.stopped:
                return None
            runs = result if op == "&&" else (None if result is None else not result)
            if runs is True:
                result = self.status(pipeline)
            elif runs is None:
                why = self._why()
                outcome = "succeeds" if op == "&&" else "fails"
                self._fork([(f"when the command before line {pipeline.line}'s {op} {outcome}",
                             lambda pipeline=pipeline: self.status(pipeline)),
                            ("when it does not", lambda: None)], why)
                result = self._unknown_status(why)
        return result

    def _subshell(self, run, where):
        """Run in a subshell: what it sets is not kept by bash; taken as unknown from here on."""
        base = self.frame
        self.frame = _Frame(base)
        run()
        child, self.frame = self.frame, base
        for name, var in child.vars.items():
            self.assign(name, Var(line=var.line, exported=var.exported,
                                  doubt=f"set on line {var.line} in {where}, a subshell bash does not keep it from"))

    def _fork(self, branches, why):
        """Follow each branch apart from here, then keep what they agree on (see the module's docstring)."""
        base, outcomes = self.frame, []
        if base.depth >= 2 * MAX_DEPTH:  # the parser's own limit keeps it lower; a guard all the same
            self.fail(None, f"branches nested more than {2 * MAX_DEPTH} deep: not a launch script")
        for label, run in branches:
            self.frame = _Frame(base)
            self.maybe.append(f"{label} ({_undecided(why)})")
            run()
            self.maybe.pop()
            outcomes.append((label, self.frame))
        self.frame = base
        alive = [(label, frame) for label, frame in outcomes if frame.stopped != "exit"]
        if not alive:
            base.stopped = "exit"
            return
        names = dict.fromkeys(name for _, frame in alive for name in frame.vars)
        for name in names:
            before = self.lookup(name)
            values = [(label, frame.vars.get(name, before)) for label, frame in alive]
            merged = self._merge(before, values, why)
            self.seq += 1
            base.vars[name] = merged._replace(seq=self.seq)

    @staticmethod
    def _merge(before, values, why):
        first = values[0][1]
        if first is not None and all(first.same(v) for _, v in values[1:]):
            return first
        known = [v for _, v in values if v is not None]
        line = max(v.line for v in known)
        exported = any(v.exported for v in known)
        start = before.items if before is not None and not before.doubt and not before.unset else None
        if before is not None and not before.unset and (before.doubt or start is None):
            start = False  # a scalar, or unknown: branches that make an array of it do not extend it
        added = [v.items.added_since(start) if start is not False and v.items is not None and not v.doubt else None
                 for v in known]
        if len(known) == len(values) and all(a is not None for a in added):
            items = []
            for (label, _), more in zip(values, added, strict=True):
                for item in more:
                    items.append(tuple(p._replace(maybe=p.maybe or f"passed only {label} ({_undecided(why)})")
                                       for p in item))
            return Var(items=_items(items, start), line=line, exported=exported)
        return Var(line=line, exported=exported,
                   doubt=f"set differently by the script's branches (line {line}; {_undecided(why)})")

    # ---- compound commands

    def _if(self, clauses, orelse, line):
        """The clause whose condition holds runs; conditions not decided here make branches, side by side (an elif
        chain never nests). A condition's own commands run as it is read, in order."""
        branches, why = [], None
        for cond, body in clauses:
            result = self.status(cond)
            if self.frame.stopped:
                return None
            if result is False:
                continue
            if result is True and not branches:
                return self.status(body)
            cond_line = cond.items[0][0].line if cond.items else line
            branches.append((f"when the condition on line {cond_line} holds", lambda body=body: self.status(body)))
            why = why or self._why()
            if result is True:
                break
        else:
            branches.append((f"when no condition of line {line}'s if holds",
                             lambda: self.status(orelse) if orelse else None))
        if len(branches) == 1:
            return self.status(orelse) if orelse else True
        self._fork(branches, why)
        return self._unknown_status(f"line {line}'s if is not decided here")

    def _case(self, node):
        """The first arm whose pattern matches runs; patterns not decided here make branches side by side."""
        subject = self._expand(node.word, split=False)[0]
        branches, why = [], None
        for patterns, body in node.arms:
            matched = False
            for pattern in patterns:
                pieces = self._expand(pattern, split=False)[0].pieces
                unknown = next(iter(subject.unknowns + [p.unknown for p in pieces if p.unknown]), None)
                if unknown is not None:
                    matched, why = None, why or _because(unknown)
                    break
                if re.fullmatch(_glob_regex(pieces), subject.text, re.DOTALL):
                    matched = True
                    break
            if matched is False:
                continue
            if matched and not branches:
                return self.status(body)
            shown = " | ".join(self._shown(p) for p in patterns)
            branches.append((f"when line {node.line}'s case matches {shown}", lambda body=body: self.status(body)))
            if matched:
                break
        else:
            branches.append((f"when line {node.line}'s case matches none", lambda: None))
        if len(branches) == 1:
            return True
        self._fork(branches, why)
        return self._unknown_status(f"line {node.line}'s case is not decided here")

    @staticmethod
    def _shown(pattern):
        return "".join(p.text if isinstance(p, Lit) else getattr(p, "raw", "") for p in pattern.parts)

    def _loop(self, node):
        if node.cond is not None:
            self.status(node.cond)

        def body():
            if node.name:
                self.assign(node.name, Var(line=node.line, doubt=f"the variable of line {node.line}'s loop"))
            self.status(node.body)
            if self.frame.stopped == "break":
                self.frame.stopped = None

        self._fork([(f"when line {node.line}'s loop runs its body", body), ("when it does not", lambda: None)],
                   "how often a loop runs is not followed here")
        return True

    # ---- simple commands

    def _simple(self, node):
        words = list(node.words)
        prefix = []
        while words and (isinstance(words[0], ArrayWord) or words[0].assignment()):
            prefix.append(words.pop(0))
        if not words:
            ok = True
            for word in prefix:
                ok = self._assign_word(word, False) and ok
            return True if ok else self._unknown_status("an assignment's status is its command substitution's, "
                                                        "never run")
        first = words[0].plain()
        if first in _DECLARE:
            return self._declare(first, words[1:], node.line)
        expanded = self._expand_all(words)
        if not expanded:
            return True
        name = expanded[0].text if not expanded[0].unknowns else None
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        if name in ("[", "test", "[["):
            args = self._expand_all(words, split=name != "[[")
            return self._test([w for w in args[1:]], name, node.line)
        if name in ("exit", "return", "break", "continue"):
            self.frame.stopped = {"exit": "exit", "return": "return"}.get(name, "break")
            if name == "exit" and self.functions:
                self.frame.stopped = "return"
            return None
        if name in ("source", ".", "eval", "let"):
            self.forget(node.line, name)
        elif name in ("read", "mapfile", "readarray", "getopts") or name == "printf" and len(expanded) > 2 \
                and expanded[1].text == "-v":
            for word in expanded[1:]:
                if NAME.fullmatch(word.text):
                    self.assign(word.text, Var(line=node.line, doubt=f"read by {name} on line {node.line}"))
        elif name == "unset":
            self._unset(words[1:], node.line)
        env = {}
        for word in prefix:
            if isinstance(word, ArrayWord):
                continue
            var_name, _, parts = word.assignment()
            env[var_name] = Var(self._value(parts), line=word.line, exported=True)
        command = Command(node.line, tuple(expanded), tuple((r.line, r.text) for r in node.redirects),
                          "; ".join(self.maybe) or None)
        self.commands.append(command)
        self._launch(command, env)
        if name == "exec" and len(expanded) > 1:
            self.frame.stopped = "exit"
        return self._unknown_status(command)

    def _assign_word(self, word, exported):
        """NAME=value, NAME+=value, NAME=(...) or NAME+=(...): False when its status is not known (a $(...))."""
        if isinstance(word, ArrayWord):
            items = [tuple(w.pieces) for raw in word.items for w in self._expand(raw)]
            old, doubt = self.state(word.name)
            base = None
            if word.append and old is not None and not old.unset:
                base = old.items if old.items is not None else _items((old.pieces,))
            var = Var(items=_items(items, base), line=word.line, exported=bool(old and old.exported) or exported,
                      doubt=doubt if word.append else None)
            self.assign(word.name, var)
            return not any(isinstance(p, Opaque) for raw in word.items for p in raw.parts)
        name, append, parts = word.assignment()
        pieces = self._value(parts)
        old, doubt = self.state(name)
        if append and old is not None and not old.unset:
            if old.items is not None:  # NAME+=value of an array appends to its first item
                items = old.items.all()
                items = (_merged((items[0] if items else ()) + pieces),) + items[1:]
                self.assign(name, Var(items=_items(items), line=word.line, exported=old.exported, doubt=doubt))
                return True
            pieces = _merged(old.pieces + pieces)
        else:
            doubt = None
        self.assign(name, Var(pieces, line=word.line, exported=bool(old and old.exported and not old.unset) or exported,
                              doubt=doubt))
        return not any(isinstance(p, Opaque) for p in parts)

    def _value(self, parts):
        """An assignment's value: expanded, never split."""
        words = self._expand_parts(parts, split=False)
        return words[0].pieces if words else ()

    def _declare(self, builtin, words, line):
        """export/declare/typeset/readonly/local: their NAME=value are assignments (never split); export (or -x)
        marks a name for every later command's environment, -n takes that back."""
        export, unexport = builtin == "export", False
        for raw in words:
            plain = raw.plain()
            if plain and plain[0] in "-+" and len(plain) > 1:
                export = export or plain[0] == "-" and "x" in plain
                unexport = unexport or plain[0] == "+" and "x" in plain or builtin == "export" and plain == "-n"
                if plain[0] == "-" and ("f" in plain or "F" in plain or "p" in plain):
                    return True  # functions, or printing: no variable changes
                if plain[0] == "-" and any(c in plain for c in "Ain" if builtin != "export" or c != "n"):
                    for other in words:  # associative arrays, integers, name references: not read here
                        name = other.name if isinstance(other, ArrayWord) else \
                            other.assignment()[0] if other.assignment() else other.plain()
                        if name and NAME.fullmatch(name):
                            self.assign(name, Var(line=line, doubt=f"declared on line {line} with {plain}: not read"))
                    return True
                continue
            if isinstance(raw, ArrayWord) or raw.assignment():
                self._assign_word(raw, export and not unexport)
                name = raw.name if isinstance(raw, ArrayWord) else raw.assignment()[0]
                if unexport:
                    self.assign(name, self.lookup(name)._replace(exported=False))
            elif plain and NAME.fullmatch(plain):
                old = self.lookup(plain)
                if unexport and old is not None:
                    self.assign(plain, old._replace(exported=False))
                elif export:  # export NAME of a NAME the script never set: the caller's, exported
                    self.assign(plain, old._replace(exported=True) if old is not None else
                                Var((Piece("$" + plain, False, Unknown("$" + plain, NOT_SET, line)),),
                                    line=line, exported=True))
            else:
                self.forget(line, builtin)
        return True

    def _unset(self, words, line):
        functions = False
        for raw in words:
            plain = raw.plain()
            if plain in ("-f", "-v", "-n"):
                functions = plain == "-f"
            elif functions:
                continue
            elif plain and NAME.fullmatch(plain):
                self.assign(plain, Var(line=line, unset=True))
            else:
                self.forget(line, "unset of a name not known here")

    # ---- expansions

    def _expand_all(self, raws, split=True):
        out = []
        for raw in raws:
            out += self._expand(raw, split)
        return out

    def _expand(self, raw, split=True):
        """The words one raw word makes (several, or none, when split)."""
        if isinstance(raw, ArrayWord):
            why = "an array assignment where bash takes none"
            return [Word((Piece(raw.name + "=(...)", unknown=Unknown(raw.name + "=(...)", why, raw.line)),),
                         raw.line)]
        return self._expand_parts(raw.parts, split, raw.line)

    def _expand_parts(self, parts, split, line=None):
        chunks = []
        for part in parts:
            if split and isinstance(part, Lit) and not part.quoted and _BRACES.search(part.text):
                why = "a brace expansion: bash makes several words of it, not read here"
                chunks.append((Piece(part.text, False, Unknown(part.text, why, part.line)), False))
                continue
            self._part(part, chunks)
        line = line or (parts[0].line if parts else 0)
        fields, cur, has = [], [], False
        for chunk in chunks:
            if chunk is _BREAK:
                if split:
                    if has:
                        fields.append(cur)
                    cur, has = [], False
                else:
                    cur.append(Piece(" ", True))
                continue
            piece, splits = chunk
            if splits and split and piece.unknown is None:
                for k, text in enumerate(_IFS.split(piece.text)):
                    if k and has:
                        fields.append(cur)
                        cur, has = [], False
                    if text:
                        cur.append(piece._replace(text=text))
                        has = True
            else:
                cur.append(piece)
                has = has or bool(piece.text) or piece.quoted or piece.unknown is not None
        if has or not split:
            fields.append(cur)
        words = [Word(_merged(f), line) for f in fields]
        self.spend(sum(_size(w.pieces) + 1 for w in words), line)
        return words

    def _part(self, part, chunks):
        if isinstance(part, Lit):
            chunks.append((Piece(part.text, part.quoted), False))
        elif isinstance(part, Opaque):
            unknown = Unknown(part.raw, part.why, part.line)
            chunks.append((Piece(part.raw, part.quoted, unknown), False))
        elif isinstance(part, Arith):
            value, why = self._arith(part.text, part.line)
            if value is None:
                chunks.append((Piece(part.raw, part.quoted, Unknown(part.raw, why, part.line)), False))
            else:
                chunks.append((Piece(str(value), part.quoted), not part.quoted))
        else:
            self._param_chunks(part, chunks)

    def _param_chunks(self, part, chunks):
        kind, value = self._param(part)
        if kind == "items":
            items, joined = value
            for k, item in enumerate(items):
                if k:
                    chunks.append((Piece(" ", True), False) if joined and part.quoted else _BREAK)
                for piece in item or (Piece("", part.quoted),):
                    chunks.append((piece._replace(quoted=part.quoted), not part.quoted))
            return
        if part.quoted and not value:
            chunks.append((Piece("", True), False))  # "$EMPTY" is one empty word
        for piece in value:
            protected = part.quoted or piece.quoted
            chunks.append((piece._replace(quoted=protected) if piece.quoted != protected else piece,
                           not protected and piece.unknown is None))

    def _unknown(self, part, why, **kw):
        return "scalar", (Piece(part.raw, part.quoted, Unknown(part.raw, why, part.line, **kw)),)

    def _param(self, part):
        """("scalar", pieces) or ("items", (items, joined)) of a parameter expansion."""
        name, op = part.name, part.op
        if not NAME.fullmatch(name):
            if name in ("@", "*"):
                if self.functions:
                    return self._unknown(part, "the arguments of the function it is in")
                return self._unknown(part, SCRIPT_ARGS, args=part.op == "" and part.index is None)
            if name.isdigit() and name != "0":
                return self._unknown(part, "one of the function's arguments" if self.functions else
                                     "one of the script's arguments")
            return self._unknown(part, SPECIAL.get(name, "a special parameter"))
        if self.secret(name):
            return self._unknown(part, f"the secret {name}: its value is never written into a spec nor shown; set it "
                                 "in the site's env", secret=True)
        var, doubt = self.state(name)
        if part.index is not None:
            return self._item(part, var, doubt)
        if doubt:
            return self._unknown(part, doubt)
        value = () if var is None or var.unset else var.pieces if var.items is None else \
            next(iter(var.items.all()), ())
        if op == "":
            if var is None:
                return self._unknown(part, NOT_SET)
            return "scalar", _unquoted(value)
        if op == "#":
            if var is None or any(p.unknown for p in value):
                return self._unknown(part, "the length of a value not known here")
            return "scalar", (Piece(str(len("".join(p.text for p in value)))),)
        unset = var is None or var.unset
        empty = not unset and not "".join(p.text for p in value)
        if not unset and op.startswith(":") and empty and any(p.unknown for p in value):
            return self._unknown(part, "whether a value not known here is empty")
        use_word = unset or (op.startswith(":") and empty)
        default = Default(name, part.line) if var is None else None
        if op[-1] == "+":
            if use_word:
                return "scalar", ()
            return "scalar", self._word_pieces(part, None)
        if op[-1] == "?":
            if use_word:
                return self._unknown(part, f"required by the script (${{{name}:?}}) from whoever runs it")
            return "scalar", _unquoted(value)
        if not use_word:
            return "scalar", _unquoted(value)
        pieces = self._word_pieces(part, default)
        if op[-1] == "=":
            self.assign(name, Var(_unquoted(pieces), line=part.line,
                                  exported=bool(var and var.exported)))
        return "scalar", pieces

    def _word_pieces(self, part, default):
        words = self._expand_parts(part.word or (), split=False, line=part.line)
        pieces = words[0].pieces if words else ()
        if default is not None:
            pieces = tuple(p if p.default else p._replace(default=default) for p in pieces)
        return pieces

    def _item(self, part, var, doubt):
        if part.op not in ("", "#"):
            return self._unknown(part, "an array's items with an operator: not evaluated")
        if doubt:
            return self._unknown(part, doubt)
        if var is None:
            return self._unknown(part, NOT_SET)
        items = () if var.unset else var.items.all() if var.items is not None else (var.pieces,)
        if part.op == "#":
            if any(p.maybe for item in items for p in item):
                return self._unknown(part, "the number of items of an array some branches add to")
            return "scalar", (Piece(str(len(items)) if part.index in ("@", "*") else
                                    str(len("".join(p.text for p in items[0]))) if items else "0"),)
        if part.index in ("@", "*"):
            return "items", (items, part.index == "*")
        value, _ = self._arith(part.index, part.line)
        if value is None or any(p.maybe for item in items[:value + 1] for p in item):
            return self._unknown(part, "an array item whose index is not known here")
        return "scalar", tuple(items[value]) if 0 <= value < len(items) else ()

    # ---- $(( )), [ ], [[ ]]

    def _arith(self, text, line):
        """(the integer, None) of an arithmetic expression over the integers the script set, or (None, why)."""
        tokens = re.findall(r"\s+|0[xX][0-9a-fA-F]+|[0-9]+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|[A-Za-z_][A-Za-z0-9_]*|"
                            r"\*\*|[-+*/%()]|.", text)
        tokens = [t for t in tokens if not t.isspace()]
        values = []
        for tok in tokens:
            name = tok.strip("${}") if tok[0] == "$" or NAME.fullmatch(tok) else None
            if name is None:
                values.append(tok)
                continue
            var, doubt = self.state(name)
            if self.secret(name):
                return None, f"arithmetic over the secret {name}: not evaluated"
            if doubt or var is None:
                return None, f"arithmetic over ${name}, {doubt or NOT_SET}"
            value = "" if var.unset else "".join(p.text for p in var.pieces) if \
                not any(p.unknown for p in var.pieces) else None
            if value is not None and not value.strip():
                value = "0"
            if value is None or not _INTEGER.fullmatch(value):
                return None, f"arithmetic over ${name}, whose value is not an integer known here"
            values.append(str(int(value)))
        try:
            result, rest = _Arith(values).parse()
        except (ValueError, IndexError, ZeroDivisionError, RecursionError):
            return None, "arithmetic bash would compute otherwise or refuse: not evaluated"
        if rest:
            return None, "arithmetic with an operator not read here: not evaluated"
        return result, None

    def _test(self, args, kind, line):
        """[ ... ], test ... and [[ ... ]] over known words: True/False, or None (self.why) when not decidable."""
        unknown = next((u for w in args for u in w.unknowns), None)
        if unknown is not None:
            return self._unknown_status(_because(unknown))
        texts = [w.text for w in args]
        if kind == "[" and texts[-1:] == ["]"] or kind == "[[" and texts[-1:] == ["]]"]:
            texts = texts[:-1]
        elif kind != "test":
            return self._unknown_status(f"line {line}'s test is not closed")
        try:
            result, rest = _Test(texts, kind == "[[").parse()
        except (ValueError, IndexError):
            return self._unknown_status(f"line {line}'s test is not one read here")
        return self._unknown_status(f"line {line}'s test is not one read here") if rest else result

    # ---- launches

    def _launch(self, command, env):
        launch = _launch_of(command)
        if launch is None:
            return
        self.launches.append(launch)
        if launch.module and launch.module.startswith("verl.trainer."):
            number = len(self.trainers) + 1
            wanted = self.want == number or (self.want is None and number == 1)
            self.trainers.append(Trainer(number, launch, self._env(env, launch) if wanted else None))

    def _env(self, prefix, launch):
        """The variables the launched trainer gets from the script: exported ones, and its NAME=value prefixes."""
        env, frame, seen = {}, self.frame, set()
        while frame is not None:
            for name, var in frame.vars.items():
                if name not in seen:
                    seen.add(name)
                    if var.exported and not var.unset:
                        env[name] = var if not self.forgot or var.seq > self.forgot[0] else \
                            var._replace(doubt=f"line {self.forgot[1]} ({self.forgot[2]}) may change it")
            frame = frame.parent
        after_env = False  # env NAME=value ... python3: those NAME=value are the trainer's environment
        for word in launch.launcher:
            m = ASSIGN.match(word.text)
            if after_env and m:
                env[m.group(1)] = Var(_merged(_after(word.pieces, m.end())), line=word.line, exported=True)
                continue
            after_env = not word.unknowns and os.path.basename(word.text) == "env"
        env.update(prefix)
        return dict(sorted(env.items(), key=lambda kv: (kv[1].line, kv[0])))


def _after(pieces, n):
    """pieces without their first n characters of text."""
    out = []
    for p in pieces:
        if n >= len(p.text) and p.unknown is None:
            n -= len(p.text)
            continue
        out.append(p._replace(text=p.text[n:]) if n and p.unknown is None else p)
        n = 0
    return out


def _because(unknown):
    return f"{unknown.raw} (line {unknown.line}) is {unknown.why}"


def _undecided(why):
    return f"not decided here: {why}" if why else "not decided here"


def command_name(command):
    """A command as the report may show it: its first word when that is a plain name, never its other words."""
    first = command.words[0] if command.words else None
    if first is not None and not first.unknowns and re.fullmatch(r"[A-Za-z0-9_./+-]{1,64}", first.text):
        return first.text
    return f"a command on line {command.line}"


def _launch_of(command):
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
    launch = _launch_of(replace(command, words=tuple(words[k:])))
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


class _Arith:
    """Bash's integer arithmetic over + - * / % ** ( ) and unary + -, 64-bit, division toward zero."""

    def __init__(self, tokens):
        self.t, self.i, self.depth = tokens, 0, 0

    def parse(self):
        value = self.sum()
        return value, self.t[self.i:]

    @staticmethod
    def wrap(n):
        return (n + (1 << 63)) % (1 << 64) - (1 << 63)

    def sum(self):
        value = self.product()
        while self.i < len(self.t) and self.t[self.i] in "+-":
            op = self.t[self.i]
            self.i += 1
            other = self.product()
            value = self.wrap(value + other if op == "+" else value - other)
        return value

    def product(self):
        value = self.power()
        while self.i < len(self.t) and self.t[self.i] in ("*", "/", "%"):
            op = self.t[self.i]
            self.i += 1
            other = self.power()
            if op == "*":
                value = self.wrap(value * other)
            else:
                quotient = abs(value) // abs(other)  # ZeroDivisionError: bash refuses it too
                quotient = -quotient if (value < 0) != (other < 0) else quotient
                value = self.wrap(quotient if op == "/" else value - other * quotient)
        return value

    def power(self):
        base = self.unary()
        if self.i < len(self.t) and self.t[self.i] == "**":
            self.i += 1
            exponent = self.power()
            if exponent < 0:
                raise ValueError("a negative exponent")
            return self.wrap(pow(base, exponent, 1 << 64))
        return base

    def unary(self):
        tok = self.t[self.i]
        if tok in ("+", "-"):
            self.i += 1
            value = self.unary()
            return self.wrap(-value if tok == "-" else value)
        if tok == "(":
            self.depth += 1
            if self.depth > 100:
                raise ValueError("nested too deep")
            self.i += 1
            value = self.sum()
            if self.t[self.i] != ")":
                raise ValueError("no )")
            self.i += 1
            self.depth -= 1
            return value
        self.i += 1
        if tok.lower().startswith("0x"):
            return self.wrap(int(tok, 16))
        if len(tok) > 1 and tok.startswith("0"):
            return self.wrap(int(tok, 8))  # bash reads a leading 0 as octal (ValueError on 8 or 9, as bash refuses)
        return self.wrap(int(tok))


class _Test:
    """test's (and [[ ]]'s) expressions over known strings: ! ( ) -a -o && ||, -n -z, = == != < >, -eq ... -ge; a
    file test or a pattern is not decided (ValueError)."""

    _INT_OPS: ClassVar = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__,
                          "-gt": int.__gt__, "-ge": int.__ge__}

    def __init__(self, args, double):
        self.a, self.i, self.double = args, 0, double

    def parse(self):
        if not self.a:
            return False, []
        value = self.either()
        return value, self.a[self.i:]

    def either(self):
        value = self.both()
        while self.i < len(self.a) and self.a[self.i] in (("||",) if self.double else ("-o",)):
            self.i += 1
            other = self.both()
            value = value or other
        return value

    def both(self):
        value = self.negation()
        while self.i < len(self.a) and self.a[self.i] in (("&&",) if self.double else ("-a",)):
            self.i += 1
            other = self.negation()
            value = value and other
        return value

    def negation(self):
        if self.a[self.i] == "!" and self.i + 1 < len(self.a):
            self.i += 1
            return not self.negation()
        return self.primary()

    def primary(self):
        a, i = self.a, self.i
        if a[i] == "(":
            self.i += 1
            value = self.either()
            if a[self.i] != ")":
                raise ValueError("no )")
            self.i += 1
            return value
        if i + 2 < len(a) and a[i + 1] in ("=", "==", "!=", "<", ">", *self._INT_OPS, "=~"):
            left, op, right = a[i], a[i + 1], a[i + 2]
            self.i += 3
            if op in self._INT_OPS:
                if not (_INTEGER.fullmatch(left) and _INTEGER.fullmatch(right)):
                    raise ValueError("not integers")
                return self._INT_OPS[op](int(left), int(right))
            if op == "=~" or self.double and op != "<" and op != ">" and any(c in right for c in "*?["):
                raise ValueError("a pattern")
            return {"=": left == right, "==": left == right, "!=": left != right, "<": left < right,
                    ">": left > right}[op]
        if a[i] in ("-n", "-z") and i + 1 < len(a):
            self.i += 2
            return bool(a[i + 1]) == (a[i] == "-n")
        if a[i].startswith("-") and len(a[i]) == 2 and i + 1 < len(a):
            raise ValueError("a file test")
        self.i += 1
        return bool(a[i])


def read_script(text, name, want=None):
    """What a script's text would run (ScriptError naming `name` and the line when it cannot be read): its commands,
    launches and trainers; want: the trainer (by number) whose environment is gathered (None: the first)."""
    # The reading makes many small objects that never form cycles: Python's cycle collector, walking them all again
    # and again as they grow, would make the time grow faster than the script; it is off while they are made.
    collecting = gc.isenabled()
    gc.disable()
    try:
        tree = parse_syntax(text, name)
        reader = _Reader(name, want)
        reader.status(tree)
    finally:
        if collecting:
            gc.enable()
    return Script(tuple(reader.commands), tuple(reader.launches), tuple(reader.trainers), text.count("\n") + 1)
