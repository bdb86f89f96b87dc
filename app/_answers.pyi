"""Types of app/_answers.pyx."""

from array import array

from matcher.errors import MatcherError

def encode_answers(
    counts: array[int],
    ids: array[int],
    errors: dict[int, MatcherError],
    by_id: list[str | None],
    far: dict[int, str],
) -> tuple[bytes, int]: ...
