"""``service.core.records.quick_init``: the same frozen instances as the dataclass's own ``__init__`` builds."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from service.core.planner import PlanRequest
from service.core.planner.request import with_changes
from service.core.planner.results import CapacityPlan, KvCacheResult, Message
from service.core.records import from_values, quick_init


def _plain(cls: type) -> type:
    """The same fields as a dataclass without ``quick_init`` (the reference)."""
    return dataclasses.make_dataclass(
        cls.__name__,
        [(f.name, f.type, f) for f in dataclasses.fields(cls)],
        frozen=True,
        slots=True,
        kw_only=True,
    )


def test_instances_equal_the_dataclass_ones_and_stay_frozen() -> None:
    values = {f.name: i for i, f in enumerate(dataclasses.fields(KvCacheResult))}
    built = KvCacheResult(**values)
    reference = _plain(KvCacheResult)(**values)
    assert type(built) is KvCacheResult
    assert dataclasses.astuple(built) == dataclasses.astuple(reference)
    assert repr(built).split("(", 1)[1] == repr(reference).split("(", 1)[1]
    assert built == KvCacheResult(**values) and hash(built) == hash(KvCacheResult(**values))
    assert built != dataclasses.replace(built, num_groups=99)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.num_groups = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(built)) == built


def test_signature_and_defaults_are_the_dataclasses() -> None:
    assert inspect.signature(CapacityPlan) == inspect.signature(_plain(CapacityPlan))
    message = Message(level="info", code="c", text="t")
    plan_fields = {f.name for f in dataclasses.fields(CapacityPlan) if f.default is dataclasses.MISSING}
    with pytest.raises(TypeError, match="missing"):
        CapacityPlan(**dict.fromkeys(plan_fields - {"fits"}, message))
    with pytest.raises(TypeError):
        Message("info", "c", "t")  # type: ignore[misc]  # keyword-only, as before
    defaults = CapacityPlan(**dict.fromkeys(plan_fields, message))
    assert (defaults.exact, defaults.in_flight_tokens, defaults.state_pages) == (False, 0, 1)


def test_from_values_and_with_changes() -> None:
    message = from_values(Message, ("warning", "code", "text"))
    assert message == Message(level="warning", code="code", text="text") and type(message) is Message
    with pytest.raises(ValueError):
        from_values(Message, ("warning", "code"))
    request = PlanRequest(model=None, max_model_len=4096)  # type: ignore[arg-type]
    changed = with_changes(request, max_model_len=8192, suggest=False)
    assert changed == dataclasses.replace(request, max_model_len=8192, suggest=False)
    assert type(changed) is PlanRequest
    with pytest.raises(TypeError, match="no field"):
        with_changes(request, not_a_field=1)


def test_refuses_classes_whose_init_does_more() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class WithPostInit:
        x: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class WithFactory:
        x: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WithoutSlots:
        x: int

    for cls in (WithPostInit, WithFactory, WithoutSlots):
        with pytest.raises(TypeError):
            quick_init(cls)


def test_a_subclass_gets_the_dataclass_init() -> None:
    class Child(Message):  # no __init__ of its own: Message's, which leaves it to the dataclass's
        __slots__ = ("note",)

    child = Child(level="info", code="c", text="t")
    assert type(child) is Child and child == Child(level="info", code="c", text="t")
    assert (child.level, child.code, child.text) == ("info", "c", "t")
