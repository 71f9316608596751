"""A bash script's syntax, read as bash reads it and never run: its words (tokens) and its commands (a tree).

The words keep their parts apart, for plugin_utils/shell_values.py to expand in order with what the script has set by
then: literal text (quoted or not: only unquoted text is split, or matched as a pattern), a parameter ($NAME,
${NAME:-word}, ${NAME[@]}, $1, $@: its operator and its word kept as parts too), arithmetic ($((...))) and what cannot
be known without running something ($(...), `...`, $'...', ~, ${NAME/x/y}): Opaque, with why. `NAME=( ... )` is an
array assignment whose items are words (a `#` where an item would start begins a comment, quotes in it included).
The tree has bash's commands: simple commands, pipelines, && and || lists, if, case, loops, { } and ( ) groups,
functions; here-document bodies are skipped unread.

Every scan moves forward only (each character is read once, runs of plain text by one regex match), so the time is
linear in the script's size; nesting deeper than MAX_DEPTH is refused, as is a NUL anywhere. Errors are ScriptError,
one line naming the file, the line and the problem, never a value.
"""

import bisect
import re
from dataclasses import dataclass
from typing import NamedTuple

MAX_BYTES = 1 << 20  # a launch script is a page; the spec files' own limit (safe_yaml.MAX_BYTES)
MAX_DEPTH = 100  # quotes, expansions and commands nested deeper than this are not a launch script's
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
SPECIAL = {"@": "the script's arguments", "*": "the script's arguments", "#": "the number of the script's arguments",
           "?": "the last command's exit status", "$": "the shell's process id", "!": "the last background job",
           "-": "the shell's options", "0": "the script's own name"}
RESERVED = {"if", "then", "elif", "else", "fi", "case", "esac", "for", "select", "while", "until", "do", "done", "{",
            "}", "!", "function", "time", "[[", "]]", "in"}
_BLANK = " \t\r"  # \r too: a script saved with CRLF line ends reads as it was meant
_ENDS_WORD = " \t\r\n;&|()<>"
_PLAIN = re.compile(r"[^ \t\r\n;&|()<>\\'\"$`~]+")  # unquoted text that ends no word and starts no expansion
_PLAIN_WORD = re.compile(r"[^ \t\r\n;&|()<>\\'\"$`~]+(?=[ \t\r\n;&|)<>]|\Z)")  # a word that is all plain text
_PLAIN_DQ = re.compile(r"[^\"\\$`]+")  # text inside double quotes
_PLAIN_BRACE = re.compile(r"[^}\\'\"$`~]+")  # the word of ${NAME:-word}, unquoted: blanks are part of it
_PLAIN_BRACE_DQ = re.compile(r"[^}\"\\$`]+")  # that word inside double quotes ('...' is literal there)
_REDIRECT = re.compile(r"[0-9]*(?:&>>|<<-|<<<|&>|<<|>>|>&|<&|>\||<>|<|>)")
_DUP_TARGET = re.compile(r"[0-9]+-?|-")
# What starts most tokens, in one match (the blanks after it too): a word that is all plain text (not before a
# redirection nor an array's parenthesis), blanks and continuations, a newline, an operator, a comment, a redirection.
_TOKEN = re.compile(r"""(?P<word>[^ \t\r\n;&|()<>\\'"$`~\#][^ \t\r\n;&|()<>\\'"$`~]*)(?=[ \t\r\n;&|)]|\Z)[ \t\r]*
    |(?P<blank>(?:[ \t\r]|\\\n)+)|(?P<nl>\n)|(?P<op>;;&|;;|;&|&&|\|\||\|&|;|&(?!>)|\||\(|\))[ \t\r]*
    |(?P<comment>\#[^\n]*)|(?P<redirect>[0-9]*(?:&>>|<<-|<<<|&>|<<|>>|>&|<&|>\||<>|<|>))""", re.VERBOSE)
_PARAM_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?")
_TILDE = re.compile(r"~[A-Za-z0-9._+-]*")
_SPECIAL_NAME = re.compile(r"[0-9]+|[@*#?$!0-]")


class ScriptError(ValueError):
    """A script that cannot be read: one line, `<file>:<line>: <problem>`, never quoting a value."""

    def __init__(self, name, line, problem):
        super().__init__(f"{name}:{line}: {problem}" if line else f"{name}: {problem}")


# ---------------------------------------------------------------- the parts of a word


class Lit(NamedTuple):
    """Literal text; quoted: inside quotes (or escaped), so never split nor a pattern."""

    text: str
    quoted: bool
    line: int


class Param(NamedTuple):
    """$NAME, ${NAME}, ${NAME op word} (op one of :- - := = :+ + :? ?), ${#NAME} (op '#'), ${NAME[index]}; name may be
    a digit string or one of SPECIAL. word: its parts (None when op takes none)."""

    name: str
    op: str
    word: tuple | None
    index: str | None
    raw: str
    quoted: bool
    line: int


class Arith(NamedTuple):
    """$((text)): evaluated over the integers the script has set."""

    text: str
    raw: str
    quoted: bool
    line: int


class Opaque(NamedTuple):
    """What cannot be known without running something: raw is how it is shown (a command substitution shows only
    its first word), why says what it is."""

    raw: str
    why: str
    quoted: bool
    line: int


class Word(NamedTuple):
    parts: tuple
    line: int

    def plain(self):
        """The word's text when it is one unquoted literal (a reserved word, a command name), else None."""
        if len(self.parts) == 1 and isinstance(self.parts[0], Lit) and not self.parts[0].quoted:
            return self.parts[0].text
        return None

    def assignment(self):
        """(name, append, the value's parts) of a NAME=value or NAME+=value word, else None."""
        first = self.parts[0] if self.parts else None
        m = ASSIGN.match(first.text) if isinstance(first, Lit) and not first.quoted else None
        if not m:
            return None
        rest = first.text[m.end():]
        return m.group(1), bool(m.group(2)), ((Lit(rest, False, first.line),) if rest else ()) + self.parts[1:]


class ArrayWord(NamedTuple):
    """NAME=( item ... ) or NAME+=( ... ): items are Words."""

    name: str
    append: bool
    items: tuple
    line: int

    def plain(self):
        return None

    def assignment(self):
        return None


class Op(NamedTuple):
    text: str
    line: int


class Redirect(NamedTuple):
    text: str  # the operator as written, with its file descriptor (2>&1, >, <<)
    line: int
    target: object  # a Word, or None


def read(path, name=None):
    """The text of a script file (at most MAX_BYTES, UTF-8, no NUL); ScriptError naming it otherwise."""
    name = name or path
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise ScriptError(name, None, f"cannot read it ({err.strerror})") from None
    if len(data) > MAX_BYTES:
        raise ScriptError(name, None, f"larger than {MAX_BYTES} bytes: not a launch script")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ScriptError(name, data.count(b"\n", 0, err.start) + 1, "not UTF-8 text") from None
    return text


def _subst_shown(inner):
    """A command substitution as shown: its first word only (the rest may be anything, a key on a command line)."""
    m = re.match(r"\s*([A-Za-z0-9_./-]+)", inner)
    if not m:
        return "$(...)"
    return f"$({m.group(1)}{' ...' if inner[m.end():].strip() else ''})"


# ---------------------------------------------------------------- tokens


class Lexer:
    """The script's tokens: Words and ArrayWords (their parts unexpanded), Ops and Redirects."""

    def __init__(self, text, name):
        self.t, self.name, self.n = text, name, len(text)
        self._at, self._line = 0, 1  # the line of the furthest position asked for: the next is counted from there
        self._newlines = None  # every newline's position, made once for the positions asked for out of order
        nul = text.find("\0")
        if nul >= 0:
            self.fail(nul, "holds a NUL byte: not a launch script")

    def line(self, pos):
        """The line of pos: counted on from the furthest position asked for (each newline counted once), or
        looked up in the list of newlines for a position before it."""
        if pos < self._at:
            if self._newlines is None:
                self._newlines = [m.start() for m in re.finditer("\n", self.t)]
            return bisect.bisect_left(self._newlines, pos) + 1
        self._line += self.t.count("\n", self._at, pos)
        self._at = pos
        return self._line

    def fail(self, pos, problem):
        raise ScriptError(self.name, self.line(pos), problem)

    def tokens(self):
        t, i, out, heredocs = self.t, 0, [], []
        while i < self.n:
            m = _TOKEN.match(t, i)
            kind = m.lastgroup if m else None
            if kind in ("blank", "comment"):  # a comment starts only where a word would: here
                i = m.end()
            elif kind == "nl":
                out.append(Op("\n", self.line(i)))
                i = self._skip_heredocs(i + 1, heredocs)
            elif kind == "redirect":
                i = self._redirect(i, out, heredocs)
            elif kind == "op":
                out.append(Op(m.group("op"), self.line(i)))
                i = m.end()
            elif kind == "word":
                line = self.line(i)
                out.append(Word((Lit(m.group("word"), False, line),), line))
                i = m.end()
            else:
                word, i = self._word(i, 0)
                out.append(word)
        if heredocs:
            self.fail(self.n, "a here-document never ends")
        return out

    def _redirect(self, i, out, heredocs):
        m = _REDIRECT.match(self.t, i)
        start, op = i, m.group().lstrip("0123456789")
        i = m.end()
        while i < self.n and self.t[i] in " \t":
            i += 1
        target = None
        dup = _DUP_TARGET.match(self.t, i) if op in (">&", "<&") else None
        if dup:
            i = dup.end()
        elif i < self.n and self.t[i] not in _ENDS_WORD:
            target, i = self._word(i, 0)
        else:
            self.fail(i, f"the redirection {op} names no file")
        if op in ("<<", "<<-"):
            heredocs.append((start, op, "".join(getattr(p, "text", getattr(p, "raw", "")) for p in target.parts)))
        out.append(Redirect(self.t[start:i].strip(), self.line(start), target))
        return i

    def _skip_heredocs(self, i, heredocs):
        """Past the bodies of the here-documents opened on the line that just ended: never read, never run."""
        while heredocs:
            start, op, delimiter = heredocs.pop(0)
            while True:
                if i >= self.n:
                    self.fail(start, "a here-document never ends")
                end = self.t.find("\n", i)
                end = self.n if end < 0 else end
                line = self.t[i:end]
                i = end + 1
                if (line.lstrip("\t") if op == "<<-" else line) == delimiter:
                    break
        return i

    # ---- words

    def _word(self, i, depth):
        """The word at i (unquoted context): its parts and the index after it."""
        t, start = self.t, i
        m = _PLAIN_WORD.match(t, i)
        if m and not (t.startswith("(", m.end()) and ASSIGN.fullmatch(m.group())):  # most words: one plain run
            line = self.line(i)
            return Word((Lit(m.group(), False, line),), line), m.end()
        parts = _Parts(self)
        assign = ASSIGN.match(t, i)
        assign_end = assign.end() if assign else -1
        while i < self.n:
            c = t[i]
            m = _PLAIN.match(t, i)
            if m:
                parts.lit(m.group(), False, i)
                i = m.end()
            elif c == "(" and assign and i == assign_end and len(parts.parts) + bool(parts.buf) == 1:
                return self._array(start, assign, i, depth)
            elif c in _ENDS_WORD:
                break
            elif c == "~":
                i = self._tilde(i, parts, i == start or (assign_end >= 0 and i >= assign_end and t[i - 1] in "=:"))
            else:
                i = self._common(i, parts, False, depth)
        return Word(parts.done(), self.line(start)), i

    def _tilde(self, i, parts, expands):
        """~ and ~user expand where a word (or an assignment's value, after = or :) starts, before / or its end."""
        m = _TILDE.match(self.t, i)
        after = self.t[m.end():m.end() + 1]
        if expands and (not after or after in _ENDS_WORD + "/:}"):
            parts.add(Opaque(m.group(), "a home directory of whoever runs it", False, self.line(i)))
        else:
            parts.lit(m.group(), False, i)
        return m.end()

    def _common(self, i, parts, in_brace, depth):
        """Quotes, escapes and expansions, in an unquoted context: the index after the one at i."""
        t, c = self.t, self.t[i]
        if c == "\\":
            if t.startswith("\n", i + 1):
                return i + 2
            parts.lit(t[i + 1:i + 2] or "\\", True, i)
            return i + 2
        if c == "'":
            end = t.find("'", i + 1)
            if end < 0:
                self.fail(i, "a single quote is never closed")
            parts.lit(t[i + 1:end], True, i)
            return end + 1
        if c == '"':
            return self._double(i, parts, depth)
        if c in "$`":
            return self._dollar(i, parts, False, depth)
        parts.lit(c, False, i)  # a character the caller's run stopped at that is literal here (} ~)
        return i + 1

    def _double(self, i, parts, depth):
        t, open_at = self.t, i
        self._deeper(i, depth)
        i += 1
        before = (len(parts.parts), len(parts.buf))
        while True:
            if i >= self.n:
                self.fail(open_at, "a double quote is never closed")
            m = _PLAIN_DQ.match(t, i)
            if m:
                parts.lit(m.group(), True, i)
                i = m.end()
                continue
            c = t[i]
            if c == '"':
                if (len(parts.parts), len(parts.buf)) == before:
                    parts.lit("", True, open_at)  # "" is an empty word; "${A[@]}" of no items is none
                return i + 1
            if c == "\\":
                nxt = t[i + 1:i + 2]
                if nxt == "\n":
                    i += 2
                elif nxt in ("$", "`", '"', "\\"):
                    parts.lit(nxt, True, i)
                    i += 2
                else:
                    parts.lit("\\", True, i)
                    i += 1
            else:
                i = self._dollar(i, parts, True, depth + 1)

    def _dollar(self, i, parts, quoted, depth):
        """The expansion at i ($ or `), added to parts: the index after it ($ alone is literal)."""
        t, line = self.t, self.line(i)
        self._deeper(i, depth)
        if t[i] == "`":
            end = i + 1
            while end < self.n and t[end] != "`":
                end += 2 if t[end] == "\\" else 1
            if end >= self.n:
                self.fail(i, "a backquote is never closed")
            parts.add(Opaque(_subst_shown(t[i + 1:end]), "a command substitution: never run", quoted, line))
            return end + 1
        nxt = t[i + 1:i + 2]
        if t.startswith("((", i + 1):
            end = self._arith_end(i + 3)
            if end is not None:
                parts.add(Arith(t[i + 3:end - 2], t[i:end], quoted, line))
                return end
        if nxt == "(":
            end = self._skip_paren(i + 2, depth + 1, i)
            parts.add(Opaque(_subst_shown(t[i + 2:end - 1]), "a command substitution: never run", quoted, line))
            return end
        if nxt == "{":
            return self._brace(i, parts, quoted, depth + 1)
        m = NAME.match(t, i + 1)
        if m:
            parts.add(Param(m.group(), "", None, None, t[i:m.end()], quoted, line))
            return m.end()
        if nxt and (nxt.isdigit() or nxt in SPECIAL):
            parts.add(Param(nxt, "", None, None, t[i:i + 2], quoted, line))
            return i + 2
        if nxt == "'" and not quoted:  # $'...': ANSI-C quoting, its escapes left undecoded
            end = i + 2
            while end < self.n and t[end] != "'":
                end += 2 if t[end] == "\\" else 1
            if end >= self.n:
                self.fail(i, "a $' quote is never closed")
            parts.add(Opaque(t[i:end + 1], "ANSI-C quoting: not decoded", quoted, line))
            return end + 1
        if nxt == '"' and not quoted:  # $"...": a translated string, read as "..."
            return self._double(i + 1, parts, depth)
        parts.lit("$", quoted, i)
        return i + 1

    def _brace(self, i, parts, quoted, depth):
        """${...} at i: a Param when bash's simple forms, else Opaque (its end found either way)."""
        t, line, j = self.t, self.line(i), i + 2
        length = t.startswith("#", j) and t[j + 1:j + 2] not in ("}", "")
        j += length
        m = NAME.match(t, j) or _SPECIAL_NAME.match(t, j)
        index = None
        if m and not t.startswith("!", i + 2):
            name, j = m.group(), m.end()
            if t.startswith("[", j) and NAME.fullmatch(name):
                close = t.find("]", j)
                if close < 0 or "}" in t[j:close]:
                    self.fail(i, "a ${ is never closed")
                index, j = t[j + 1:close], close + 1
            op = "#" if length else next((o for o in _PARAM_OPS if t.startswith(o, j)), None)
            if t.startswith("}", j) and op in ("#", None):
                parts.add(Param(name, op or "", None, index, t[i:j + 1], quoted, line))
                return j + 1
            if op and op != "#" and not length:
                word = _Parts(self)
                end = self._brace_word(j + len(op), word, quoted, depth)
                parts.add(Param(name, op, word.done(), index, t[i:end], quoted, line))
                return end
        end = self._skip_brace(i + 2, depth, i)
        parts.add(Opaque(t[i:end], "a parameter expansion bash computes from a pattern or indirectly: not evaluated",
                         quoted, line))
        return end

    def _brace_word(self, i, word, quoted, depth):
        """The word of ${NAME op word}, up to its }: the index after the }."""
        t, start = self.t, i
        self._deeper(i, depth)
        while True:
            if i >= self.n:
                self.fail(start, "a ${ is never closed")
            c = t[i]
            if c == "}":
                return i + 1
            m = (_PLAIN_BRACE_DQ if quoted else _PLAIN_BRACE).match(t, i)
            if m:
                word.lit(m.group(), quoted, i)
                i = m.end()
            elif c == "~":
                i = self._tilde(i, word, i == start and not quoted)
            elif quoted and c == '"':  # "${X:-"a b"}": quotes nest inside the braces
                i = self._double(i, word, depth + 1)
            elif quoted and c == "\\":
                nxt = t[i + 1:i + 2]
                word.lit(nxt if nxt in ("$", "`", '"', "\\", "}") else "\\" + nxt, True, i)
                i += 2
            elif quoted and c in "$`":
                i = self._dollar(i, word, True, depth + 1)
            else:
                i = self._common(i, word, True, depth + 1)

    def _array(self, start, assign, i, depth):
        """NAME=( items ): each item a word; # where an item would start begins a comment (quotes and all)."""
        t, items = self.t, []
        open_at = i
        i += 1
        while True:
            while i < self.n and (t[i] in _BLANK + "\n" or t.startswith("\\\n", i)):
                i += 2 if t[i] == "\\" else 1
            if i >= self.n:
                self.fail(open_at, "an array ( is never closed")
            c = t[i]
            if c == ")":
                return ArrayWord(assign.group(1), bool(assign.group(2)), tuple(items), self.line(start)), i + 1
            if c == "#":
                end = t.find("\n", i)
                i = self.n if end < 0 else end
            elif c in ";&|(<>":
                self.fail(i, f"an array holds {c}, which bash does not take there")
            else:
                word, i = self._word(i, depth + 1)
                if isinstance(word, ArrayWord):  # A=(1 2) as an item: bash's syntax error near `('
                    self.fail(i, "an array holds an array assignment, which bash does not take there")
                items.append(word)

    # ---- skipping what is never read (its end found with quotes and nesting, forward only)

    def _deeper(self, i, depth):
        if depth > MAX_DEPTH:
            self.fail(i, f"quotes and expansions nested more than {MAX_DEPTH} deep: not a launch script")

    def _arith_end(self, i):
        """The index after the )) that closes $(( whose text starts at i, or None when it is $( (...) )."""
        t, depth = self.t, 0
        while i < self.n:
            c = t[i]
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    return i + 2 if t.startswith("))", i) else None
                depth -= 1
            elif c in "'\"`\\" or t.startswith("$(", i) and not t.startswith("$((", i):
                return None  # quotes or a command inside: read as a command substitution
            i += 1
        self.fail(i, "a $(( is never closed")
        return None

    def _skip_paren(self, i, depth, open_at):
        """The index after the ) that closes the $( or ( whose text starts at i."""
        self._deeper(i, depth)
        t, level = self.t, 0
        while i < self.n:
            c = t[i]
            if c == "\\":
                i += 2
            elif c == "'":
                end = t.find("'", i + 1)
                i = self.n if end < 0 else end + 1
            elif c == '"':
                i = self._skip_double(i + 1, depth + 1)
            elif c == "`" or (c == "$" and t.startswith(("$(", "${"), i)):
                i = self._skip_dollar(i, depth + 1)
            elif c == "#" and (i == 0 or t[i - 1] in _ENDS_WORD):
                end = t.find("\n", i)
                i = self.n if end < 0 else end
            elif c == "(":
                level += 1
                i += 1
            elif c == ")":
                if level == 0:
                    return i + 1
                level -= 1
                i += 1
            else:
                i += 1
        self.fail(open_at, "a $( is never closed")
        return None

    def _skip_double(self, i, depth):
        t = self.t
        while i < self.n:
            c = t[i]
            if c == '"':
                return i + 1
            if c == "\\":
                i += 2
            elif c == "`" or (c == "$" and t.startswith(("$(", "${"), i)):
                i = self._skip_dollar(i, depth + 1)
            else:
                i += 1
        self.fail(i, "a double quote is never closed")
        return None

    def _skip_dollar(self, i, depth):
        self._deeper(i, depth)
        t = self.t
        if t[i] == "`":
            end = i + 1
            while end < self.n and t[end] != "`":
                end += 2 if t[end] == "\\" else 1
            if end >= self.n:
                self.fail(i, "a backquote is never closed")
            return end + 1
        if t.startswith("$(", i):
            return self._skip_paren(i + 2, depth + 1, i)
        return self._skip_brace(i + 2, depth + 1, i)

    def _skip_brace(self, i, depth, open_at):
        self._deeper(i, depth)
        t = self.t
        while i < self.n:
            c = t[i]
            if c == "}":
                return i + 1
            if c == "\\":
                i += 2
            elif c == "'":
                end = t.find("'", i + 1)
                i = self.n if end < 0 else end + 1
            elif c == '"':
                i = self._skip_double(i + 1, depth + 1)
            elif c == "`" or (c == "$" and t.startswith(("$(", "${"), i)):
                i = self._skip_dollar(i, depth + 1)
            else:
                i += 1
        self.fail(open_at, "a ${ is never closed")
        return None


class _Parts:
    """A word's parts as they are read: runs of literal text of one quoting joined once, at the end (never by
    repeated concatenation)."""

    def __init__(self, lexer):
        self.lexer, self.parts, self.buf, self.quoted, self.at = lexer, [], [], None, 0

    def lit(self, text, quoted, pos):
        if self.buf and self.quoted != quoted:
            self._flush()
        if not self.buf:
            self.quoted, self.at = quoted, pos
        self.buf.append(text)

    def add(self, part):
        self._flush()
        self.parts.append(part)

    def _flush(self):
        if self.buf:
            text = "".join(self.buf)
            if text or self.quoted:  # '' and "" make an empty word, where nothing makes none
                self.parts.append(Lit(text, self.quoted, self.lexer.line(self.at)))
            self.buf = []

    def done(self):
        self._flush()
        return tuple(self.parts)


# ---------------------------------------------------------------- commands


@dataclass(frozen=True)
class Simple:
    """A simple command: its words (assignments first, as written), redirections."""

    words: tuple
    redirects: tuple
    line: int


@dataclass(frozen=True)
class Pipeline:
    commands: tuple
    negated: bool
    line: int


@dataclass(frozen=True)
class AndOr:
    """first && second || third: rest holds (operator, pipeline) pairs."""

    first: Pipeline
    rest: tuple
    line: int


@dataclass(frozen=True)
class Sequence:
    """Commands one after another: (AndOr, whether sent to the background with &)."""

    items: tuple


@dataclass(frozen=True)
class If:
    """if/elif clauses, (condition, body) each, and the else body (or None)."""

    clauses: tuple
    orelse: Sequence | None
    line: int


@dataclass(frozen=True)
class Case:
    """case WORD in: arms of (patterns, body)."""

    word: Word
    arms: tuple
    line: int


@dataclass(frozen=True)
class Loop:
    """for/select NAME in WORDS (words None: the arguments), while/until COND (cond): do BODY done."""

    kind: str
    name: str | None
    words: tuple | None
    cond: Sequence | None
    body: Sequence
    line: int


@dataclass(frozen=True)
class Group:
    """{ body; } or ( body ), a subshell."""

    body: Sequence
    subshell: bool
    line: int


@dataclass(frozen=True)
class Function:
    name: str
    body: object
    line: int


@dataclass(frozen=True)
class ArithCommand:
    """(( expression )): it may assign (x++, x=1), so the names it holds are not known afterwards."""

    names: tuple
    line: int


class Parser:
    """Tokens into commands, as bash groups them (reserved words only where a command starts)."""

    def __init__(self, tokens, name, lexer):
        self.end = Op("", tokens[-1].line if tokens else 1)  # after the last token: no operator, no word
        self.toks, self.i, self.name, self.lexer, self.depth = [*tokens, self.end], 0, name, lexer, 0

    def fail(self, line, problem):
        raise ScriptError(self.name, line, problem)

    def peek(self):
        tok = self.toks[self.i]
        return None if tok is self.end else tok

    def _line(self):
        return self.toks[self.i].line

    def _is_op(self, *texts):
        tok = self.toks[self.i]
        return tok.__class__ is Op and tok.text in texts

    def _is_word(self, *texts):
        tok = self.toks[self.i]
        return tok.__class__ is Word and tok.plain() in texts

    def _expect(self, text, what):
        if not (self._is_word(text) or self._is_op(text)):
            self.fail(self._line(), f"{what} has no {text}")
        self.i += 1

    def _newlines(self):
        while self._is_op("\n"):
            self.i += 1

    def parse(self):
        body = self.sequence((), ())
        if self.peek() is not None:
            tok = self.peek()
            shown = tok.text if isinstance(tok, Op) else tok.plain() or "a word"
            self.fail(tok.line, f"{shown!r} where bash expects a command")
        return body

    def sequence(self, stop_words, stop_ops):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(self._line(), f"commands nested more than {MAX_DEPTH} deep: not a launch script")
        items = []
        while True:
            while self._is_op("\n", ";"):
                self.i += 1
            tok = self.peek()
            if tok is None or self._is_op(*stop_ops, ")", ";;", ";&", ";;&") or self._is_word(*stop_words):
                break
            node = self.and_or()
            background = self._is_op("&")
            if self._is_op("&", ";", "\n"):
                self.i += 1
            items.append((node, background))
        self.depth -= 1
        return Sequence(tuple(items))

    def and_or(self):
        line = self._line()
        first, rest = self.pipeline(), []
        while self._is_op("&&", "||"):
            op = self.peek().text
            self.i += 1
            self._newlines()
            rest.append((op, self.pipeline()))
        return AndOr(first, tuple(rest), line)

    def pipeline(self):
        line, negated = self._line(), False
        while self._is_word("!", "time"):
            negated ^= self.peek().plain() == "!"
            self.i += 1
        commands = [self.command()]
        while self._is_op("|", "|&"):
            self.i += 1
            self._newlines()
            commands.append(self.command())
        return Pipeline(tuple(commands), negated, line)

    def command(self):
        tok, line = self.peek(), self._line()
        if tok is None:
            self.fail(line, "a command is missing at the end")
        if self._is_op("("):
            self.i += 1
            if self._is_op("("):  # (( expression ))
                return self._arith_command(line)
            body = self.sequence((), (")",))
            self._expect(")", f"the ( of line {line}")
            return self._redirects(Group(body, True, line))
        if isinstance(tok, Op):
            self.fail(line, f"{tok.text!r} where bash expects a command")
        word = tok.plain() if isinstance(tok, Word) else None
        if word == "{":
            self.i += 1
            body = self.sequence(("}",), ())
            self._expect("}", f"the {{ of line {line}")
            return self._redirects(Group(body, False, line))
        if word == "if":
            return self._redirects(self._if(line))
        if word in ("while", "until"):
            self.i += 1
            cond = self.sequence(("do",), ())
            return self._redirects(Loop(word, None, None, cond, self._do(line), line))
        if word in ("for", "select"):
            return self._redirects(self._for(word, line))
        if word == "case":
            return self._redirects(self._case(line))
        if word == "function":
            self.i += 1
            name = self.peek()
            if not isinstance(name, Word) or not name.plain():
                self.fail(line, "function has no name")
            self.i += 1
            if self._is_op("("):
                self.i += 1
                self._expect(")", f"the function of line {line}")
            return self._function(name.plain(), line)
        if word and isinstance(self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None, Op) \
                and self.toks[self.i + 1].text == "(" and self.i + 2 < len(self.toks) \
                and isinstance(self.toks[self.i + 2], Op) and self.toks[self.i + 2].text == ")":
            self.i += 3
            return self._function(word, line)
        if word == "[[":
            return self._test_command(line)
        return self._simple(line)

    def _simple(self, line):
        words, redirects = [], []
        while True:
            tok = self.peek()
            if isinstance(tok, (Word, ArrayWord)):
                words.append(tok)
            elif isinstance(tok, Redirect):
                redirects.append(tok)
            else:
                break
            self.i += 1
        return Simple(tuple(words), tuple(redirects), line)

    def _test_command(self, line):
        """[[ ... ]]: its operators (&& || ( ) < >) are words of the test, up to ]]."""
        words = []
        while True:
            tok = self.peek()
            if tok is None or isinstance(tok, Op) and tok.text == "\n":
                self.fail(line, "a [[ is never closed with ]]")
            self.i += 1
            if isinstance(tok, Op):
                words.append(Word((Lit(tok.text, False, tok.line),), tok.line))
            elif isinstance(tok, Redirect):
                words.append(Word((Lit(tok.text, False, tok.line),), tok.line))
                if tok.target is not None:
                    words.append(tok.target)
            else:
                words.append(tok)
                if tok.plain() == "]]":
                    return Simple(tuple(words), (), line)

    def _arith_command(self, line):
        level, names = 2, []
        self.i += 1
        while level:
            tok = self.peek()
            if tok is None:
                self.fail(line, "a (( is never closed")
            if isinstance(tok, Op):
                level += (tok.text == "(") - (tok.text == ")")
            elif isinstance(tok, Word):
                names += [name for part in tok.parts for name in NAME.findall(getattr(part, "text", ""))
                          + [getattr(part, "name", "")] if NAME.fullmatch(name)]
            self.i += 1
        return ArithCommand(tuple(dict.fromkeys(names)), line)

    def _redirects(self, node):
        while isinstance(self.peek(), Redirect):
            self.i += 1
        return node

    def _function(self, name, line):
        self._newlines()
        return Function(name, self.command(), line)

    def _do(self, line):
        self._expect("do", f"the loop of line {line}")
        body = self.sequence(("done",), ())
        self._expect("done", f"the loop of line {line}")
        return body

    def _if(self, line):
        clauses, orelse = [], None
        while True:
            self.i += 1  # if / elif
            cond = self.sequence(("then",), ())
            self._expect("then", f"the if of line {line}")
            clauses.append((cond, self.sequence(("elif", "else", "fi"), ())))
            if not self._is_word("elif"):
                break
        if self._is_word("else"):
            self.i += 1
            orelse = self.sequence(("fi",), ())
        self._expect("fi", f"the if of line {line}")
        return If(tuple(clauses), orelse, line)

    def _for(self, kind, line):
        self.i += 1
        if self._is_op("("):  # for (( ...; ...; ... ))
            self.i += 1
            self._arith_command(line)
            while self._is_op(";", "\n"):
                self.i += 1
            return Loop(kind, None, (), None, self._do(line), line)
        name = self.peek()
        if not isinstance(name, Word) or not name.plain() or not NAME.fullmatch(name.plain()):
            self.fail(line, f"{kind} has no variable name")
        self.i += 1
        self._newlines()
        words = None
        if self._is_word("in"):
            self.i += 1
            words = []
            while isinstance(self.peek(), Word):
                words.append(self.peek())
                self.i += 1
        while self._is_op(";", "\n"):
            self.i += 1
        return Loop(kind, name.plain(), None if words is None else tuple(words), None, self._do(line), line)

    def _case(self, line):
        self.i += 1
        word = self.peek()
        if not isinstance(word, Word):
            self.fail(line, "case has no word")
        self.i += 1
        self._newlines()
        self._expect("in", f"the case of line {line}")
        arms = []
        while True:
            self._newlines()
            if self._is_word("esac"):
                self.i += 1
                return Case(word, tuple(arms), line)
            if self._is_op("("):
                self.i += 1
            patterns = []
            while True:
                tok = self.peek()
                if not isinstance(tok, Word):
                    self.fail(self._line(), f"the case of line {line} has a pattern that is not a word")
                patterns.append(tok)
                self.i += 1
                if not self._is_op("|"):
                    break
                self.i += 1
            self._expect(")", f"the case pattern on line {patterns[0].line}")
            body = self.sequence(("esac",), (";;", ";&", ";;&"))
            arms.append((tuple(patterns), body))
            if self._is_op(";;", ";&", ";;&"):
                self.i += 1
            elif not self._is_word("esac"):
                self.fail(self._line(), f"the case of line {line} is never closed with esac")


def parse(text, name):
    """The commands of a script's text, as bash groups them (ScriptError naming `name` and the line otherwise)."""
    lexer = Lexer(text, name)
    return Parser(lexer.tokens(), name, lexer).parse()
