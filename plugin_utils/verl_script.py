"""A verl launch script read as bash would run it, and never run: what each command would be handed.

A launch script is data, like every file a user hands the project: no line of it runs, nothing is looked up in this
process's environment, no substitution is evaluated. plugin_utils/shell_lexer.py gives its commands as bash groups
them; here they are followed in order, as bash follows them, over what the script has set by then
(plugin_utils/shell_values.py: one model of a shell variable, Var, and the words it expands to).

* Conditions are decided where bash would decide them from what is known ([ ], test, [[ ]], true, false, case
  patterns); otherwise each branch is followed apart and what they set is merged: a value they agree on stays known,
  one they differ on is unknown (saying why), and an array's items added only in some branches are `maybe`, with the
  branch they depend on. An `exit` in a branch ends that branch only.
* A value set where bash would not keep it (a pipeline, `&`, a ( ) subshell) or after something that may change any
  value (source, eval, unset of an unknown name) is unknown from there on.
* Each simple command is kept with its words (a Command); a command that launches Python or torchrun on a module is a
  Launch, and one on a verl trainer module (verl.trainer.X) a Trainer (plugin_utils/verl_launch.py), with the
  environment it would get.

Errors are ScriptError, one line naming the file, the line and the problem, never a value. The time is linear in the
script's size (shell_values.py says how its values keep it so; branches nest at most 2 * MAX_DEPTH deep). Control
host only (plugin_utils/verl_import.py makes a JobSpec of it).
"""

import gc
import os
import re
from dataclasses import dataclass
from typing import ClassVar

from plugin_utils.shell_lexer import (
    ASSIGN,
    MAX_BYTES,
    MAX_DEPTH,
    NAME,
    AndOr,
    ArithCommand,
    ArrayWord,
    Case,
    Function,
    Group,
    If,
    Lit,
    Loop,
    Pipeline,
    ScriptError,
    Sequence,
    Simple,
    read,
)
from plugin_utils.shell_lexer import parse as parse_syntax
from plugin_utils.shell_values import INTEGER, Frame, Scope, Var, merged, undecided
from plugin_utils.verl_launch import Command, Trainer, command_name, launch_of

__all__ = ("ASSIGN", "MAX_BYTES", "Script", "ScriptError", "read", "read_script")

_DECLARE = ("export", "declare", "typeset", "readonly", "local")


@dataclass(frozen=True)
class Script:
    commands: tuple
    launches: tuple
    trainers: tuple
    lines: int


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
        self.scope = Scope(name)  # what the script has set so far, and what its words expand to
        self.commands, self.launches, self.trainers = [], [], []
        self.maybe = []  # why the commands being read run only sometimes, outermost first
        self.why = None  # why the last status asked for is not known

    def fail(self, line, problem):
        raise ScriptError(self.name, line, problem)

    # ---- running

    def status(self, node):
        """Run node; its exit status when known (True: success), else None with self.why saying why."""
        if self.scope.frame.stopped:
            return None
        if isinstance(node, Sequence):
            result = True
            for item, background in node.items:
                if self.scope.frame.stopped:
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
            self.scope.functions += 1
            self._fork([(f"when function {node.name} (line {node.line}) is called", lambda: self.status(node.body)),
                        ("when it is not", lambda: None)], "where a function is called is not followed here")
            self.scope.functions -= 1
            return True
        if isinstance(node, ArithCommand):
            for name in node.names:
                self.scope.assign(name, Var(line=node.line, doubt=f"line {node.line}'s (( )) may change it"))
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
            if self.scope.frame.stopped:
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
        scope = self.scope
        base = scope.frame
        scope.frame = Frame(base)
        run()
        child, scope.frame = scope.frame, base
        for name, var in child.vars.items():
            scope.assign(name, Var(line=var.line, exported=var.exported,
                                   doubt=f"set on line {var.line} in {where}, a subshell bash does not keep it from"))

    def _fork(self, branches, why):
        """Follow each branch apart from here, then keep what they agree on (see the module's docstring)."""
        base, outcomes = self.scope.frame, []
        if base.depth >= 2 * MAX_DEPTH:  # the parser's own limit keeps it lower; a guard all the same
            self.fail(None, f"branches nested more than {2 * MAX_DEPTH} deep: not a launch script")
        for label, run in branches:
            self.scope.frame = Frame(base)
            self.maybe.append(f"{label} ({undecided(why)})")
            run()
            self.maybe.pop()
            outcomes.append((label, self.scope.frame))
        self.scope.frame = base
        alive = [(label, frame) for label, frame in outcomes if frame.stopped != "exit"]
        if not alive:
            base.stopped = "exit"
            return
        self.scope.join(alive, why)

    # ---- compound commands

    def _if(self, clauses, orelse, line):
        """The clause whose condition holds runs; conditions not decided here make branches, side by side (an elif
        chain never nests). A condition's own commands run as it is read, in order."""
        branches, why = [], None
        for cond, body in clauses:
            result = self.status(cond)
            if self.scope.frame.stopped:
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
        subject = self.scope.expand(node.word, split=False)[0]
        branches, why = [], None
        for patterns, body in node.arms:
            matched = False
            for pattern in patterns:
                pieces = self.scope.expand(pattern, split=False)[0].pieces
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
                self.scope.assign(node.name, Var(line=node.line, doubt=f"the variable of line {node.line}'s loop"))
            self.status(node.body)
            if self.scope.frame.stopped == "break":
                self.scope.frame.stopped = None

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
                ok = self.scope.assign_word(word, False) and ok
            return True if ok else self._unknown_status("an assignment's status is its command substitution's, "
                                                        "never run")
        first = words[0].plain()
        if first in _DECLARE:
            return self.scope.declare(first, words[1:], node.line)
        expanded = self.scope.expand_all(words)
        if not expanded:
            return True
        name = expanded[0].text if not expanded[0].unknowns else None
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        if name in ("[", "test", "[["):
            args = self.scope.expand_all(words, split=name != "[[")
            return self._test([w for w in args[1:]], name, node.line)
        if name in ("exit", "return", "break", "continue"):
            self.scope.frame.stopped = {"exit": "exit", "return": "return"}.get(name, "break")
            if name == "exit" and self.scope.functions:
                self.scope.frame.stopped = "return"
            return None
        if name in ("source", ".", "eval", "let"):
            self.scope.forget(node.line, name)
        elif name in ("read", "mapfile", "readarray", "getopts") or name == "printf" and len(expanded) > 2 \
                and expanded[1].text == "-v":
            for word in expanded[1:]:
                if NAME.fullmatch(word.text):
                    self.scope.assign(word.text, Var(line=node.line, doubt=f"read by {name} on line {node.line}"))
        elif name == "unset":
            self.scope.unset(words[1:], node.line)
        env = {}
        for word in prefix:
            if isinstance(word, ArrayWord):
                continue
            var_name, _, parts = word.assignment()
            env[var_name] = Var(self.scope.value(parts), line=word.line, exported=True)
        command = Command(node.line, tuple(expanded), tuple((r.line, r.text) for r in node.redirects),
                          "; ".join(self.maybe) or None)
        self.commands.append(command)
        self._launch(command, env)
        if name == "exec" and len(expanded) > 1:
            self.scope.frame.stopped = "exit"
        return self._unknown_status(command)

    # ---- [ ], [[ ]]

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
        launch = launch_of(command)
        if launch is None:
            return
        self.launches.append(launch)
        if launch.module and launch.module.startswith("verl.trainer."):
            number = len(self.trainers) + 1
            wanted = self.want == number or (self.want is None and number == 1)
            self.trainers.append(Trainer(number, launch, self._env(env, launch) if wanted else None))

    def _env(self, prefix, launch):
        """The variables the launched trainer gets from the script: exported ones, and its NAME=value prefixes."""
        env = self.scope.exported()
        after_env = False  # env NAME=value ... python3: those NAME=value are the trainer's environment
        for word in launch.launcher:
            m = ASSIGN.match(word.text)
            if after_env and m:
                env[m.group(1)] = Var(merged(_after(word.pieces, m.end())), line=word.line, exported=True)
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
                if not (INTEGER.fullmatch(left) and INTEGER.fullmatch(right)):
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
