"""Types of app/_answers.pyx."""

from array import array
from collections.abc import Iterable

from matcher.errors import MatcherError

class MatchCounts:
    def add(self, ids: Iterable[int], dense: int) -> None: ...
    def restore(self, ids: Iterable[int], counts: Iterable[int], lasts: Iterable[int]) -> None: ...
    def drain(self) -> tuple[array[int], array[int], array[int]]: ...
    def __len__(self) -> int: ...

def encode_answers(
    counts: array[int],
    ids: array[int],
    errors: dict[int, MatcherError],
    by_id: list[str | None],
    far: dict[int, str],
    delivered: MatchCounts | None = None,
) -> tuple[bytes, int]: ...
