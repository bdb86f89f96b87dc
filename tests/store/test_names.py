"""The names' rule: subscriber and group names hold no whitespace and no format character
(``matcher.grammar.unseen_character``), applied by ``store.validate`` to every new
subscription, whatever path it came by; the OpenAPI document states the same set."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matcher import MatcherError
from matcher.grammar import unseen_characters_class
from store import NewSubscription, StoreError, validate

#: Every sort the rule refuses, by hand: spaces, line and paragraph separators, NEL, the
#: bidirectional overrides, embeddings and isolates, zero-width characters, the BOM, a tag.
REFUSED = {
    "\u00a0": "whitespace_character",
    "\u3000": "whitespace_character",
    "\u2028": "whitespace_character",
    "\u0085": "whitespace_character",
    "\u2009": "whitespace_character",
    "\u202e": "format_character",
    "\u202a": "format_character",
    "\u2066": "format_character",
    "\u2069": "format_character",
    "\u200b": "format_character",
    "\u200f": "format_character",
    "\ufeff": "format_character",
    "\u00ad": "format_character",
    "\U000e0001": "format_character",
}


def _code(new: NewSubscription) -> str | None:
    try:
        validate(new)
    except (MatcherError, StoreError) as e:
        return e.code
    return None


@pytest.mark.parametrize(("c", "code"), sorted(REFUSED.items()))
def test_subscriber_and_group_names_refuse_unseen_characters(c: str, code: str) -> None:
    assert _code(NewSubscription(f"w{c}1", "a")) == code
    assert _code(NewSubscription("w", "a", group=f"g{c}x")) == code
    assert _code(NewSubscription("w", f"$share/g{c}x/a", dialect="mqtt")) == code
    # Patterns and topics are not names: the grammar decides them (AMQP takes any word).
    assert _code(NewSubscription("w", f"a{c}b")) is None


def test_ascii_space_and_tab() -> None:
    assert _code(NewSubscription("w 1", "a")) == "whitespace_character"
    assert _code(NewSubscription("w\t1", "a")) == "whitespace_character"
    assert _code(NewSubscription("w\n1", "a")) == "control_character"  # the older rule first
    assert _code(NewSubscription("w", "a", group="g x")) == "invalid_group"  # MQTT's ShareName
    assert _code(NewSubscription("w", "a", tenant="team a")) is None  # tenants: not names


@given(st.characters(codec="utf-8"))
def test_every_character_by_the_rule(c: str) -> None:
    """A subscriber name with ``c`` in it, against the rule stated here by hand."""
    if c == "\x00":
        expected: str | None = "nul_byte"
    elif ord(c) < 0x20 and c != "\t":
        expected = "control_character"
    elif c.isspace():
        expected = "whitespace_character"
    elif unicodedata.category(c) == "Cf":
        expected = "format_character"
    else:
        expected = None
    assert _code(NewSubscription(f"w{c}1", "a")) == expected


def test_the_openapi_class_is_the_rule_in_the_basic_plane() -> None:
    refused = re.compile(f"[{unseen_characters_class()}]")
    for code in range(0x10000):
        c = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            continue  # lone surrogates: no text holds one (``lone_surrogate``)
        expected = c.isspace() or unicodedata.category(c) == "Cf"
        assert bool(refused.fullmatch(c)) == expected, hex(code)
