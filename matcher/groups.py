"""Shared subscriptions (groups): the grammar of group names and of MQTT 5 ``$share/``
filters, the member-choice policies, and the one selection rule every matching path uses.

A match delivers to every *ungrouped* matching subscription plus exactly one matching
member per group (MQTT 5 shared subscriptions, NATS queue groups, AMQP competing
consumers). Which member is a group's policy:

* ``random``: uniformly among the group's matching members (what nats-server does);
* ``round_robin``: the members in id order, one step further on each message of the group
  (a counter per group, kept by the caller);
* ``hash``: sticky by a key (a message id, a client id): rendezvous hashing over the member
  ids, so a key keeps its member while that member stays, and only the keys of a member
  that leaves move. The hash is ``blake2b``, not Python's ``hash`` (salted per process), so
  every process and every rerun chooses the same member for the same key.

The selection (``select``) is the only place that applies this: the service's routing table
and the Spark job's executors both call it, with their own ``Pick``.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Final, Literal, TypeAlias, TypeVar

from matcher.errors import MatcherError
from matcher.grammar import checked_text

Policy: TypeAlias = Literal["random", "round_robin", "hash"]
POLICIES: Final[tuple[Policy, ...]] = ("random", "round_robin", "hash")
#: A group created without a policy gets this one (stateless, and what NATS does).
DEFAULT_POLICY: Final[Policy] = "random"
#: Group names: at most 128 UTF-8 bytes (EMQX and VerneMQ keep share names short; a NATS
#: queue group name is a protocol token).
MAX_GROUP_BYTES: Final = 128
#: ``hash`` keys (a message id, a client id): at most 1,024 UTF-8 bytes.
MAX_KEY_BYTES: Final = 1024
#: MQTT 5 §4.8.2: ``$share/{ShareName}/{filter}``.
SHARE_PREFIX: Final = "$share/"
#: Characters a group name may not hold: MQTT 5's ShareName rule (``/``, ``+``, ``#``)
#: applied to every dialect, so any group can be written as a ``$share/`` filter too, plus
#: whitespace and control characters (a NATS queue group is a whitespace-free token).
_FORBIDDEN: Final = frozenset("/+#") | frozenset(chr(c) for c in range(0x21)) | {"\x7f"}

K = TypeVar("K", bound=Hashable)
#: Chooses one member of group ``K`` among its matching members (sorted by id).
Pick: TypeAlias = Callable[[K, Sequence[int]], int]


class InvalidGroupError(MatcherError, ValueError):
    """A group name, policy, ``$share/`` filter or hash key that breaks a rule."""


def check_group(value: object) -> str:
    """``value`` as a group name, or ``InvalidGroupError`` naming the rule: text, 1 to 128
    UTF-8 bytes, no ``/``, ``+``, ``#``, whitespace or control characters."""
    try:
        text = checked_text(value, "group", MAX_GROUP_BYTES)
    except MatcherError as e:
        raise InvalidGroupError(e.code, e.message) from e
    if not text:
        raise InvalidGroupError("empty_group", "group must not be empty")
    bad = next((c for c in text if c in _FORBIDDEN), None)
    if bad is not None:
        raise InvalidGroupError(
            "invalid_group",
            f"group may not contain U+{ord(bad):04X} {bad!r} (no '/', '+', '#', whitespace "
            "or control characters)",
        )
    return text


def check_policy(value: object) -> Policy:
    """``value`` as a policy, or ``InvalidGroupError`` (``invalid_policy``)."""
    for policy in POLICIES:
        if value == policy:
            return policy
    raise InvalidGroupError(
        "invalid_policy", f"policy must be one of {', '.join(POLICIES)}, not {value!r}"
    )


def check_key(value: object) -> str:
    """``value`` as a ``hash`` key (any text without NUL, at most 1,024 UTF-8 bytes)."""
    try:
        return checked_text(value, "key", MAX_KEY_BYTES)
    except MatcherError as e:
        raise InvalidGroupError(e.code, e.message) from e


def split_shared(mqtt_filter: str) -> tuple[str, str] | None:
    """(group, filter) of an MQTT 5 shared subscription ``$share/{ShareName}/{filter}``, or
    None for an ordinary filter. MQTT 5 §4.8.2: the ShareName is at least one character and
    holds no ``/``, ``+`` or ``#``; a filter follows the ``/`` after it. The filter is
    checked by the dialect's grammar afterwards, like any other."""
    if not mqtt_filter.startswith(SHARE_PREFIX):
        return None
    group, slash, rest = mqtt_filter[len(SHARE_PREFIX) :].partition("/")
    if not slash or not rest:
        raise InvalidGroupError(
            "invalid_shared_subscription",
            "a shared subscription is $share/{group}/{filter}: the filter is missing",
        )
    try:
        return check_group(group), rest
    except InvalidGroupError as e:
        raise InvalidGroupError(e.code, f"in $share/{{group}}/{{filter}}: {e.message}") from e


# -- choosing a member --------------------------------------------------------------------

_MASK: Final = (1 << 64) - 1


def stable_hash(key: str) -> int:
    """A 64-bit hash of ``key``, the same in every process (``hash()`` is salted)."""
    data = key.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _mix(x: int) -> int:
    """splitmix64's finalizer: a cheap, well-spread 64-bit mix for rendezvous scores."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def by_hash(members: Sequence[int], key_hash: int) -> int:
    """The member with the highest rendezvous score for ``key_hash``: O(members)."""
    return max(members, key=lambda m: (_mix(key_hash ^ _mix(m)), -m))


def choose(
    policy: str,
    members: Sequence[int],
    *,
    key_hash: Callable[[], int],
    counter: Iterator[int],
    rng: random.Random,
) -> int:
    """One of ``members`` (non-empty, sorted by id) under ``policy``. ``key_hash`` is asked
    only by ``hash`` (computed at most once by the caller), ``counter`` (an
    ``itertools.count``: ``next`` on it is atomic in CPython) only by ``round_robin``."""
    if len(members) == 1:
        return members[0]
    if policy == "hash":
        return by_hash(members, key_hash())
    if policy == "round_robin":
        return members[next(counter) % len(members)]
    return members[rng.randrange(len(members))]


def select(
    ids: Iterable[int], group_of: Mapping[int, K], pick: Pick[K]
) -> tuple[list[int], dict[int, K]]:
    """Who receives a message whose matches are ``ids``: every id that is in no group, plus
    ``pick(group, members)`` for each group with matching members (members sorted by id).
    Returns the delivered ids (sorted) and, for each chosen member, its group.
    O(matches + members x log members)."""
    delivered: list[int] = []
    members: dict[K, list[int]] = {}
    get = group_of.get
    for sub_id in ids:
        group = get(sub_id)
        if group is None:
            delivered.append(sub_id)
        else:
            found = members.get(group)
            if found is None:
                members[group] = [sub_id]
            else:
                found.append(sub_id)
    chosen: dict[int, K] = {}
    for group, found in members.items():
        found.sort()
        member = pick(group, found)
        chosen[member] = group
        delivered.append(member)
    delivered.sort()
    return delivered, chosen


def new_counter() -> Iterator[int]:
    """A ``round_robin`` counter for one group."""
    return itertools.count()
