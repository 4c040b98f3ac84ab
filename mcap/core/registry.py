"""One registry mechanism for every extension point (search methods, predictors, engines;
ARCHITECTURE.md, "The three registries"): a name -> instance map filled by a class
decorator, read by the CLI's choices, the dashboard's selectors and the evaluation."""
from __future__ import annotations

from typing import Generic, Iterator, Optional, TypeVar

from mcap.core.errors import McapError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str):
        self.what = what  # "method", "predictor", "engine": for messages
        self._items: dict[str, T] = {}

    def register(self, cls):
        """Class decorator: one instance of ``cls`` under ``cls.name`` (registered once)."""
        name = getattr(cls, "name", "")
        if not name or name in self._items:
            raise ValueError(f"{self.what} name {name!r} is empty or registered twice")
        self._items[name] = cls()
        return cls

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that register a toy one take it out again)."""
        self._items.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise McapError(f"unknown {self.what} {name!r}; expected one of "
                            f"{', '.join(self._items)}") from None

    def find(self, name: str) -> Optional[T]:
        return self._items.get(name)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __contains__(self, name: object) -> bool:
        return name in self._items
