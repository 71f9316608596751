"""The one YAML reader of every file the project reads on the control host: spec files (jobspecs/), suite files
(suites/), and whatever else a plugin or script reads as YAML.

A file is data of any shape, written by a tired user or on purpose: what PyYAML's safe loader allows is not enough.
Refused, each as a YamlError whose str() is one line naming the file (and the line when known) and never quoting a
value:
- a file larger than MAX_BYTES, or not UTF-8;
- nesting deeper than MAX_DEPTH (a RecursionError in PyYAML otherwise);
- more than MAX_ALIASES aliases, an alias inside the node it names (a RecursionError later), and aliases that make
  the document larger than MAX_NODES nodes once expanded ("billion laughs": a minute of CPU in whatever walks it);
- a key twice in one mapping (PyYAML keeps the last one silently);
- an integer or float written with more than MAX_NUMBER_CHARS characters (a ValueError from int() otherwise).
"""

import os
import stat

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

MAX_BYTES = 1 << 20
MAX_DEPTH = 50
MAX_ALIASES = 100
MAX_NODES = 10_000
MAX_NUMBER_CHARS = 100
# How much of PyYAML's own description of a problem an error keeps.
PROBLEM_WIDTH = 120


class YamlError(ValueError):
    """A YAML file refused; str() is `<file>: line N: <problem>` (or without the line), one line."""

    def __init__(self, name, problem, line=None):
        self.name, self.problem, self.line = str(name), _one_line(problem), line
        super().__init__(f"{self.name}: " + (f"line {line}: " if line else "") + self.problem)


def _one_line(text):
    line = " ".join(str(text).split())
    return line if len(line) <= PROBLEM_WIDTH else line[: PROBLEM_WIDTH - 3] + "..."


class _Refused(yaml.YAMLError):
    def __init__(self, problem, mark=None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _Loader(yaml.SafeLoader):
    """SafeLoader with the limits above, checked while the document is composed (before anything is built)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(f"more than {MAX_ALIASES} aliases", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise _Refused("a key appears twice in one mapping", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def _number(constructor):
    def construct(loader, node):
        if isinstance(node, ScalarNode) and len(node.value) > MAX_NUMBER_CHARS:
            raise _Refused(f"a number of more than {MAX_NUMBER_CHARS} characters", node.start_mark)
        return constructor(loader, node)
    return construct


_Loader.add_constructor("tag:yaml.org,2002:int", _number(yaml.SafeLoader.construct_yaml_int))
_Loader.add_constructor("tag:yaml.org,2002:float", _number(yaml.SafeLoader.construct_yaml_float))


def _check_graph(root):
    """The composed document, aliases expanded, is at most MAX_NODES nodes and has no cycle (linear: each node's
    expanded size is counted once)."""
    sizes, open_nodes = {}, set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            children = _children(node)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_NODES:
                raise _Refused(f"aliases expand to more than {MAX_NODES} nodes", node.start_mark)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise _Refused("an alias refers to a node that contains it", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                raise _Refused("an alias refers to a node that contains it", child.start_mark)
            if id(child) not in sizes:
                stack.append((child, False))


def _children(node):
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_text(text, name):
    """The data of one YAML document (None for an empty one); YamlError naming `name` when it is refused."""
    if len(text.encode("utf-8", errors="replace")) > MAX_BYTES:
        raise YamlError(name, f"larger than {MAX_BYTES} bytes")
    loader = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or getattr(err, "reason", None) or "not valid YAML"
        raise YamlError(name, problem, mark.line + 1 if mark is not None else None) from None
    except (RecursionError, ValueError, OverflowError):  # a limit above should have said it first
        raise YamlError(name, "a value PyYAML cannot build") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_file(path):
    """load_text of a regular file (never a FIFO or a device) of at most MAX_BYTES bytes of UTF-8 text."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise YamlError(path, "not a regular file")
            data = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise YamlError(path, f"cannot read it ({err.strerror or 'error'})") from None
    if len(data) > MAX_BYTES:
        raise YamlError(path, f"larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlError(path, "not UTF-8 text") from None
    return load_text(text, path)
