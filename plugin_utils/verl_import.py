"""A JobSpec from a verl launch script (import.yml): the script read as text (plugin_utils/verl_script.py, never run),
its trainer command taken apart, jobspecs/<name>.yaml written.

The trainer's module and algorithm.adv_estimator give the workload. A key the spec owns (OWNED_KEYS in
module_utils/jobspec/owned.py, the one home of those keys: its field column says which spec field a key becomes)
becomes that field, or is left out with why (the spec renders it, or keeps it in the job's record); every other
key=value stays an override, in the script's order, as the shell would have passed it. What the script cannot know
($HOME, $(...), a value it sets only inside an if) and what the spec refuses (an absolute path that is not one, a `~`
deletion) is never guessed: it is written into the spec as a comment, at its place, with why, for the user to settle
(or for the site's jobspec_defaults or -e to give). So the written spec always reads back, and validates, as written.
Every line of the report says where a word of the script went; a script that cannot be imported is one ScriptError
line naming the file, the line and the problem.
"""

import json
import os
import tempfile
import types
from dataclasses import dataclass

import yaml
from ansible.module_utils.base import conventions, redaction
from ansible.module_utils.jobspec import owned
from ansible.module_utils.jobspec.fields import SPEC_FIELDS, TRAINERS, JobSpecError, check, check_fields
from ansible.module_utils.jobspec.render import LOGGERS

from plugin_utils import safe_yaml, verl_script
from plugin_utils.verl_script import ScriptError

ESTIMATOR = "algorithm.adv_estimator"
VERL_DEFAULT_ESTIMATOR = "gae"  # what verl's ppo_trainer.yaml sets when a script does not
# verl's trainer modules a JobSpec runs: main_ppo is ppo or grpo by its estimator; every SFT trainer becomes the spec's
# sft, which runs verl.trainer.sft_trainer_ray (render.py; a test holds this table to what it renders).
MODULES = {"verl.trainer.main_ppo": None, "verl.trainer.sft_trainer_ray": "sft", "verl.trainer.sft_trainer": "sft",
           "verl.trainer.fsdp_sft_trainer": "sft"}
# Spec fields an owned key names that a script's value never sets, and why.
NOT_TAKEN = {"checkpoint_dir": "the spec keeps checkpoints in the job's own record (checkpoint_dir's default)",
             "resume_from": "a job resumes another job's checkpoint through retries or job.yml -e do=resume"}
# torchrun's flags that say how big the job is; Ray places the job, so its other flags mean nothing to a spec.
LAUNCHER_SIZE = {"--nnodes": "resources.nnodes", "--nproc_per_node": "resources.n_gpus_per_node",
                 "--nproc-per-node": "resources.n_gpus_per_node"}
_HYDRA_FLAGS_WITH_VALUE = ("--config-path", "--config-name", "--config-dir", "-cp", "-cn", "-cd")
_OVERRIDE_ITEM = next(f for f in SPEC_FIELDS if f.name == "overrides").item
_ENV_ITEM = next(f for f in SPEC_FIELDS if f.name == "env").item
_ORDER = [f.name for f in SPEC_FIELDS if f.name not in ("env", "overrides")] + ["env", "overrides"]


def estimators():
    """{estimator: workload}, from the row of owned.SETTINGS that renders algorithm.adv_estimator."""
    row = next(r for r in owned.SETTINGS if r[0] == ESTIMATOR)
    return {row[3](types.SimpleNamespace(workload=w), None, None): w for w in row[1]}


def spec_field(path):
    """The Field of a dotted spec field name (resources.nnodes), or None when the text names none."""
    fields, found = SPEC_FIELDS, None
    for part in path.split("."):
        found = next((f for f in fields or () if f.name == part), None)
        if found is None:
            return None
        fields = found.fields
    return found


def _unquote(text):
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def hydra_value(text, kind):
    """A field's value from an override's value as hydra reads it: its quotes and list brackets gone, null None."""
    text = text.strip()
    if text == "null":
        return None
    if kind == "paths" and text.startswith("[") and text.endswith("]"):
        items, item, quote = [], "", None
        for c in text[1:-1]:
            quote = (None if c == quote else quote) if quote else (c if c in "'\"" else None)
            if c == "," and quote is None:
                items.append(item)
                item = ""
            else:
                item += c
        return [_unquote(i.strip()) for i in [*items, item] if i.strip()]
    if kind == "int" and text.lstrip("+-").isdigit():
        return int(text)
    return _unquote(text)


def _problem(err):
    """A JobSpecError's problem, without the field it names (the report names the script's key instead)."""
    return str(err).split("': ", 1)[-1]


def _unknowns(pieces):
    return [p.unknown for p in pieces if p.unknown is not None]


@dataclass
class Imported:
    """What one trainer command of a script makes: the spec (as written), its YAML text and the report's lines."""

    spec: dict
    text: str
    lines: list
    workload: str
    trainer: verl_script.Trainer


class _Import:
    def __init__(self, name, trainer):
        self.name, self.trainer = name, trainer
        self.spec, self.lines, self.left, self.taken, self.unknown = {}, [], {"fields": [], "env": []}, {}, {}
        self.overrides = []  # (text, None) kept, or (text, why) left as a comment at its place

    def say(self, line, text):
        self.lines.append(f"line {line}: {conventions.one_line(text, 300)}")

    def leave(self, kind, source, key, value, line, why):
        """Written into the spec as a comment at its place, with why (once: the critic's model path is the actor's
        again); said in the report."""
        if not any(left[:2] == (key, value) for left in self.left[kind]):
            self.left[kind].append((key, value, f"line {line}: {source}: {conventions.one_line(why, 200)}"))
        target = f"env.{key}" if kind == "env" else key
        self.say(line, f"{source} -> {target}: left for you, commented in the spec: {why}")

    def note_unknowns(self, unknowns):
        for u in unknowns:
            self.unknown.setdefault((u.raw, u.why), set()).add(u.line)
        return "; ".join(f"{u.raw} is {u.why}" for u in unknowns)

    def set_field(self, key, field, text, unknowns, line):
        """The value of a spec field from a script's text: set, or left for the user with why."""
        f = spec_field(field)
        if unknowns:
            return self.leave("fields", key, field, text, line, self.note_unknowns(unknowns))
        try:
            value = check(f, hydra_value(text, f.kind), field)
        except JobSpecError as err:
            return self.leave("fields", key, field, text, line, _problem(err))
        if field in self.taken and self.taken[field][0] != value:
            raise ScriptError(self.name, line, f"{key} sets {field}, which line {self.taken[field][2]} "
                              f"({self.taken[field][1]}) sets to another value: a spec has one {field}")
        self.taken[field] = (value, key, line)
        node = self.spec
        *parents, last = field.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        self.say(line, f"{key} -> {field}")
        return None

    def owned_key(self, word, key, value, workload):
        field = owned.OWNED_KEYS[key]
        rows = {r[0]: r[1] for r in owned.SETTINGS}
        if key == ESTIMATOR:
            return self.say(word.line, f"{key} -> workload {workload}")
        if workload not in rows.get(key, TRAINERS):
            return self.say(word.line, f"{key}: left out: the spec renders it for {', '.join(rows[key])} only")
        if spec_field(field) is None:
            return self.say(word.line, f"{key}: left out: the spec renders it (every job logs to {', '.join(LOGGERS)}; "
                            f"from {field})")
        if field in NOT_TAKEN:
            return self.say(word.line, f"{key}: left out: {NOT_TAKEN[field]}")
        return self.set_field(key, field, value, word.unknowns, word.line)

    def override(self, word):
        text, why = word.text, None
        if word.unknowns:
            why = self.note_unknowns(word.unknowns)
        else:
            try:
                owned.check_overrides([text])  # first: its reasons say more than the pattern's
                check(_OVERRIDE_ITEM, text, "override")
            except JobSpecError as err:
                why = _problem(err)
        self.overrides.append((text, why and f"line {word.line}: {conventions.one_line(why, 200)}"))
        if why:
            return self.say(word.line, f"{text}: left for you, commented in the spec's overrides: {why}")
        return self.say(word.line, f"kept as an override: {text}")

    def env(self, name, var):
        value = "".join(p.text for p in var.pieces)
        try:
            owned.check_env({name: value})
        except JobSpecError as err:
            return self.say(var.line, f"{name}: left out of env: {_problem(err)}")
        if redaction.is_secret_name(name):
            return self.say(var.line, f"{name}: left out of env: a secret is never written into a spec file; give it "
                            f"with -e env.{name}=... or the site's jobspec_defaults")
        if var.doubt or _unknowns(var.pieces):
            why = var.doubt or self.note_unknowns(_unknowns(var.pieces))
            return self.leave("env", name, name, value, var.line, why)
        self.spec.setdefault("env", {})[name] = check(_ENV_ITEM, value, f"env.{name}")
        return self.say(var.line, f"{name} -> env.{name}")


def _choose(found, command, name):
    listed = "; ".join(f"{t.number}: line {t.command.line}, {t.module}" for t in found)
    if not found:
        raise ScriptError(name, None, "no verl trainer command (python3 -m verl.trainer.<module> key=value ...)")
    if command is None and len(found) > 1:
        raise ScriptError(name, None, f"{len(found)} trainer commands ({listed}): choose one with -e command=N")
    if command is not None and not (isinstance(command, int) and 1 <= command <= len(found)):
        raise ScriptError(name, None, f"command: must be a number from 1 to {len(found)} (the trainer commands: "
                          f"{listed})")
    return found[(command or 1) - 1]


def _workload(trainer, name):
    module, line = trainer.module, trainer.command.line
    if module not in MODULES:
        raise ScriptError(name, line, f"{module} is not a trainer a JobSpec runs ({', '.join(MODULES)})")
    if MODULES[module]:
        return MODULES[module], f"{module} -> workload {MODULES[module]}"
    words = [w for w in trainer.args if w.text.partition("=")[0].lstrip("+") == ESTIMATOR]
    if not words:
        workload = estimators()[VERL_DEFAULT_ESTIMATOR]
        return workload, f"{module} with verl's default {ESTIMATOR}={VERL_DEFAULT_ESTIMATOR} -> workload {workload}"
    word = words[-1]
    if word.unknowns:
        raise ScriptError(name, word.line, f"{ESTIMATOR} holds {word.unknowns[0].raw} ({word.unknowns[0].why}): "
                          "the workload depends on it; set it in the script")
    value = hydra_value(word.text.partition("=")[2], "str")
    if value not in estimators():
        known = ", ".join(f"{e} ({w})" for e, w in estimators().items())
        raise ScriptError(name, word.line, f"{ESTIMATOR}={conventions.one_line(value, 40)}: a JobSpec runs {known}")
    return estimators()[value], f"{module} with {ESTIMATOR}={value} -> workload {estimators()[value]}"


def convert(text, name, command=None, spec_name=None):
    """The spec one trainer command of a script's text makes (command: its number, when the script has several;
    spec_name: the name it is written under, for the file's own comment)."""
    commands = verl_script.parse(text, name)
    found = verl_script.trainers(commands)
    trainer = _choose(found, command, name)
    workload, said = _workload(trainer, name)
    job = _Import(name, trainer)
    job.spec["workload"] = workload
    job.say(trainer.command.line, f"trainer command {trainer.number} of {len(found)}: {said}")
    _launcher(job, trainer)
    for name_, var in trainer.command.env.items():
        job.env(name_, var)
    args = list(trainer.args)
    while args:
        word = args.pop(0)
        key, eq, value = word.text.partition("=")
        if word.text.startswith("-"):
            taken = args.pop(0) if word.text in _HYDRA_FLAGS_WITH_VALUE and args else None
            job.say(word.line, f"{word.text}{' ' + taken.text if taken else ''}: left out: a hydra flag (the spec "
                    "runs verl's own config, with overrides)")
        elif (not eq or not key) and not word.text.startswith("~"):  # ~key alone is hydra's deletion
            job.say(word.line, f"{word.text}: left out: not a key=value override"
                    + (f" ({job.note_unknowns(word.unknowns)})" if word.unknowns else ""))
        elif key in owned.OWNED_KEYS:  # +key, ++key and ~key stay overrides (which the spec refuses on owned keys)
            job.owned_key(word, key, value, workload)
        else:
            job.override(word)
    for line, redirect in trainer.command.redirects:
        job.say(line, f"{redirect}: left out: a redirection (the job's record keeps its driver log)")
    for other in commands:
        if other is not trainer.command:
            shown = " ".join(w.text for w in other.words[:3])
            job.say(other.line, f"{shown}: left out: not the trainer command imported, never run")
    for (raw, why), lines in job.unknown.items():
        job.lines.append(f"{conventions.one_line(raw, 80)} (line {', '.join(map(str, sorted(lines)))}): {why}: "
                         "left as the script wrote it, for you")
    job.spec["overrides"] = [t for t, why in job.overrides if why is None]
    spec = {k: job.spec[k] for k in _ORDER if k in job.spec}
    return Imported(spec, _yaml(spec, job, name, spec_name or "<this file's name>"), job.lines, workload, trainer)


def _launcher(job, trainer):
    """The words before the module: torchrun's size flags become resources; the rest is Ray's to decide."""
    words, rest = list(trainer.launcher), []
    while words:
        word = words.pop(0)
        flag, eq, value = word.text.partition("=")
        if flag in LAUNCHER_SIZE and (eq or words):
            value_word = word if eq else words.pop(0)
            text = value if eq else value_word.text
            job.set_field(f"{flag}", LAUNCHER_SIZE[flag], text, value_word.unknowns, word.line)
        else:
            rest.append(word.text)
    if rest:
        job.say(trainer.command.line, f"{' '.join(rest)}: left out: the launcher (Ray starts the trainer with the "
                "cluster's ray_config.python)")


def _scalar(value):
    """One YAML scalar on one line (JSON's double-quoted form when YAML's would take more)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=False)
    text = text[:-5] if text.endswith("\n...\n") else text.rstrip("\n")
    return text if "\n" not in text else json.dumps(value)


def _yaml(spec, job, name, spec_name):
    """The spec file: the spec, and each value left for the user as a comment at its place, with why."""
    out = ["# yaml-language-server: $schema=../jobspec.schema.json", "#",
           (f"# Imported by import.yml from {json.dumps(name)}, trainer command {job.trainer.number} "
            f"(line {job.trainer.command.line}): {job.trainer.module}."),
           "# Lines '# key: value  # line N: why' hold what the script gave that the spec could not take as it is:",
           "# settle them here (or let the site's jobspec_defaults or -e give them), then run",
           f"# ansible-playbook submit.yml -e spec={spec_name} --check"]
    fields = {k: v for k, v in spec.items() if k not in ("env", "overrides")}
    out += yaml.safe_dump(fields, sort_keys=False, default_flow_style=False, width=1 << 30,
                          allow_unicode=False).splitlines()
    for key, value, why in job.left["fields"]:
        out.append(f"# {key}: {json.dumps(value)}  # {why}")
    if "env" in spec or job.left["env"]:
        out.append("env:" if "env" in spec else "# env:")
        out += [f"  {_scalar(k)}: {_scalar(v)}" for k, v in spec.get("env", {}).items()]
        out += [f"#   {k}: {json.dumps(v)}  # {why}" for k, v, why in job.left["env"]]
    out.append("overrides:" if spec["overrides"] else "overrides: []")
    out += [f"  - {_scalar(t)}" if why is None else f"  # - {json.dumps(t)}  # {why}" for t, why in job.overrides]
    text = "\n".join(out) + "\n"
    try:  # what is written reads back as this spec, and validates: never a template, never a surprise
        again = safe_yaml.load_text(text, name)
        check_fields(SPEC_FIELDS, again, "", complete=False)
        owned.check_env(again.get("env", {}))
        owned.check_overrides(again["overrides"])
    except (safe_yaml.YamlError, JobSpecError) as err:
        raise ScriptError(name, None, f"the spec made from it does not read back ({err}): a bug of import.yml")
    if again != spec:
        raise ScriptError(name, None, "the spec made from it does not read back as made: a bug of import.yml")
    return text


def write(text, spec_name, specs_dir, force=False):
    """Write <specs_dir>/<spec_name>.yaml: never over an existing file unless force. Its path."""
    if not conventions.matches(conventions.NAME_RULE, spec_name):
        raise ScriptError("spec", None, f"must be a spec name: {conventions.NAME_RULE[1]}")
    path = os.path.join(specs_dir, spec_name + ".yaml")
    if os.path.lexists(path) and not force:
        raise ScriptError(path, None, "exists: -e force=true overwrites it")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=specs_dir, prefix=f".{spec_name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails when the file appeared meanwhile: never overwritten
    except FileExistsError:
        raise ScriptError(path, None, "exists: -e force=true overwrites it") from None
    except OSError as err:
        raise ScriptError(path, None, f"cannot write it ({err.strerror})") from None
    finally:
        if tmp and os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def import_script(script, spec_name, specs_dir, command=None, force=False, write_file=True):
    """Read a script (never run), make its spec and write it: (Imported, path written or None)."""
    if not conventions.matches(conventions.NAME_RULE, spec_name):
        raise ScriptError("spec", None, f"must be a spec name: {conventions.NAME_RULE[1]}")
    path = os.path.join(specs_dir, spec_name + ".yaml")
    if os.path.lexists(path) and not force:  # said before the script is read: the first thing to settle
        raise ScriptError(path, None, "exists: -e force=true overwrites it")
    imported = convert(verl_script.read(script), script, command, spec_name)
    return imported, write(imported.text, spec_name, specs_dir, force) if write_file else None
