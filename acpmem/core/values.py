"""The one value idiom of acpmem: ``Value``, a frozen, comparable, hashable record with ``with_changes``.

Every library value (entries, settings, search results, requests, outcomes) is a ``Value`` subclass: fields are the
class's annotations in order, a class attribute of the same name is the default, instances are immutable.
"""
from __future__ import annotations


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a frozen value."""


class Value:
    """A frozen value, as a frozen dataclass would give: built from positional or keyword fields, immutable, equal
    and hashed by its fields, shown as ``Name(field=value, ...)``, copied with changes by ``with_changes``.

    The values the per-turn read path builds (entries, citations, settings, scores) use this instead of
    ``dataclasses``: that import (with ``inspect``) and the code it generates per class cost ~35 ms of the
    150 ms that ``list --format prompt`` may take. Fields are the class's annotations in order; a class attribute
    of the same name is the default (defaults are shared, so they must be immutable). ``_hidden`` fields are left
    out of comparison and repr."""

    _fields: tuple[str, ...] = ()
    _defaults: dict = {}
    _compared: tuple[str, ...] = ()
    _hidden: tuple[str, ...] = ()

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        own = tuple(cls.__dict__.get("__annotations__", {}))
        cls._fields = cls._fields + tuple(n for n in own if n not in cls._fields)
        cls._defaults = {n: cls.__dict__[n] for n in cls._fields if n in cls.__dict__} | {
            n: v for n, v in cls._defaults.items() if n not in cls.__dict__}
        cls._compared = tuple(n for n in cls._fields if n not in cls._hidden)

    def __init__(self, *args: object, **kwargs: object) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} fields, {len(args)} were given")
        d = self.__dict__
        d.update(zip(fields, args))
        for k, v in kwargs.items():
            if k not in fields:
                raise TypeError(f"{type(self).__name__}() got an unexpected field '{k}'")
            if k in d:
                raise TypeError(f"{type(self).__name__}() got field '{k}' twice")
            d[k] = v
        if len(d) < len(fields):
            for n in fields:
                if n not in d:
                    if n not in self._defaults:
                        raise TypeError(f"{type(self).__name__}() is missing field '{n}'")
                    d[n] = self._defaults[n]

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field '{name}'")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field '{name}'")

    def _key(self) -> tuple:
        d = self.__dict__
        return tuple(d[n] for n in self._compared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        d = self.__dict__
        return f"{type(self).__qualname__}({', '.join(f'{n}={d[n]!r}' for n in self._compared)})"

    def with_changes(self, **changes: object):
        """A copy with some fields changed (``dataclasses.replace``)."""
        d = self.__dict__
        return type(self)(**{n: changes.pop(n) if n in changes else d[n] for n in self._fields}, **changes)
