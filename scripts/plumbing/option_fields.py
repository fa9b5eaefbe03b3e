"""The machinery of the session options (scripts/plumbing/options.py declares them): opt()
fields, the frozen SessionOptions classes, and the argparse parser and --help generated from
them. Every value (and each $ROCMFA_* default) is parsed and checked here, before a session
runs its first command or plan line."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import FrozenInstanceError
from typing import Any, ClassVar, dataclass_transform

from scripts.plumbing.errors import UserError

Choices = Sequence[str] | str  # the constant, or "module:NAME" naming it (imported when used)
Parser = Callable[[str], Any] | str  # a function, or "module:function" naming it


def resolve(ref: Any) -> Any:
    """ "module:NAME" -> that object, imported now (a session's own module: its choices and
    parsers load only when that session runs or shows --help); anything else as is."""
    if not isinstance(ref, str):
        return ref
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


class Opt:
    """One option: a field of an options class (opt() makes it; the class names it). A plain
    class, not a dataclass: each dataclass costs every nox run ~2 ms to create."""

    __slots__ = (
        "aliases",
        "check",
        "choices",
        "default",
        "env",
        "flags",
        "help",
        "metavar",
        "name",
        "type",
    )  # fmt: skip

    def __init__(
        self,
        flags: tuple[str, ...],
        help: str,
        default: Any = None,
        env: str | None = None,
        choices: Choices | None = None,
        type: Parser | None = None,
        check: Parser | None = None,
        metavar: str | None = None,
        aliases: Mapping[str, str] | None = None,
        name: str = "",
    ) -> None:
        self.flags, self.help, self.default, self.env = flags, help, default, env
        self.choices, self.type, self.check, self.metavar = choices, type, check, metavar
        self.aliases, self.name = dict(aliases or {}), name

    def changed(self, **changes: Any) -> Opt:
        return Opt(**{**{k: getattr(self, k) for k in self.__slots__}, **changes})

    @property
    def kind(self) -> str:
        if self.default is False:
            return "switch"
        if isinstance(self.default, tuple):
            return "list"
        return "value"

    def allowed(self) -> tuple[str, ...] | None:
        if self.choices is None:
            return None
        found = resolve(self.choices)
        return tuple(found() if callable(found) else found)


def opt(*flags: str, help: str, default: Any = None, **more: Any) -> Any:
    """Declare an option as a field of an options class (typed Any, so `x: int | None = opt(..)`
    type-checks; the class replaces it by its default). more: Opt's env, choices, type, check,
    metavar, aliases."""
    return Opt(tuple(flags), help, default, **more)


def like(declared_in: type[SessionOptions], name: str, **changes: Any) -> Any:
    """The option `name` as declared in that class, with these changes for one session (an
    alias it keeps, a check it defers): the option stays declared once."""
    return declared_in._options[name].changed(**changes)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(opt,))
class SessionOptions:
    """Base of the options classes: frozen, keyword-only, one option per annotated field (its
    value an opt(...)), equal by value - a dataclass to type checkers. Not @dataclass itself:
    that costs ~1 ms per class at import, which every nox run pays."""

    _options: ClassVar[dict[str, Opt]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        merged: dict[str, Opt] = {}
        for base in reversed(cls.__mro__[1:]):
            merged.update(base.__dict__.get("_options", {}))
        for name, annotation in inspect.get_annotations(cls).items():
            if name.startswith("_"):
                continue
            declared = cls.__dict__.get(name)
            if not isinstance(declared, Opt):
                raise TypeError(f"{cls.__name__}.{name}: declare the option with opt(...)")
            # Completed in place: one Opt per field, made for this class by opt() or like().
            if declared.default is None and str(annotation) in ("bool", "<class 'bool'>"):
                declared.default = False  # a switch
            elif declared.default is None and str(annotation).startswith("tuple["):
                declared.default = ()  # repeatable
            declared.name = name
            merged[name] = declared
            setattr(cls, name, declared.default)
        cls._options = merged

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self._options)
        if unknown:
            raise TypeError(f"{type(self).__name__}: no option {', '.join(sorted(unknown))}")
        for name, option in self._options.items():
            object.__setattr__(self, name, values.get(name, option.default))

    @classmethod
    def options(cls) -> tuple[Opt, ...]:
        return tuple(cls._options.values())

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(cls._options)

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name in self._options)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(self._options, self._values(), strict=True))
        return f"{type(self).__name__}({shown})"

    def check(self) -> None:
        """Checks across fields (options that exclude each other); raise UserError."""


def _add(parser: argparse.ArgumentParser, option: Opt, for_help: bool) -> None:
    if option.kind == "switch":
        parser.add_argument(*option.flags, dest=option.name, action="store_true", help=option.help)
    else:
        action = "append" if option.kind == "list" else "store"
        parser.add_argument(
            *option.flags,
            dest=option.name,
            action=action,
            # shown in --help; a parse leaves them to _convert, so a run never imports the
            # domain module that holds them before it needs it
            choices=option.allowed() if for_help else None,
            metavar=option.metavar,
            help=option.help,
        )
    for alias, value in option.aliases.items():
        parser.add_argument(
            alias,
            dest=f"{option.name}.alias",
            action="append_const",
            const=value,
            help=f"the same as {option.flags[0]} {value} (kept for old command lines)",
        )


def _raw(option: Opt, parsed: argparse.Namespace) -> Any:
    """The option's text as given: by its flag, or by one of its aliases (not both)."""
    raw = getattr(parsed, option.name)
    given = [
        a
        for a, v in option.aliases.items()
        if v in (getattr(parsed, option.name + ".alias", None) or ())
    ]
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)} exclude each other")
    if given and raw is not None:
        raise UserError(
            f"{option.flags[0]} replaces {'/'.join(option.aliases)}; pass only {option.flags[0]}"
        )
    return option.aliases[given[0]] if given else raw


def build_parser(
    session: str, cls: type[SessionOptions], *, for_help: bool = True
) -> argparse.ArgumentParser:
    """The session's parser and --help: its own options only (other sessions' options are
    dropped before parsing, without_others)."""
    parser = argparse.ArgumentParser(
        prog=f"nox -s {session} --",
        allow_abbrev=False,
        description=f"Options of the {session} session. {cls.__dict__.get('__doc__') or ''}",
    )
    for option in cls.options():
        _add(parser, option, for_help)
    return parser


def without_others(
    cls: type[SessionOptions],
    posargs: Sequence[str],
    others: Iterable[type[SessionOptions]],
    passed: Iterable[str] = (),
) -> list[str]:
    """posargs less the options (and their values) that other sessions of a chained run declare
    and this one does not: nox hands every session the same posargs. Done here rather than as
    hidden argparse options: a parser of every session's options costs ~8 ms per nox run."""
    own = {flag for o in cls.options() for flag in (*o.flags, *o.aliases)} | set(passed)
    foreign: dict[str, bool] = {}  # flag -> takes a value
    for other in others:
        for option in other.options():
            for flag in (*option.flags, *option.aliases):
                if flag not in own:
                    foreign[flag] = option.kind != "switch" and flag not in option.aliases
    kept: list[str] = []
    args = iter(posargs)
    for arg in args:
        if arg == "--":
            kept += [arg, *args]
            break
        flag = arg.split("=", 1)[0]
        if flag in foreign:
            if foreign[flag] and "=" not in arg:
                next(args, None)  # its value
        elif arg[:2] in foreign and not arg.startswith("--") and foreign[arg[:2]]:
            pass  # a short flag with its value attached: -j8
        else:
            kept.append(arg)
    return kept


def _convert(session: str, option: Opt, text: str, where: str) -> Any:
    allowed = option.allowed()
    if allowed is not None and text not in allowed:
        raise UserError(f"{session}: {where}={text!r}: expected one of {', '.join(allowed)}")
    try:
        if option.check is not None:
            resolve(option.check)(text)
        return text if option.type is None else resolve(option.type)(text)
    except UserError as error:
        prefix = f"{where}={text!r}: " if where.startswith("$") else ""
        raise UserError(f"{session}: {prefix}{error}") from None
    except ValueError as error:
        raise UserError(f"{session}: {where} {text!r}: {error}") from None


def effective(opts: SessionOptions) -> str:
    """The options a session runs with, other than defaults, and where each came from (cibuildwheel
    prints its effective options at the start): `--arch gfx1151 ($ROCMFA_ARCH), --jobs 4`."""
    shown = []
    for option in opts.options():
        value = getattr(opts, option.name)
        where = ""
        if value == option.default and option.env and os.environ.get(option.env):
            value, where = os.environ[option.env], f" (${option.env})"
        if value == option.default:
            continue
        if option.kind == "switch":
            shown.append(option.flags[0])
            continue
        values = value if isinstance(value, tuple) else (value,)
        text = ",".join(v.describe() if hasattr(v, "describe") else str(v) for v in values)
        shown.append(f"{option.flags[0]} {text}{where}")
    return ", ".join(shown) or "defaults"


def _typed(session: str, cls: type[SessionOptions], parsed: argparse.Namespace) -> Any:
    values: dict[str, Any] = {}
    for option in cls.options():
        try:
            raw = _raw(option, parsed)
        except UserError as error:
            raise UserError(f"{session}: {error}") from None
        where = option.flags[0]
        if option.kind == "list":
            values[option.name] = (
                tuple(_convert(session, option, r, where) for r in raw) if raw else option.default
            )
        elif option.kind == "value" and raw is not None:
            values[option.name] = _convert(session, option, raw, where)
        else:
            values[option.name] = option.default if raw is None else raw
        if option.env and not raw and os.environ.get(option.env):
            _convert(session, option, os.environ[option.env], f"${option.env}")
    typed = cls(**values)
    try:
        typed.check()
    except UserError as error:
        raise UserError(f"{session}: {error}") from None
    return typed


def _parser(session: str, cls: type[SessionOptions]) -> argparse.ArgumentParser:
    parser = build_parser(session, cls, for_help=False)

    def fail(message: str) -> None:
        raise UserError(f"{session}: {message} (see: nox -s {session} -- --help)")

    parser.error = fail  # type: ignore[method-assign]
    return parser


def parse(
    session: str,
    cls: type[SessionOptions],
    posargs: Sequence[str],
    others: Iterable[type[SessionOptions]] = (),
) -> Any:
    """The session's options object from posargs; a bad option or value is a one-line
    UserError; --help exits 0."""
    parsed = _parser(session, cls).parse_args(without_others(cls, posargs, others))
    return _typed(session, cls, parsed)


def parse_known(
    session: str,
    cls: type[SessionOptions],
    posargs: Sequence[str],
    others: Iterable[type[SessionOptions]] = (),
    passed: Iterable[str] = (),
) -> tuple[Any, list[str]]:
    """For the sessions that forward: (their options object, the rest for their function;
    passed: flags of that function's own, never taken for another session's)."""
    kept = without_others(cls, posargs, others, passed)
    parsed, rest = _parser(session, cls).parse_known_args(kept)
    return _typed(session, cls, parsed), rest
