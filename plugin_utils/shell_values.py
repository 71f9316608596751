"""The values a verl launch script's variables hold, and the words they expand to, as bash would expand them.

plugin_utils/verl_script.py follows the script's commands in order; this is what those commands set and read, kept
apart because it is one model with its own rules and limits. A shell variable is a Var: its value's pieces (Piece),
each literal text or an Unknown that says what it is and why it is not known here, the line that set it, and for an
array its Items. A Scope holds the variables set so far, one Frame for each branch or subshell over its parent's.

* What the script sets (NAME=..., export, declare, arrays NAME=(...) and NAME+=(...), unset) expands where it is used
  ($NAME, "${NAME[@]}", ${NAME[*]}, ${#NAME}), split into words as bash splits unquoted expansions; $((...)) is
  computed over the integers the script has set.
* ${NAME:-word}, ${NAME-word}, ${NAME:=word} (and :+, +, :?) of a NAME the script never sets take their default:
  each such value says so (Default), for the report to tell where it came from.
* $HOME, $1, $@, $(...), `...`, ~ and anything else that would expand when the script runs stay Unknown; a secret's
  value (a name redaction.is_secret_name calls secret) is never expanded: it stays Unknown too, named, never shown.

The time stays linear in the script's size: a value is looked up through no more frames than branches nest, what may
change every value (source, eval) is one mark read on lookup (never a pass over every variable), and values and words
past MAX_WORK bytes in all are refused (ScriptError).
"""

import re
from typing import NamedTuple

from ansible.module_utils.base import redaction

from plugin_utils.shell_lexer import MAX_BYTES, NAME, SPECIAL, Arith, ArrayWord, Lit, Opaque, ScriptError

__all__ = ("INTEGER", "MAX_WORK", "NOT_SET", "SCRIPT_ARGS", "Default", "Frame", "Items", "Piece", "Scope", "Unknown",
           "Var", "Word", "merged", "undecided")

NOT_SET = "not set by the script (it would come from the environment of whoever runs it)"
SCRIPT_ARGS = "the script's arguments (read here as run without any)"
# A launch script's values and words are a few times its size: what grows past this (a value doubled line after line,
# values copied again and again) is refused, so that the time stays linear in the script's size whatever it holds.
MAX_WORK = 16 * MAX_BYTES  # the bytes of all the values the script sets and all the words its commands get
_IFS = re.compile(r"[ \t\n]+")
_BRACES = re.compile(r"\{[^{}\s]*(?:,|\.\.)[^{}\s]*\}")  # {a,b} and {1..3} in unquoted text: brace expansion
INTEGER = re.compile(r"\s*[-+]?(?:0|[1-9][0-9]*)\s*")  # an integer as test -eq and $((...)) take it


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


class Frame:
    """The variables one branch (or subshell) sets over its parent's; stopped: exit, return or break ran here."""

    __slots__ = ("depth", "parent", "stopped", "vars")

    def __init__(self, parent):
        self.parent, self.vars, self.stopped = parent, {}, None
        self.depth = parent.depth + 1 if parent else 0


_BREAK = object()  # between the items of "${NAME[@]}": a word ends there even when quoted


def merged(pieces):
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


def undecided(why):
    """Why branches are followed apart, as the values and commands they leave say it."""
    return f"not decided here: {why}" if why else "not decided here"


class Scope:
    """The variables the script has set so far, one Frame a branch over its parent's, and the words they expand to."""

    def __init__(self, name):
        self.name = name
        self.frame = Frame(None)
        self.seq = 0
        self.forgot = None  # (seq, line, what): every value set before it may have changed there (source, eval)
        self.work = 0  # bytes of values and words made so far (MAX_WORK)
        self.secrets = {}  # name: whether redaction calls it secret, asked once a name
        self.functions = 0  # inside a function's body: $1 and $@ are its arguments, not the script's

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
            raise ScriptError(self.name, line, f"its values and words grow past {MAX_WORK} bytes: not a launch script")

    def secret(self, name):
        if name not in self.secrets:
            self.secrets[name] = redaction.is_secret_name(name)
        return self.secrets[name]

    def forget(self, line, what):
        """From here on every value the script set before may have changed (O(1): one mark, read on lookup)."""
        self.seq += 1
        self.forgot = (self.seq, line, what)

    def join(self, alive, why):
        """Keep what the branches that did not exit (label, Frame) agree on, in the frame they forked from."""
        base = self.frame
        names = dict.fromkeys(name for _, frame in alive for name in frame.vars)
        for name in names:
            before = self.lookup(name)
            values = [(label, frame.vars.get(name, before)) for label, frame in alive]
            kept = self._merge(before, values, why)
            self.seq += 1
            base.vars[name] = kept._replace(seq=self.seq)

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
                    items.append(tuple(p._replace(maybe=p.maybe or f"passed only {label} ({undecided(why)})")
                                       for p in item))
            return Var(items=_items(items, start), line=line, exported=exported)
        return Var(line=line, exported=exported,
                   doubt=f"set differently by the script's branches (line {line}; {undecided(why)})")

    def exported(self):
        """The variables every later command's environment gets (name: Var): those exported and not unset."""
        env, frame, seen = {}, self.frame, set()
        while frame is not None:
            for name, var in frame.vars.items():
                if name not in seen:
                    seen.add(name)
                    if var.exported and not var.unset:
                        env[name] = var if not self.forgot or var.seq > self.forgot[0] else \
                            var._replace(doubt=f"line {self.forgot[1]} ({self.forgot[2]}) may change it")
            frame = frame.parent
        return env

    # ---- what the script sets: NAME=value, declare, export, unset

    def assign_word(self, word, exported):
        """NAME=value, NAME+=value, NAME=(...) or NAME+=(...): False when its status is not known (a $(...))."""
        if isinstance(word, ArrayWord):
            items = [tuple(w.pieces) for raw in word.items for w in self.expand(raw)]
            old, doubt = self.state(word.name)
            base = None
            if word.append and old is not None and not old.unset:
                base = old.items if old.items is not None else _items((old.pieces,))
            var = Var(items=_items(items, base), line=word.line, exported=bool(old and old.exported) or exported,
                      doubt=doubt if word.append else None)
            self.assign(word.name, var)
            return not any(isinstance(p, Opaque) for raw in word.items for p in raw.parts)
        name, append, parts = word.assignment()
        pieces = self.value(parts)
        old, doubt = self.state(name)
        if append and old is not None and not old.unset:
            if old.items is not None:  # NAME+=value of an array appends to its first item
                items = old.items.all()
                items = (merged((items[0] if items else ()) + pieces),) + items[1:]
                self.assign(name, Var(items=_items(items), line=word.line, exported=old.exported, doubt=doubt))
                return True
            pieces = merged(old.pieces + pieces)
        else:
            doubt = None
        self.assign(name, Var(pieces, line=word.line, exported=bool(old and old.exported and not old.unset) or exported,
                              doubt=doubt))
        return not any(isinstance(p, Opaque) for p in parts)

    def value(self, parts):
        """An assignment's value: expanded, never split."""
        words = self._expand_parts(parts, split=False)
        return words[0].pieces if words else ()

    def declare(self, builtin, words, line):
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
                self.assign_word(raw, export and not unexport)
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

    def unset(self, words, line):
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

    def expand_all(self, raws, split=True):
        out = []
        for raw in raws:
            out += self.expand(raw, split)
        return out

    def expand(self, raw, split=True):
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
        words = [Word(merged(f), line) for f in fields]
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

    # ---- $(( ))

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
            if value is None or not INTEGER.fullmatch(value):
                return None, f"arithmetic over ${name}, whose value is not an integer known here"
            values.append(str(int(value)))
        try:
            result, rest = _Arith(values).parse()
        except (ValueError, IndexError, ZeroDivisionError, RecursionError):
            return None, "arithmetic bash would compute otherwise or refuse: not evaluated"
        if rest:
            return None, "arithmetic with an operator not read here: not evaluated"
        return result, None


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
