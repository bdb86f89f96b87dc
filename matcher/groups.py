"""Shared subscriptions (groups): the grammar of group names and of MQTT 5 ``$share/``
filters, the member-choice policies, and the one selection rule every matching path uses.

A match delivers to every *ungrouped* matching subscription plus exactly one matching
member per group (MQTT 5 shared subscriptions, NATS queue groups, AMQP competing
consumers). Which member is a group's policy:

* ``random``: uniformly among the group's matching members (what nats-server does);
* ``round_robin``: the members in id order, one step further on each message of the group
  (a counter per group, kept by the caller);
* ``hash``: sticky by a key (a message id, a client id): multi-probe consistent hashing
  over the member ids (see "choosing a member" below), so a key keeps its member while that
  member stays, and only the keys of a member that leaves move. The hash is ``blake2b``,
  not Python's ``hash`` (salted per process), so every process and every rerun chooses the
  same member for the same key.

Every policy costs O(log members) per group and message (``choose``), over members kept
sorted once per group and pattern (``Ring``), never a pass over the members.

The selection (``select``) is the only place that applies this: the service's routing table
and the Spark job's executors both call it, with their own ``Pick``.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, TypeVar

from matcher.errors import MatcherError
from matcher.grammar import checked_text, unseen_character

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
#: ASCII whitespace and control characters (a NATS queue group is a whitespace-free token);
#: the rest of Unicode's whitespace and its format characters are the names' rule
#: (``matcher.grammar.unseen_character``), checked next.
_FORBIDDEN: Final = frozenset("/+#") | frozenset(chr(c) for c in range(0x21)) | {"\x7f"}

K = TypeVar("K", bound=Hashable)
#: Chooses one member of group ``K`` among its matching members (sorted by id).
Pick: TypeAlias = Callable[[K, Sequence[int]], int | None]


class InvalidGroupError(MatcherError, ValueError):
    """A group name, policy, ``$share/`` filter or hash key that breaks a rule."""


def check_group(value: object) -> str:
    """``value`` as a group name, or ``InvalidGroupError`` naming the rule: text, 1 to 128
    UTF-8 bytes, no ``/``, ``+``, ``#``, ASCII whitespace or control characters
    (``invalid_group``), no other whitespace or format character (the names' rule,
    ``matcher.grammar.unseen_character``: ``whitespace_character``, ``format_character``)."""
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
    unseen = unseen_character(text)
    if unseen is not None:
        code, found = unseen
        raise InvalidGroupError(code, f"group may not contain {found}")
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
#
# ``hash`` is multi-probe consistent hashing (Appleton & O'Reilly, 2015): every member has
# ``POINTS`` fixed positions on a 64-bit ring, a key has ``PROBES`` positions, and the key's
# member owns the point nearest after any probe (clockwise distance, then the lower id).
# Each position is a pure function of the id or the key, so the winner is a minimum over a
# set of (distance, member) pairs: a member that leaves removes only its own pairs, so only
# the keys it held move, and a member that joins adds only its own, so only keys it wins
# move (to it). That is rendezvous hashing's guarantee, which the docs and the tests state;
# jump hashing keeps it only for the last bucket, a ring of successors with a rendezvous
# among them not at all. Unlike rendezvous, finding the winner is PROBES binary searches
# over the sorted points, O(log members), not a score per member. Several points per member
# and several probes per key even out the arcs a single point would own (docs/groups.md
# gives the spread measured).

_MASK: Final = (1 << 64) - 1
#: Positions of a member on the ``hash`` ring (one blake2b digest of 64 bytes holds 8).
POINTS: Final = 8
#: Positions of a key on the ``hash`` ring.
PROBES: Final = 21


def stable_hash(key: str) -> int:
    """A 64-bit hash of ``key``, the same in every process (``hash()`` is salted)."""
    data = key.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _mix(x: int) -> int:
    """splitmix64's finalizer: a cheap, well-spread 64-bit mix (the probes' step)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def member_points(member: int) -> tuple[int, ...]:
    """The ``POINTS`` ring positions of ``member``: blake2b of its id (8 bytes, little
    endian), read as 64-bit words. The same in every process and every release."""
    digest = hashlib.blake2b(member.to_bytes(8, "little"), digest_size=8 * POINTS).digest()
    return struct.unpack(f"<{POINTS}Q", digest)


@dataclass(frozen=True, slots=True)
class Ring:
    """Members as a policy reads them: ``ids`` ascending and, for ``hash``, every member's
    ``POINTS`` positions ascending (``points``) with the member owning each (``owners``).
    Never changed in place: a change makes a new one, so a reader holding one needs no lock
    (``loader.groups`` keeps one per group and pattern, its sequences numpy-backed)."""

    ids: Sequence[int]
    points: Sequence[int] = ()
    owners: Sequence[int] = ()

    @classmethod
    def of(cls, members: Iterable[int], hashed: bool = True) -> Ring:
        """The ring of ``members``, with points when ``hashed``: O(members x log)."""
        ids = sorted(set(members))
        if not hashed:
            return cls(ids)
        pairs = sorted((point, m) for m in ids for point in member_points(m))
        return cls(ids, [p for p, _ in pairs], [m for _, m in pairs])

    def __len__(self) -> int:
        return len(self.ids)


def by_hash(members: Iterable[int], key_hash: int) -> int:
    """The ``hash`` member of ``members`` for ``key_hash`` (``pick_hash`` on a ring built
    for the call: O(members x log members); the routing table keeps its rings instead)."""
    return pick_hash([Ring.of(members)], key_hash)[0]


def pick_hash(rings: Sequence[Ring], key_hash: int) -> tuple[int, int]:
    """The ``hash`` member of the union of ``rings`` (disjoint, each with points) for
    ``key_hash``, and the candidates examined: ``PROBES`` binary searches per ring."""
    step = _mix(key_hash) | 1  # odd: the PROBES probes are distinct
    best_distance, best = 1 << 64, -1
    for ring in rings:
        points, owners = ring.points, ring.owners
        n = len(points)
        probe = key_hash
        for _ in range(PROBES):
            j = bisect_left(points, probe)
            if j == n:
                j = 0  # past the last point: the ring wraps to the first
            point = points[j]
            distance = (point - probe) & _MASK
            if distance <= best_distance:
                owner = owners[j]
                k = j + 1
                while k < n and points[k] == point:  # a shared point: the lower id
                    owner = min(owner, owners[k])
                    k += 1
                if distance < best_distance or owner < best:
                    best_distance, best = distance, owner
            probe = (probe + step) & _MASK
    return best, PROBES * len(rings)


def nth(rings: Sequence[Ring], i: int) -> tuple[int, int]:
    """The ``i``-th smallest id of the union of ``rings`` (disjoint), and the candidates
    examined: one for one ring, else a binary search over the ids' values, counting in
    every ring at each step (O(rings x log members x 64))."""
    if len(rings) == 1:
        return rings[0].ids[i], 1
    low = min(ring.ids[0] for ring in rings)
    high = max(ring.ids[-1] for ring in rings)
    examined = 0
    while low < high:
        middle = (low + high) // 2
        if sum(bisect_right(ring.ids, middle) for ring in rings) > i:
            high = middle
        else:
            low = middle + 1
        examined += len(rings)
    return low, examined


def choose(
    policy: str,
    rings: Sequence[Ring],
    *,
    key_hash: Callable[[], int],
    counter: Iterator[int],
    rng: random.Random,
) -> tuple[int, int]:
    """One member of the union of ``rings`` (a group's matching members, one ring per
    pattern that matched) under ``policy``, and the candidates examined. ``key_hash`` is
    asked only by ``hash`` (computed at most once by the caller), ``counter`` (an
    ``itertools.count``: ``next`` on it is atomic in CPython) only by ``round_robin``.
    ``round_robin`` and ``random`` index the members in id order. O(rings x log members)."""
    total = sum(len(ring) for ring in rings)
    if total == 1:
        return next(ring.ids[0] for ring in rings if len(ring)), 1
    if policy == "hash":
        return pick_hash(rings, key_hash())
    if policy == "round_robin":
        return nth(rings, next(counter) % total)
    return nth(rings, rng.randrange(total))


def select(
    ids: Iterable[int], group_of: Mapping[int, K], pick: Pick[K]
) -> tuple[list[int], dict[int, K]]:
    """Who receives a message whose matches are ``ids``: every id that is in no group, plus
    ``pick(group, found)`` for each group with matching ids (``found`` sorted: its matching
    members, or in the routing table one id per pattern of the group that matched, each
    standing for the members sharing that pattern, see ``loader.groups``). Returns the
    delivered ids (sorted) and, for each chosen member, its group.
    O(matches x log matches), plus the picks."""
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
        if member is None:  # none of its matching members may receive (all expired)
            continue
        chosen[member] = group
        delivered.append(member)
    delivered.sort()
    return delivered, chosen


def new_counter() -> Iterator[int]:
    """A ``round_robin`` counter for one group."""
    return itertools.count()
