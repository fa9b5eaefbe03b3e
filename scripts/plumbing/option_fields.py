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
from dataclasses import FrozenInstanceError, dataclass, field, replace
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


@dataclass(frozen=True)
class Opt:
    """One option: a field of an options class (opt() makes it; the class names it)."""

    flags: tuple[str, ...]
    help: str
    default: Any = None
    env: str | None = None
    choices: Choices | None = None
    type: Parser | None = None
    check: Parser | None = None
    metavar: str | None = None
    aliases: Mapping[str, str] = field(default_factory=dict)
    name: str = ""

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


def opt(
    *flags: str,
    help: str,
    default: Any = None,
    env: str | None = None,
    choices: Choices | None = None,
    type: Parser | None = None,
    check: Parser | None = None,
    metavar: str | None = None,
    aliases: Mapping[str, str] | None = None,
) -> Any:
    """Declare an option as a field of an options class (typed Any, so `x: int | None = opt(..)`
    type-checks; the class replaces it by its default)."""
    return Opt(tuple(flags), help, default, env, choices, type, check, metavar, dict(aliases or {}))


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
            if declared.default is None and str(annotation) in ("bool", "<class 'bool'>"):
                declared = replace(declared, default=False)  # a switch
            elif declared.default is None and str(annotation).startswith("tuple["):
                declared = replace(declared, default=())  # repeatable
            declared = replace(declared, name=name)
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


def _add(parser: argparse.ArgumentParser, option: Opt, flags: Sequence[str], own: bool) -> None:
    dest = option.name if own else f"other.{option.name}"
    shown = option.help if own else argparse.SUPPRESS
    if option.kind == "switch":
        parser.add_argument(*flags, dest=dest, action="store_true", help=shown)
    else:
        action = "append" if option.kind == "list" else "store"
        choices = option.allowed() if own else None
        parser.add_argument(
            *flags, dest=dest, action=action, choices=choices, metavar=option.metavar, help=shown
        )
    for alias, value in option.aliases.items():
        note = f"the same as {option.flags[0]} {value} (kept for old command lines)"
        parser.add_argument(
            alias,
            dest=f"{dest}.alias",
            action="append_const",
            const=value,
            help=note if own else argparse.SUPPRESS,
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
    session: str, cls: type[SessionOptions], others: Iterable[type[SessionOptions]] = ()
) -> argparse.ArgumentParser:
    """The session's parser: its own options with help; other sessions' options hidden."""
    parser = argparse.ArgumentParser(
        prog=f"nox -s {session} --",
        allow_abbrev=False,
        description=f"Options of the {session} session. {cls.__dict__.get('__doc__') or ''}",
    )
    taken: set[str] = set()
    for own, options in [(True, cls.options()), *((False, c.options()) for c in others)]:
        for option in options:
            if own or option.name not in cls._options:
                flags = [f for f in option.flags if f not in taken]
                aliases = {a: v for a, v in option.aliases.items() if a not in taken}
                if flags:
                    _add(parser, replace(option, aliases=aliases), flags, own)
                    taken.update(flags, aliases)
    return parser


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


def _parser(
    session: str, cls: type[SessionOptions], others: Iterable[type[SessionOptions]]
) -> argparse.ArgumentParser:
    parser = build_parser(session, cls, others)

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
    return _typed(session, cls, _parser(session, cls, others).parse_args(list(posargs)))


def parse_known(
    session: str,
    cls: type[SessionOptions],
    posargs: Sequence[str],
    others: Iterable[type[SessionOptions]] = (),
) -> tuple[Any, list[str]]:
    """For the probe sessions: (their options object, the rest for the probe script)."""
    parsed, rest = _parser(session, cls, others).parse_known_args(list(posargs))
    return _typed(session, cls, parsed), rest
