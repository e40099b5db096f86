"""``RunConfig``'s command line: every field is a flag ``--<field-name>``, declared once on the
field (:func:`vtoken.bench.harness.run_config.flag`); the parser is built from the fields
(:func:`add_arguments`), and a command line is rendered from field values (:func:`to_args`,
what the pipeline's grid runs), so a flag cannot be declared twice or drift."""

from __future__ import annotations

import argparse
import json
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from vtoken.bench.harness.run_config import RunConfig


def csv(kind: type):
    """``argparse`` type: comma-separated values of ``kind``, at least one."""
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(x) for x in text.split(",") if x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated {kind.__name__} values") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r}: empty list")
        return values
    return parse


def json_dict(text: str) -> dict:
    """``argparse`` type: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: not JSON ({err.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a JSON object")
    return value


# A field's annotation -> how its flag's value is parsed.
_PARSE = {"Path": Path, "int": int, "int | None": int, "float": float, "float | None": float, "str | None": str,
          "tuple[str, ...]": csv(str), "tuple[int, ...]": csv(int)}


def flag_name(f: Field) -> str:
    """``--<field-name>``, or the name the field declares."""
    return f.metadata.get("name") or "--" + f.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every ``RunConfig`` field as an argument of ``parser`` (``manifest`` positional)."""
    for f in fields(RunConfig):
        meta = f.metadata
        if f.name == "manifest":
            parser.add_argument("manifest", type=Path, help=meta["help"])
            continue
        kw: dict[str, Any] = {"dest": f.name, "help": meta["help"] or None}
        if f.default is MISSING and f.default_factory is MISSING:
            kw["required"] = True
        else:
            kw["default"] = meta.get("cli_default", f.default if f.default is not MISSING else f.default_factory())
        if f.type == "bool":
            kw["action"] = "store_true"
        elif f.type == "bool | None":
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = json_dict if f.type.startswith("dict") else _PARSE[f.type]
        if "choices" in meta:
            kw["choices"] = meta["choices"]
        parser.add_argument(flag_name(f), *([meta["short"]] if "short" in meta else []), **kw)


def to_args(values: dict[str, Any]) -> list[str]:
    """The command line of a run with these field values, in field order: ``manifest`` first;
    None and False left out, True a bare flag, tuples comma-joined, dicts as sorted JSON.

    Raises:
        ValueError: a key that is not a ``RunConfig`` field.
    """
    known = {f.name: f for f in fields(RunConfig)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"run flags {unknown}: not RunConfig fields (known: {sorted(known)})")
    args = []
    for name, f in known.items():
        value = values.get(name)
        if value is None or value is False:
            continue
        if name == "manifest":
            args.insert(0, str(value))
        elif value is True:
            args.append(flag_name(f))
        elif isinstance(value, (tuple, list)):
            args.append(f"{flag_name(f)}={','.join(map(str, value))}")
        elif isinstance(value, dict):
            args.append(f"{flag_name(f)}={json.dumps(value, sort_keys=True)}")
        else:
            args.append(f"{flag_name(f)}={value}")
    return args


def add_vtoken_file(parser: argparse.ArgumentParser) -> None:
    """``--vtoken-file``: further vtoken settings read from a JSON file (the held-out selection)."""
    parser.add_argument("--vtoken-file", type=Path, default=None,
                        help="JSON object of further PluginConfig settings merged over --vtoken (e.g. the "
                             "theta_f and watermark selected on held-out samples)")


def run_config(args: argparse.Namespace) -> RunConfig:
    """The ``RunConfig`` of parsed run arguments (ValueError naming the flag): the fields as
    given, ``--ratio`` 0.5 unless ``--ratio`` or ``--budget`` is, ``--vtoken-file`` merged over
    ``--vtoken``."""
    values = {f.name: getattr(args, f.name) for f in fields(RunConfig)}
    if values["ratio"] is None and values["budget"] is None:
        values["ratio"] = 0.5
    if args.vtoken_file is not None:
        try:
            extra = json.loads(Path(args.vtoken_file).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--vtoken-file={str(args.vtoken_file)!r}: {err}") from None
        if not isinstance(extra, dict):
            raise ValueError(f"--vtoken-file={str(args.vtoken_file)!r}: expected a JSON object of vtoken settings")
        values["vtoken"] = {**values["vtoken"], **extra}
    return RunConfig(**values)


def parse(argv: list[str], read_vtoken_file: bool = True) -> RunConfig:
    """The ``RunConfig`` of a run's command line (``python -m vtoken.bench trial``'s run flags,
    e.g. ``vtoken.bench.grid.job_args.trial_args``). ``read_vtoken_file=False``: ``--vtoken-file``
    is accepted and not read (its θ_F and watermark change no trial's place in the plan)."""
    parser = argparse.ArgumentParser(prog="run flags", add_help=False)
    add_arguments(parser)
    add_vtoken_file(parser)
    args = parser.parse_args(argv)
    if not read_vtoken_file:
        args.vtoken_file = None
    return run_config(args)
