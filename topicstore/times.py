"""The times a request may name (the audit's ``from`` and ``to``, a subscription's
``expires_at``): RFC 3339 date-times, one rule that the handler applies and the OpenAPI
document states. Here, beside the API's models, so the client reads times by it too.

A bare number is not a time (pydantic would read ``0.5`` as seconds since 1970), nor is a
time without an offset (RFC 3339 has none). The written year is bounded (``YEARS``): a
timestamp outside fits no row and overflows some drivers, and a bound on the year as written
is one a regular expression can state, so the document's ``pattern`` is the exact rule."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Final

from pydantic import PlainValidator, WithJsonSchema

#: The years a time may be written in. With any offset (at most a day) the instant stays
#: within what Python, PostgreSQL and DuckDB represent.
YEARS: Final = range(1970, 9999)


def digits_between(low: int, high: int, width: int) -> str:
    """A regular expression (``re`` and ECMA-262 alike) matching exactly the ``width``-digit
    decimal strings from ``low`` to ``high``."""
    first, last = f"{low:0{width}d}", f"{high:0{width}d}"
    return _between(first, last)


def _between(low: str, high: str) -> str:
    if not low:
        return ""
    if low[0] == high[0]:
        return low[0] + _between(low[1:], high[1:])
    rest = len(low) - 1
    any_rest = "[0-9]" * rest
    lead, top = int(low[0]), int(high[0])
    parts = []
    if low[1:] != "0" * rest:  # the first leading digit covers only part of its range
        parts.append(low[0] + _between(low[1:], "9" * rest))
        lead += 1
    tail = None
    if high[1:] != "9" * rest:
        tail = high[0] + _between("0" * rest, high[1:])
        top -= 1
    if lead <= top:
        parts.append(f"[{lead}-{top}]{any_rest}" if lead < top else f"{lead}{any_rest}")
    if tail is not None:
        parts.append(tail)
    return parts[0] if len(parts) == 1 else f"(?:{'|'.join(parts)})"


def _rfc3339(year: str) -> str:
    """RFC 3339 ``date-time`` (section 5.6) with ``year`` and no leap second (Python has
    none); the calendar (30 February) is left to the ``date-time`` format and the parser.
    ASCII digits only: ``\\d`` takes any script's digits in ``re``."""
    return (
        f"^{year}-[0-9]{{2}}-[0-9]{{2}}[Tt][0-9]{{2}}:[0-9]{{2}}:[0-5][0-9](?:\\.[0-9]+)?"
        "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
    )


#: What the document states: the form and the year's bound (``in_years`` checks that one,
#: with its own code).
PATTERN: Final = _rfc3339(digits_between(YEARS.start, YEARS.stop - 1, 4))
_FORM: Final = re.compile(_rfc3339("[0-9]{4}"))


def parse(value: object) -> datetime:
    """``value`` as an aware ``datetime`` (any year), or ``ValueError`` saying what a time
    is."""
    if not isinstance(value, str) or _FORM.match(value) is None:
        raise ValueError(
            "a time is an RFC 3339 date-time with an offset, e.g. 2026-11-24T00:00:00Z"
        )
    # ``fromisoformat`` checks the calendar and the offset's range; it reads "Z" only.
    return datetime.fromisoformat(value.upper())


#: A query parameter holding a time: read by ``parse`` (422 ``invalid_request``
#: otherwise), documented as the whole rule (the year's bound too, which the operation
#: checks: 422 ``time_out_of_range``).
Time = Annotated[
    datetime,
    PlainValidator(parse),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": PATTERN}),
]
