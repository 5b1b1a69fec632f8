"""`event`: Reflex's `rx.event` under the types it really produces, and `Followup`, what a handler hands back.

Reflex 0.10 declares `rx.event` as a class whose `__new__` returns an `EventCallback`. Pyright follows that; mypy
keeps the class's own type when `__new__` returns an unrelated one, so under mypy every handler was an
`EventNamespace`: not callable with arguments (`State.replay(id)`), not an event to return. The overloads below state
the same two shapes `rx.event` has (bare decorator, or options then decorator); at run time `event` IS `rx.event`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVarTuple, overload

import reflex as rx
from reflex.event import EventCallback, EventSpec

Ts = TypeVarTuple("Ts")

# Nothing, a browser action (redirect, toast), or a zero-argument handler of the state to run next.
Followup: TypeAlias = EventSpec | EventCallback[()] | None

if TYPE_CHECKING:

    @overload
    def event(func: Callable[[Any, *Ts], Any], /) -> EventCallback[*Ts]: ...

    @overload
    def event(
        *, background: bool = ...
    ) -> Callable[[Callable[[Any, *Ts], Any]], EventCallback[*Ts]]: ...

    def event(*args: Any, **kwargs: Any) -> Any: ...

else:
    event = rx.event
