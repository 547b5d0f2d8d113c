"""Faster construction of the frozen, slotted dataclasses a plan is made of, with the very same instances.

A frozen dataclass's ``__init__`` writes each field with ``object.__setattr__(self, name, value)`` (the only
way past its own ``__setattr__``, which refuses every write): a method-wrapper call and a generic attribute
lookup per field, about 1,200 machine instructions each on CPython 3.11. A plan builds some 120 fields of
them (the request, the result, its settings and cache, messages, terms), so those writes alone cost more than
a tenth of a never-seen plan.

``quick_init`` gives such a class an ``__init__`` that writes the fields as an ordinary slotted object does:
the instance is moved to a *twin* class (the same ``__slots__``, no ``__setattr__`` of its own) for the
writes and moved back, two ``__class__`` assignments (CPython allows them between classes with the same slot
layout) instead of one wrapper call per field. The signature (keyword-only fields, defaults) is the
dataclass's, so callers, ``dataclasses.replace`` and ``inspect.signature`` see no difference; the instance
is of the class, equal, hashed, printed and still frozen as before. ``from_values`` builds one from every
field's value in field order (``dataclasses.replace`` without the keyword arguments, for copies with a few
changes).

Only classes whose ``__init__`` does nothing else qualify: frozen, slotted, keyword-only, every field in
``__init__``, no default factory, no ``__post_init__`` (``quick_init`` refuses any other). A subclass (not
slotted alike) gets the dataclass's own ``__init__``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

T = TypeVar("T")

_FROM_VALUES = "__quick_from_values__"


def quick_init(cls: type[T]) -> type[T]:
    """``cls`` with the faster ``__init__`` of the module docstring (applied above ``@dataclass``)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: its __init__ does more than write the fields")
    fields = dataclasses.fields(cast(Any, cls))
    names = tuple(f.name for f in fields)
    if tuple(cls.__dict__["__slots__"]) != names:
        raise TypeError(f"{cls.__name__}'s slots are not its fields")
    for f in fields:
        if not f.init or not f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(
                f"{cls.__name__}.{f.name} is not a keyword-only field with at most a plain default"
            )

    twin = type(f"_{cls.__name__}Fields", (), {"__slots__": names, "__module__": cls.__module__})
    namespace: dict[str, Any] = {
        "_cls": cls,
        "_twin": twin,
        "_set": object.__setattr__,
        "_new": object.__new__,
        "_init": cls.__init__,  # the dataclass's, for subclasses
        **{f"_default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING},
    }
    signature = ", ".join(
        f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}" for f in fields
    )
    arguments = ", ".join(f"{n}={n}" for n in names)
    writes = "".join(f"    self.{n} = {n}\n" for n in names)
    unpack = ", ".join(f"self.{n}" for n in names) + ("," if len(names) == 1 else "")
    source = (
        f"def __init__(self, *, {signature}):\n"
        f"    if type(self) is not _cls:\n"
        f"        _init(self, {arguments})\n"
        f"        return\n"
        f"    _set(self, '__class__', _twin)\n"
        f"{writes}"
        f"    self.__class__ = _cls\n"
        f"def from_values(values):\n"
        f"    self = _new(_twin)\n"
        f"    {unpack} = values\n"
        f"    self.__class__ = _cls\n"
        f"    return self\n"
    )
    exec(source, namespace)  # generated from the field names, as dataclasses generates its own __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    setattr(cls, _FROM_VALUES, staticmethod(namespace["from_values"]))
    return cls


def from_values(cls: type[T], values: Iterable[Any]) -> T:
    """An instance of ``cls`` (a ``quick_init`` class) from every field's value, in field order."""
    make: Callable[[Iterable[Any]], T] = getattr(cls, _FROM_VALUES)
    return make(values)
