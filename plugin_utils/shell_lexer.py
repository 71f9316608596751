"""Shell words, as a POSIX shell splits a script's text: the tokens of plugin_utils/verl_script.py, never run.

Quoting (single, double, backslash), backslash-newline continuations, comments (where a word would start: `a#b` is one
word), the operators that end a command (newline ; & && || | and parentheses), redirections (2>&1, > file) and
here-documents, whose bodies are skipped unread. A word stays segments: literal text (quoted or not: only unquoted
text is split or makes an assignment), a variable ($NAME, ${NAME}) or an expansion that cannot be known without running
something ($(...), `...`, ${X:-y}, $((...)), $1, $@, ~, an array): verl_script.py expands them in order, with the
variables the script has set by then. Errors are ScriptError, one line naming the file, the line and the problem.
"""

import bisect
import re
from dataclasses import dataclass

MAX_BYTES = 1 << 20  # a launch script is a page; the spec files' own limit (safe_yaml.MAX_BYTES)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_ENDS_WORD = " \t\n;&|()<>"
# Longest first, so `&&` is not read as two `&`, nor `>>` as two `>`.
_REDIRECTS = ("&>>", "<<-", "<<<", "&>", "<<", ">>", ">&", "<&", ">|", "<>", "<", ">")
_OPERATORS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
SPECIAL = {"@": "the script's arguments", "*": "the script's arguments", "#": "the number of the script's arguments",
           "?": "the last command's exit status", "$": "the shell's process id", "!": "the last background job",
           "-": "the shell's options", "0": "the script's own name"}


class ScriptError(ValueError):
    """A script that cannot be read: one line, `<file>:<line>: <problem>`, never quoting a value."""

    def __init__(self, name, line, problem):
        super().__init__(f"{name}:{line}: {problem}" if line else f"{name}: {problem}")


@dataclass(frozen=True)
class Seg:
    kind: str  # "lit", "var" or "unknown"
    text: str
    quoted: bool
    line: int


@dataclass(frozen=True)
class Raw:
    segs: tuple
    line: int
    end: int

    def plain(self):
        """The word's text when it is one unquoted literal (a reserved word, a digit before `>`), else None."""
        return self.segs[0].text if len(self.segs) == 1 and self.segs[0].kind == "lit" and not self.segs[0].quoted \
            else None


@dataclass(frozen=True)
class Op:
    text: str
    line: int


@dataclass(frozen=True)
class Redirect:
    text: str
    line: int
    target: Raw | None


def read(path, name=None):
    """The text of a script file (at most MAX_BYTES, UTF-8); ScriptError naming it otherwise."""
    name = name or path
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise ScriptError(name, None, f"cannot read it ({err.strerror})") from None
    if len(data) > MAX_BYTES:
        raise ScriptError(name, None, f"larger than {MAX_BYTES} bytes: not a launch script")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise ScriptError(name, line, "not UTF-8 text") from None


class Lexer:
    """The script's tokens: words (as segments, expanded later, in order), operators and redirections."""

    def __init__(self, text, name):
        self.t, self.name, self.n = text, name, len(text)
        self._newlines = [i for i, c in enumerate(text) if c == "\n"]

    def line(self, pos):
        return bisect.bisect_left(self._newlines, pos) + 1

    def fail(self, pos, problem):
        raise ScriptError(self.name, self.line(pos), problem)

    def tokens(self):
        t, i, out, heredocs = self.t, 0, [], []
        while i < self.n:
            c = t[i]
            if t.startswith("\\\n", i):
                i += 2
            elif c in " \t\r":
                i += 1
            elif c == "\n":
                out.append(Op("\n", self.line(i)))
                i = self._skip_heredocs(i + 1, heredocs)
            elif c == "#":  # a comment starts only where a word would
                end = t.find("\n", i)
                i = self.n if end < 0 else end
            elif any(t.startswith(r, i) for r in _REDIRECTS):
                i = self._redirect(i, out, heredocs)
            elif any(t.startswith(o, i) for o in _OPERATORS):
                op = next(o for o in _OPERATORS if t.startswith(o, i))
                out.append(Op(op, self.line(i)))
                i += len(op)
            else:
                word, i = self._word(i)
                out.append(word)
        if heredocs:
            self.fail(self.n, "a here-document never ends")
        return out

    def _redirect(self, i, out, heredocs):
        op = next(r for r in _REDIRECTS if self.t.startswith(r, i))
        start = i
        if out and isinstance(out[-1], Raw) and out[-1].end == i and (out[-1].plain() or "").isdigit():
            start = i - len(out.pop().plain())  # 2>&1: the digits name a file descriptor
        i += len(op)
        while i < self.n and self.t[i] in " \t":
            i += 1
        target = None
        if op in (">&", "<&") and re.match(r"[0-9]+-?|-", self.t[i:]):
            i += re.match(r"[0-9]+-?|-", self.t[i:]).end()
        elif i < self.n and self.t[i] not in _ENDS_WORD:
            target, i = self._word(i)
        elif op != ">&":
            self.fail(i, f"the redirection {op} names no file")
        if op in ("<<", "<<-"):
            heredocs.append((start, op, "".join(s.text for s in target.segs)))
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

    def _word(self, i):
        t, start, segs = self.t, i, []

        def lit(text, quoted):
            if segs and segs[-1].kind == "lit" and segs[-1].quoted == quoted:
                segs[-1] = Seg("lit", segs[-1].text + text, quoted, segs[-1].line)
            elif text or quoted:  # '' and "" make an empty word, where nothing makes none
                segs.append(Seg("lit", text, quoted, self.line(i)))

        while i < self.n:
            c = t[i]
            if c == "(" and len(segs) == 1 and segs[0].kind == "lit" and not segs[0].quoted \
                    and ASSIGN.fullmatch(segs[0].text):
                end = self._balanced(i, "(", ")", "an array ( is never closed")  # NAME=(a b): an array
                segs.append(Seg("unknown", t[i:end], False, self.line(i)))
                i = end
            elif c in _ENDS_WORD or c == "\r":
                break
            elif c == "\\":
                if t.startswith("\n", i + 1):
                    i += 2
                else:
                    lit(t[i + 1:i + 2] or "\\", True)
                    i += 2
            elif c == "'":
                end = t.find("'", i + 1)
                if end < 0:
                    self.fail(i, "a single quote is never closed")
                lit(t[i + 1:end], True)
                i = end + 1
            elif c == '"':
                i = self._double(i, segs, lit)
            elif c in "$`":
                seg, i = self._dollar(i, False)
                if seg is None:
                    lit("$", False)
                    i += 1
                else:
                    segs.append(seg)
            elif c == "~" and (i == start or t[i - 1] in "=:") and (not segs or not segs[-1].quoted):
                m = re.match(r"~[A-Za-z0-9._-]*", t[i:])
                if i + m.end() < self.n and t[i + m.end()] not in _ENDS_WORD + "/:":
                    lit(m.group(), False)
                else:
                    segs.append(Seg("unknown", m.group(), False, self.line(i)))
                i += m.end()
            else:
                lit(c, False)
                i += 1
        return Raw(tuple(segs), self.line(start), i), i

    def _double(self, i, segs, lit):
        t, open_at = self.t, i
        i += 1
        lit("", True)
        while True:
            if i >= self.n:
                self.fail(open_at, "a double quote is never closed")
            c = t[i]
            if c == '"':
                return i + 1
            if c == "\\" and t[i + 1:i + 2] in ("$", "`", '"', "\\", "\n"):
                lit("" if t[i + 1] == "\n" else t[i + 1], True)
                i += 2
            elif c in "$`":
                seg, i2 = self._dollar(i, True)
                if seg is None:
                    lit("$", True)
                    i += 1
                else:
                    segs.append(seg)
                    i = i2
            else:
                lit(c, True)
                i += 1

    def _dollar(self, i, quoted):
        """The expansion at i ($ or `): (segment, index after it), or (None, i) for a literal $."""
        t, line = self.t, self.line(i)
        nxt = t[i + 1:i + 2]
        if t[i] == "`":
            end = i + 1
            while end < self.n and t[end] != "`":
                end += 2 if t[end] == "\\" else 1
            if end >= self.n:
                self.fail(i, "a backquote is never closed")
            return Seg("unknown", t[i:end + 1], quoted, line), end + 1
        if nxt == "(":
            end = self._balanced(i + 1, "(", ")", "a $( is never closed")
            return Seg("unknown", t[i:end], quoted, line), end
        if nxt == "{":
            end = self._balanced(i + 1, "{", "}", "a ${ is never closed")
            inner = t[i + 2:end - 1]
            kind = "var" if NAME.fullmatch(inner) else "unknown"
            return Seg(kind, t[i:end], quoted, line), end
        m = NAME.match(t, i + 1)
        if m:
            return Seg("var", t[i:m.end()], quoted, line), m.end()
        if nxt and (nxt.isdigit() or nxt in SPECIAL):
            return Seg("unknown", t[i:i + 2], quoted, line), i + 2
        if nxt == "'" and not quoted:  # $'...': ANSI-C quoting, its escapes left undecoded
            end = i + 2
            while end < self.n and t[end] != "'":
                end += 2 if t[end] == "\\" else 1
            if end >= self.n:
                self.fail(i, "a $' quote is never closed")
            return Seg("unknown", t[i:end + 1], quoted, line), end + 1
        return None, i

    def _balanced(self, i, opener, closer, problem):
        """The index after the closer that matches the opener at i (quotes and escapes inside skipped)."""
        depth, j = 0, i
        while j < self.n:
            c = self.t[j]
            if c == "\\":
                j += 2
                continue
            if c == "'" and opener != "{":
                end = self.t.find("'", j + 1)
                j = self.n if end < 0 else end + 1
                continue
            if c == '"':
                end = j + 1
                while end < self.n and self.t[end] != '"':
                    end += 2 if self.t[end] == "\\" else 1
                j = end + 1
                continue
            depth += (c == opener) - (c == closer)
            j += 1
            if depth == 0:
                return j
        self.fail(i, problem)
        return None
