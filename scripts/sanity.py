#!/usr/bin/env python3
"""make sanity: Ansible's own sanity tests (all but pylint) on a collection-shaped copy of the project.

ansible-test only tests collections (ansible_collections/<namespace>/<name>/), and the project is not one: its
plugins live in Ansible's configured folders (library/, action_plugins/, ...; see ansible.cfg) and import the
project's helpers as ``ansible.module_utils.<helper>``. So this script copies the plugins into a temporary collection,

    library/*.py            -> plugins/modules/         action_plugins/*.py     -> plugins/action/
    module_utils/ (tree)    -> plugins/module_utils/    doc_fragments/*.py      -> plugins/doc_fragments/
    filter_plugins/         -> plugins/filter/          lookup_plugins/*.py     -> plugins/lookup/
    inventory_plugins/*.py  -> plugins/inventory/       plugin_utils/ (tree)    -> plugins/plugin_utils/
    tests/sanity/ignore.txt -> tests/sanity/ignore-<ansible-core major.minor>.txt

rewrites in the copy (never in the repository) what a collection names differently: an import of one of the
project's helpers becomes ``ansible_collections.<ns>.<name>.plugins.module_utils.<helper>`` (found by the helper's
file, so whatever layout module_utils/ has is followed; Ansible's own ``ansible.module_utils.basic`` and friends are
left alone), a doc fragment named in ``extends_documentation_fragment`` and a plugin named in markup (M(ray_node),
O(ray_job#module:suite), P(name#filter)) get the collection's prefix, and an author without a GitHub handle is marked
``(!UNKNOWN)``, validate-modules' word for it. Then it runs ``ansible-test sanity --skip-test pylint`` there (every
sanity test but pylint: validate-modules, ansible-doc, action-plugin-docs, pep8, import, compile, yamllint, ...) and
removes the copy, whatever happened.

Every finding fails the run unless tests/sanity/ignore.txt lists it, each line with a comment saying why; an ignore
line that no longer matches a finding fails it too (ansible-test's own rule), so the file cannot go stale.

ansible-test runs each sanity test in a virtual environment of its own, made once under ~/.ansible/test/venv/ with
the test's pinned requirements from PyPI (voluptuous, antsibull-docs-parser); later runs reuse it.

Usage: .venv/bin/python scripts/sanity.py [--keep] [--test NAME ...] [ansible-test sanity options ...]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "local"
COLLECTION = "ray_verl"
FQ = f"{NAMESPACE}.{COLLECTION}"
MODULE_UTILS_PKG = f"ansible_collections.{NAMESPACE}.{COLLECTION}.plugins.module_utils"
IGNORE = os.path.join("tests", "sanity", "ignore.txt")
# Every sanity test but these runs by default (validate-modules checks modules' and other plugins' documentation
# against their code; ansible-doc renders every plugin's, the filters' YAML files included; action-plugin-docs wants
# a documented module for each action plugin; pep8 is pycodestyle at 160 columns; import loads every module and
# helper with only what a node has). pylint runs with ansible-core's own configuration, whose findings here are its
# style (`_` for an unused value is a disallowed name) and false positives (a dataclasses.field given to
# make_dataclass, `not x > 0` written to refuse NaN, a re-export); ruff is the project's linter.
SKIPPED_TESTS = ("pylint",)

# (folder in the repository, folder in the collection, whole tree or only its top-level files, suffixes)
LAYOUT = (
    ("library", "plugins/modules", False, (".py",)),
    ("action_plugins", "plugins/action", False, (".py",)),
    ("module_utils", "plugins/module_utils", True, (".py",)),
    ("doc_fragments", "plugins/doc_fragments", False, (".py",)),
    ("filter_plugins", "plugins/filter", False, (".py", ".yml", ".yaml")),
    ("lookup_plugins", "plugins/lookup", False, (".py", ".yml", ".yaml")),
    ("inventory_plugins", "plugins/inventory", False, (".py",)),
    ("plugin_utils", "plugins/plugin_utils", True, (".py",)),
)


def project_helpers(module_utils):
    """The dotted names (relative to ansible.module_utils) of every module and package under module_utils/."""
    names = set()
    for folder, dirs, files in os.walk(module_utils):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        rel = os.path.relpath(folder, module_utils)
        prefix = "" if rel == "." else rel.replace(os.sep, ".") + "."
        if prefix:
            names.add(prefix[:-1])
        names.update(prefix + f[:-3] for f in files if f.endswith(".py") and f != "__init__.py")
    return names


FROM_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from ansible\.module_utils(?P<mod>(?:\.\w+)*) import "
                         r"(?P<names>\([^)]*\)|[^\n]*?)(?P<comment>[ \t]*#[^\n]*)?$", re.MULTILINE)
PLAIN_IMPORT = re.compile(r"^(?P<indent>[ \t]*)import ansible\.module_utils\.(?P<mod>\w+(?:\.\w+)*)", re.MULTILINE)


def rewrite_imports(text, helpers):
    """The text with every import of one of the project's helpers made an import from the collection."""

    def from_import(m):
        mod = m["mod"][1:]
        if mod:
            if mod not in helpers:
                return m[0]
            return m[0].replace("from ansible.module_utils", f"from {MODULE_UTILS_PKG}", 1)
        # from ansible.module_utils import a, b as c: split Ansible's own names from the project's
        names = [n.strip() for n in m["names"].strip("()").replace("\n", " ").split(",") if n.strip()]
        ours = [n for n in names if n.split()[0] in helpers]
        if not ours:
            return m[0]
        theirs = [n for n in names if n not in ours]
        lines = [f"{m['indent']}from {MODULE_UTILS_PKG} import {', '.join(ours)}{m['comment'] or ''}"]
        if theirs:
            lines.append(f"{m['indent']}from ansible.module_utils import {', '.join(theirs)}")
        return "; ".join(lines) if "\n" not in m[0] else "\n".join(lines)

    def plain_import(m):
        if m["mod"] not in helpers:
            return m[0]
        return f"{m['indent']}import {MODULE_UTILS_PKG}.{m['mod']}"

    return PLAIN_IMPORT.sub(plain_import, FROM_IMPORT.sub(from_import, text))


def rewrite_fragments(text, fragments):
    """The text with each of the project's doc fragments in extends_documentation_fragment named by its FQCN."""
    out, indent = [], None
    for line in text.split("\n"):
        stripped = line.lstrip()
        inline = re.match(r"(extends_documentation_fragment:\s*)([\w.]+)(\s*)$", stripped)
        if inline and inline[2].split(".")[0] in fragments:
            line = f"{line[:len(line) - len(stripped)]}{inline[1]}{FQ}.{inline[2]}{inline[3]}"
        if re.match(r"extends_documentation_fragment:\s*$", stripped):
            indent = len(line) - len(stripped)
        elif indent is not None:
            item = re.match(r"(\s*-\s*)([\w.]+)(\s*)$", line)
            if item and len(line) - len(stripped) >= indent:
                if item[2].split(".")[0] in fragments:
                    line = f"{item[1]}{FQ}.{item[2]}{item[3]}"
            else:
                indent = None
        out.append(line)
    return "\n".join(out)


def rewrite_references(text, plugins):
    """The text with the markup naming one of the project's plugins (M(ray_node), O(ray_job#module:suite)) made FQCN."""
    for kind, names in plugins.items():
        alternatives = "|".join(re.escape(n) for n in sorted(names))
        if not alternatives:
            continue
        if kind == "module":
            text = re.sub(rf"\bM\(({alternatives})\)", rf"M({FQ}.\g<1>)", text)
        text = re.sub(rf"\b([A-Z]+)\(({alternatives})#{kind}([:)])", rf"\g<1>({FQ}.\g<2>#{kind}\g<3>", text)
    return text


def rewrite_author(text):
    """The text with an author named without a GitHub handle marked so (!UNKNOWN), as validate-modules asks.

    A collection's author is "Name (@handle)"; the project's modules say "ray-verl maintainers", which has none."""
    def mark(m):
        return m[0] if "(@" in m[2] or "!UNKNOWN" in m[2] else f"{m[1]}{m[2]} (!UNKNOWN)"

    return re.sub(r"^(author:[ \t]*)(?![ \t]*$)([^\n]*?)[ \t]*$", mark, text, flags=re.MULTILINE)


def copy_tree(src, dst, recursive, suffixes, transform):
    count = 0
    for folder, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith(".")) if recursive else []
        target = os.path.join(dst, os.path.relpath(folder, src))
        os.makedirs(target, exist_ok=True)
        for name in sorted(files):
            if not name.endswith(suffixes):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                text = f.read()
            with open(os.path.join(target, name), "w", encoding="utf-8") as f:
                f.write(transform(text))
            count += 1
    return count


PIP_BOOTSTRAP = """\
# ansible-test's pip bootstrap (what it downloads as get-pip-{version}.py from ci-files.testing.ansible.com), made by
# the ray-verl project's scripts/sanity.py from pip's own wheel (from PyPI) where that host cannot be reached.
import runpy
import sys

sys.path.insert(0, {wheel!r})
sys.argv = ["pip", "install"] + [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""


def ensure_pip_bootstrap(bindir):
    """Give ansible-test the pip bootstrap script it makes each sanity test's virtual environment with.

    It downloads it from ci-files.testing.ansible.com once into ~/.ansible/test/cache/, and says to save it there by
    hand where that fails. Where this host reaches PyPI but not that host, an equivalent is made there from pip's
    wheel of the same version (pip runs from its wheel)."""
    import ansible_test

    source = os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")
    with open(source, encoding="utf-8") as f:
        version = re.search(r"default_packages = dict\(\s*pip='([^']+)'", f.read())[1]
    cache = os.path.expanduser("~/.ansible/test/cache")
    script = os.path.join(cache, f"get_pip_{version.replace('.', '_')}.py")
    if os.path.exists(script):
        return
    os.makedirs(cache, exist_ok=True)
    try:
        with urllib.request.urlopen(f"https://ci-files.testing.ansible.com/ansible-test/get-pip-{version}.py",
                                    timeout=20) as reply:
            body = reply.read()
        with open(script + ".download", "wb") as f:
            f.write(body)
        os.replace(script + ".download", script)
        return
    except OSError as ex:
        print(f"sanity: ansible-test's pip bootstrap cannot be downloaded ({ex}); making it from pip {version}'s wheel",
              flush=True)
    subprocess.run([os.path.join(bindir, "pip"), "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--only-binary=:all:", "-d", cache, f"pip=={version}"], check=True)
    wheel = os.path.join(cache, f"pip-{version}-py3-none-any.whl")
    with open(script, "w", encoding="utf-8") as f:
        f.write(PIP_BOOTSTRAP.format(version=version, wheel=wheel))


class IgnoreFileError(Exception):
    pass


def ignore_lines(path):
    """The ignore file's entries for ansible-test: comment-only and blank lines dropped (ansible-test refuses them);
    an entry without a comment saying why is an error."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            why = line.partition(" #")[2]
            if not why.strip():
                raise IgnoreFileError(f"{IGNORE}:{number}: an ignore line needs a comment saying why: {line}")
            lines.append(line)
    return lines


def ansible_version():
    from ansible.release import __version__

    return ".".join(__version__.split(".")[:2])


def plugin_names(root, folder):
    path = os.path.join(root, folder)
    if not os.path.isdir(path):
        return set()
    return {f[:-3] for f in os.listdir(path) if f.endswith(".py") and f != "__init__.py"}


def build(root, dest):
    """The collection-shaped copy of the project at root, made under dest; returns its path."""
    coll = os.path.join(dest, "ansible_collections", NAMESPACE, COLLECTION)
    helpers = project_helpers(os.path.join(root, "module_utils"))
    fragments = plugin_names(root, "doc_fragments")
    plugins = {"module": plugin_names(root, "library"), "lookup": plugin_names(root, "lookup_plugins"),
               "inventory": plugin_names(root, "inventory_plugins"),
               "filter": {f.rsplit(".", 1)[0] for f in os.listdir(os.path.join(root, "filter_plugins"))
                          if f.endswith((".yml", ".yaml"))}}

    def transform(text):
        text = rewrite_fragments(rewrite_imports(text, helpers), fragments)
        return rewrite_author(rewrite_references(text, plugins))

    for src, dst, recursive, suffixes in LAYOUT:
        if os.path.isdir(os.path.join(root, src)):
            copy_tree(os.path.join(root, src), os.path.join(coll, dst), recursive, suffixes, transform)
    with open(os.path.join(coll, "galaxy.yml"), "w", encoding="utf-8") as f:
        f.write(f"namespace: {NAMESPACE}\nname: {COLLECTION}\nversion: 1.0.0\nreadme: README.md\n"
                "authors: [ray-verl maintainers]\n")
    with open(os.path.join(coll, "README.md"), "w", encoding="utf-8") as f:
        f.write("A copy of the ray-verl project made by scripts/sanity.py for ansible-test.\n")
    os.makedirs(os.path.join(coll, "meta"), exist_ok=True)
    with open(os.path.join(coll, "meta", "runtime.yml"), "w", encoding="utf-8") as f:
        f.write("requires_ansible: '>=2.19.0'\n")
    os.makedirs(os.path.join(coll, "tests", "sanity"), exist_ok=True)
    with open(os.path.join(coll, "tests", "sanity", f"ignore-{ansible_version()}.txt"), "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in ignore_lines(os.path.join(root, IGNORE))))
    return coll


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keep", action="store_true", help="leave the copy behind and print where it is")
    parser.add_argument("--test", action="append",
                        help=f"a sanity test to run (default: every one but {' '.join(SKIPPED_TESTS)})")
    args, extra = parser.parse_known_args(argv)
    started = time.monotonic()
    dest = tempfile.mkdtemp(prefix="ray-verl-sanity-")
    rc = 1
    try:
        coll = build(ROOT, dest)
        bindir = os.path.dirname(sys.executable)
        ensure_pip_bootstrap(bindir)
        ansible_test = os.path.join(bindir, "ansible-test")
        cmd = [ansible_test, "sanity", "--color", "no", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}"]
        for test in args.test or ():
            cmd += ["--test", test]
        for test in () if args.test else SKIPPED_TESTS:
            cmd += ["--skip-test", test]
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        env.pop("ANSIBLE_CONFIG", None)  # the project's ansible.cfg names folders the copy does not have
        print(f"sanity: {' '.join(cmd[1:] + extra)} in {coll}", flush=True)
        rc = subprocess.run(cmd + extra, cwd=coll, env=env, check=False).returncode
    except IgnoreFileError as exc:
        print(f"sanity: {exc}", file=sys.stderr)
    finally:
        if args.keep:
            print(f"sanity: the copy is kept in {dest}")
        else:
            shutil.rmtree(dest, ignore_errors=True)
    print(f"sanity: exit {rc} in {time.monotonic() - started:.0f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
