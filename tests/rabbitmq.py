"""The real RabbitMQ broker as an oracle for AMQP 0-9-1 topic routing.

The engines claim to route exactly as RabbitMQ's topic exchange does; the only trustworthy
reference for that is the broker itself, so tests bind patterns and publish keys through it
and compare. Everything here talks to ``127.0.0.1:5672`` as ``guest``/``guest``.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import pika
import pika.exceptions

from harness.services import require

HOST: Final = "127.0.0.1"
PORT: Final = 5672
ADDRESS: Final = f"{HOST}:{PORT}"

# AMQP shortstr: routing and binding keys longer than this are a protocol error, not a match.
_MAX_KEY_BYTES: Final = 255


def _parameters(timeout: float) -> pika.ConnectionParameters:
    """Connection settings that fail fast instead of retrying when the broker is down."""
    return pika.ConnectionParameters(
        host=HOST,
        port=PORT,
        credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1,
        socket_timeout=timeout,
        stack_timeout=timeout,
        blocked_connection_timeout=timeout,
    )


def broker_available(timeout: float = 2.0) -> bool:
    """True when an AMQP handshake with the broker succeeds within ``timeout`` seconds.

    A full handshake, not just a TCP connect: an open port with a broker that refuses
    ``guest`` would otherwise pass here and fail confusingly inside a test.
    """
    try:
        connection = pika.BlockingConnection(_parameters(timeout))
    except (pika.exceptions.AMQPError, OSError):
        return False
    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
        connection.close()
    return True


def require_broker() -> None:
    """Skip the calling test (or fixture) when the broker is unreachable, but fail it on CI:
    there a missing broker would silently turn the conformance suite into a no-op."""
    require(broker_available(), f"the RabbitMQ broker at {ADDRESS} (AMQP, guest/guest)")


def _check_key(kind: str, key: str) -> None:
    """Reject keys the protocol cannot carry, so they fail here and not as a closed channel."""
    if len(key.encode("utf-8")) > _MAX_KEY_BYTES:
        raise ValueError(f"{kind} {key[:40]!r}... exceeds {_MAX_KEY_BYTES} UTF-8 bytes")


def _delete_exchange(connection: Any, channel: Any, exchange: str) -> None:
    """Best-effort removal of ``exchange``, on a fresh channel if ``channel`` was closed by an
    error; never raises, so it cannot hide the error that got us here."""
    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
        if not connection.is_open:
            return  # exclusive queues are gone with it, so the auto-delete exchange is too
        if channel is None or not channel.is_open:
            channel = connection.channel()
        channel.exchange_delete(exchange=exchange)


def route_with_rabbitmq(
    patterns: Sequence[str], keys: Sequence[str], *, timeout: float = 60.0
) -> list[set[int]]:
    """For each key index, the indices of the patterns the broker routes that key to.

    One fresh auto-delete topic exchange; queue ``i`` is exclusive and bound with
    ``patterns[i]``; key ``k`` is published once with body ``str(k)`` under publisher
    confirms. Once every publish is confirmed the broker has enqueued it everywhere, so each
    queue's ``message_count`` (passive declare) is exact; consumers then drain exactly that
    many, and any extra or duplicate delivery raises instead of being counted.

    RabbitMQ before 4.3.5 backtracks exponentially on patterns with many ``#`` (4.3.5 refuses
    more than two): keep to two per pattern, or to short keys. ``timeout`` bounds the wait
    for deliveries.
    """
    for pattern in patterns:
        _check_key("pattern", pattern)
    for key in keys:
        _check_key("key", key)

    exchange = f"topicstore.test.{uuid.uuid4().hex}"
    connection = pika.BlockingConnection(_parameters(10.0))
    channel: Any = None
    try:
        channel = connection.channel()
        channel.exchange_declare(exchange=exchange, exchange_type="topic", auto_delete=True)
        queues: list[str] = []
        for pattern in patterns:
            queue = channel.queue_declare(queue="", exclusive=True).method.queue
            channel.queue_bind(queue=queue, exchange=exchange, routing_key=pattern)
            queues.append(str(queue))

        # In confirm mode BlockingChannel.basic_publish returns only after the broker's ack,
        # i.e. after every matching queue has the message.
        channel.confirm_delivery()
        for k, key in enumerate(keys):
            channel.basic_publish(exchange=exchange, routing_key=key, body=str(k).encode())

        expected_counts = [
            int(channel.queue_declare(queue=queue, passive=True).method.message_count)
            for queue in queues
        ]
        received: list[list[int]] = [[] for _ in queues]

        def on_message(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
            received[int(method.consumer_tag)].append(int(body))

        for i, queue in enumerate(queues):
            if expected_counts[i]:
                channel.basic_consume(
                    queue=queue, on_message_callback=on_message, auto_ack=True, consumer_tag=str(i)
                )
        total = sum(expected_counts)
        deadline = time.monotonic() + timeout
        while sum(map(len, received)) < total:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                done = sum(map(len, received))
                raise TimeoutError(f"received {done} of {total} routed messages in {timeout}s")
            connection.process_data_events(time_limit=min(remaining, 1.0))
        # Everything was confirmed before counting, so nothing may follow; give a straggler
        # (which would mean the counts were wrong) a moment to show itself.
        connection.process_data_events(time_limit=0.05)

        routed: list[set[int]] = [set() for _ in keys]
        for i, got in enumerate(received):
            if len(got) != expected_counts[i] or len(set(got)) != len(got):
                raise AssertionError(
                    f"queue {i} (pattern {patterns[i]!r}) reported {expected_counts[i]} "
                    f"messages but delivered {sorted(got)}"
                )
            for k in got:
                routed[k].add(i)
        return routed
    finally:
        _delete_exchange(connection, channel, exchange)
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            connection.close()


@dataclass(frozen=True)
class Broker:
    """Who answered: the server properties of the AMQP handshake (``connection.start``)."""

    product: str
    version: str
    platform: str

    @property
    def release(self) -> tuple[int, ...]:
        """``version``'s leading numbers (``3.10.8`` -> ``(3, 10, 8)``)."""
        found = re.match(r"\d+(?:\.\d+)*", self.version)
        return tuple(int(part) for part in found.group().split(".")) if found else ()

    def __str__(self) -> str:
        return f"{self.product} {self.version} ({self.platform}) at {ADDRESS}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def broker() -> Broker:
    """The broker's product, version and platform, as its handshake states them."""
    connection = pika.BlockingConnection(_parameters(10.0))
    try:
        # BlockingConnection keeps the handshake's properties on the connection it wraps.
        properties = connection._impl.server_properties or {}
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            connection.close()
    return Broker(
        *(_text(properties.get(name, "?")) for name in ("product", "version", "platform"))
    )


def refused_bindings(patterns: Sequence[str]) -> dict[str, tuple[int, str]]:
    """The patterns the broker refuses as topic binding keys, each with the reply code and
    text of the channel it closed; the others are bound and accepted.

    One fresh topic exchange and exclusive queue; each bind is on an open channel (a
    refusal closes the one it came on, so the next bind gets a new one)."""
    for pattern in patterns:
        _check_key("pattern", pattern)
    exchange = f"topicstore.test.{uuid.uuid4().hex}"
    connection = pika.BlockingConnection(_parameters(10.0))
    channel: Any = None
    refused: dict[str, tuple[int, str]] = {}
    try:
        channel = connection.channel()
        channel.exchange_declare(exchange=exchange, exchange_type="topic")
        queue = channel.queue_declare(queue="", exclusive=True).method.queue
        for pattern in patterns:
            if not channel.is_open:
                channel = connection.channel()
            try:
                channel.queue_bind(queue=queue, exchange=exchange, routing_key=pattern)
            except pika.exceptions.ChannelClosedByBroker as e:
                refused[pattern] = (e.reply_code, e.reply_text)
        return refused
    finally:
        _delete_exchange(connection, channel, exchange)
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            connection.close()
