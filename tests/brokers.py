"""Mosquitto (MQTT) and nats-server (NATS) as oracles for the ``mqtt`` and ``nats`` dialects.

Like ``tests.rabbitmq`` for AMQP: the engines claim to match as these brokers route, so tests
subscribe patterns and publish topics through the real servers and compare. Both brokers are
shared with other test runs, so nothing here relies on having them to itself: every run uses a
random client id and run id, and counts only messages whose body carries that run id.

Servers: Mosquitto 2 on ``127.0.0.1:1883`` (anonymous, MQTT v5) and nats-server on
``127.0.0.1:4222`` (no auth).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

import nats
import nats.errors
import paho.mqtt.client as mqtt
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from harness.services import require

MQTT_HOST: Final = "127.0.0.1"
MQTT_PORT: Final = 1883
MQTT_ADDRESS: Final = f"{MQTT_HOST}:{MQTT_PORT}"
NATS_HOST: Final = "127.0.0.1"
NATS_PORT: Final = 4222
NATS_ADDRESS: Final = f"{NATS_HOST}:{NATS_PORT}"

# Mosquitto drops (silently) what does not fit a client's outgoing queue: by default 20 in
# flight plus max_queued_messages=1000. Publishing is paced so that the deliveries that can be
# outstanding at once (every subscription matching every topic of a batch, plus the sentinel's
# copies) stay well below that.
_MQTT_OUTSTANDING_BUDGET: Final = 800
# Topic prefixes Mosquitto treats specially: "$SYS" is read-only for clients and "$share/..."
# filters are shared subscriptions. Neither says anything about plain filter matching.
_MQTT_RESERVED: Final = ("$SYS", "$share")


# --------------------------------------------------------------------------------------- MQTT


def _mqtt_client(client_id: str, timeout: float) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    client.connect_timeout = timeout
    return client


def mqtt_available(timeout: float = 2.0) -> bool:
    """True when an MQTT v5 CONNECT to Mosquitto is accepted within ``timeout`` seconds."""
    client = _mqtt_client(f"topicstore-probe-{uuid.uuid4().hex}", timeout)
    accepted: list[bool] = []
    client.on_connect = lambda _c, _u, _f, rc, _p: accepted.append(not rc.is_failure)
    try:
        client.connect(MQTT_HOST, MQTT_PORT, keepalive=10, clean_start=True)
        deadline = time.monotonic() + timeout
        while not accepted and time.monotonic() < deadline:
            if client.loop(timeout=0.05) != mqtt.MQTT_ERR_SUCCESS:
                return False
        return accepted == [True]
    except OSError:
        return False
    finally:
        client.disconnect()


def require_mqtt() -> None:
    """Skip the calling test (or fixture) when Mosquitto is unreachable; fail it on CI."""
    require(mqtt_available(), f"the MQTT broker (Mosquitto) at {MQTT_ADDRESS}")


def _check_mqtt_args(filters: Sequence[str], topics: Sequence[str]) -> None:
    """Reject what the broker would refuse or treat specially, instead of misreading it."""
    for text in (*filters, *topics):
        if not text or len(text.encode("utf-8")) > 65_535 or "\x00" in text:
            raise ValueError(f"not a valid MQTT topic or filter: {text[:40]!r}")
        if text.startswith(_MQTT_RESERVED):
            raise ValueError(f"{text!r}: Mosquitto reserves {' and '.join(_MQTT_RESERVED)}")
    for topic in topics:
        if "+" in topic or "#" in topic:
            raise ValueError(f"MQTT topic names may not contain wildcards: {topic!r}")


class _MqttRun:
    """State shared with paho's network thread for one ``route_with_mosquitto`` call."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.connack: ReasonCode | None = None
        self.connack_properties: Properties | None = None
        self.disconnected: str | None = None
        self.subacks: dict[int, list[ReasonCode]] = {}
        self.refused: list[str] = []  # PUBACKs with a failure reason code
        self.routed: dict[int, set[int]] = {}  # topic index -> subscription identifiers
        self.sentinels: set[int] = set()

    def on_connect(
        self, _c: mqtt.Client, _u: Any, _f: Any, rc: ReasonCode, props: Properties | None
    ) -> None:
        with self.changed:
            self.connack, self.connack_properties = rc, props
            self.changed.notify_all()

    def on_disconnect(
        self, _c: mqtt.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Properties | None
    ) -> None:
        with self.changed:
            self.disconnected = str(rc)
            self.changed.notify_all()

    def on_subscribe(
        self,
        _c: mqtt.Client,
        _u: Any,
        mid: int,
        codes: list[ReasonCode],
        _p: Properties | None,
    ) -> None:
        with self.changed:
            self.subacks[mid] = codes
            self.changed.notify_all()

    def on_publish(
        self, _c: mqtt.Client, _u: Any, mid: int, rc: ReasonCode, _p: Properties | None
    ) -> None:
        # 0x10 "No matching subscribers" is not a failure; "Not authorized" and the like are.
        if rc.is_failure:
            with self.changed:
                self.refused.append(f"publish mid {mid}: {rc}")
                self.changed.notify_all()

    def on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        run, _, rest = message.payload.decode("utf-8", "replace").partition(":")
        if run != self.run:
            return  # another test run's traffic on the shared broker
        ids = getattr(message.properties, "SubscriptionIdentifier", None) or []
        with self.changed:
            if rest.startswith("done:"):
                self.sentinels.add(int(rest[5:]))
                self.changed.notify_all()
            else:
                self.routed.setdefault(int(rest), set()).update(ids)

    def wait(self, condition: Callable[[], bool], what: str, deadline: float) -> None:
        """Block until ``condition()`` (called under the lock) holds; raise on disconnect or
        when ``deadline`` (``time.monotonic``) passes."""
        with self.changed:
            while not condition():
                if self.disconnected is not None:
                    raise ConnectionError(f"Mosquitto disconnected ({self.disconnected}) {what}")
                if self.refused:
                    raise RuntimeError(f"Mosquitto refused {self.refused[:3]} {what}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"timed out {what}")
                self.changed.wait(min(remaining, 1.0))


def route_with_mosquitto(
    filters: Sequence[str], topics: Sequence[str], *, timeout: float = 60.0
) -> list[set[int]]:
    """For each topic index, the indices of the filters Mosquitto delivers that topic to.

    One MQTT v5 client subscribes every distinct filter at QoS 1 with its own subscription
    identifier, then publishes every topic itself at QoS 1 (No Local is off, so it receives
    its own messages) with body ``"<run id>:<topic index>"``. Each delivery names the matching
    subscription in its Subscription Identifier property; Mosquitto 2 sends one delivery per
    matching subscription, but several ids per delivery are handled too, and ids are
    deduplicated. Repeated filters share one subscription (MQTT replaces a subscription to
    the same filter) and all their indices are reported.

    Topics are not prefixed: a prefix would change the ``$`` rule (``#`` never matches
    ``$x/a`` but ``p/#`` matches ``p/$x/a``). Completion is deterministic: after each batch a
    sentinel goes to a topic only this run subscribes to, and Mosquitto delivers one client's
    messages in order, so the sentinel's arrival means the batch is complete. Batches are
    small enough that the broker's outgoing queue (max_queued_messages, 1000 by default)
    cannot overflow and drop deliveries.
    """
    _check_mqtt_args(filters, topics)
    distinct = list(dict.fromkeys(filters))
    sentinel_id = len(distinct) + 1
    per_batch = (_MQTT_OUTSTANDING_BUDGET - 2 * sentinel_id) // max(len(distinct), 1)
    if per_batch < 1:
        raise ValueError(
            f"{len(distinct)} distinct filters could overflow Mosquitto's outgoing queue"
        )

    run = uuid.uuid4().hex
    sentinel_topic = f"topicstore-test/{run}/done"
    state = _MqttRun(run)
    client = _mqtt_client(f"topicstore-test-{run}", 10.0)
    client.on_connect = state.on_connect
    client.on_disconnect = state.on_disconnect
    client.on_subscribe = state.on_subscribe
    client.on_publish = state.on_publish
    client.on_message = state.on_message
    deadline = time.monotonic() + timeout

    client.connect(MQTT_HOST, MQTT_PORT, keepalive=30, clean_start=True)
    sock = client.socket()
    if isinstance(sock, socket.socket):
        # Each batch ends with a small sentinel written right behind the batch: with Nagle's
        # algorithm it waits for the broker's delayed ACK (~40 ms per batch on Linux).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.loop_start()
    try:
        state.wait(lambda: state.connack is not None, "waiting for CONNACK", deadline)
        assert state.connack is not None
        if state.connack.is_failure:
            raise ConnectionError(f"Mosquitto refused the connection: {state.connack}")
        if getattr(state.connack_properties, "SubscriptionIdentifierAvailable", 1) == 0:
            raise RuntimeError("the broker does not support MQTT v5 subscription identifiers")

        mids: dict[int, str] = {}
        for sub_id, topic_filter in enumerate([*distinct, sentinel_topic], start=1):
            properties = Properties(PacketTypes.SUBSCRIBE)  # type: ignore[no-untyped-call]
            properties.SubscriptionIdentifier = sub_id
            rc, mid = client.subscribe(
                topic_filter, options=SubscribeOptions(qos=1), properties=properties
            )
            if rc != mqtt.MQTT_ERR_SUCCESS or mid is None:
                raise ConnectionError(f"could not send SUBSCRIBE {topic_filter!r}: {rc}")
            mids[mid] = topic_filter
        state.wait(lambda: len(state.subacks) == len(mids), "waiting for SUBACKs", deadline)
        rejected = [
            f"{mids[mid]!r}: {codes}"
            for mid, codes in state.subacks.items()
            if any(code.is_failure for code in codes)
        ]
        if rejected:
            raise RuntimeError(f"Mosquitto rejected subscriptions: {rejected[:5]}")

        for batch, start in enumerate(range(0, len(topics), per_batch)):
            for k in range(start, min(start + per_batch, len(topics))):
                client.publish(topics[k], f"{run}:{k}".encode(), qos=1)
            client.publish(sentinel_topic, f"{run}:done:{batch}".encode(), qos=1)
            state.wait(
                functools.partial(set.__contains__, state.sentinels, batch),
                f"waiting for batch {batch} (topics {start}..) to be delivered",
                deadline,
            )
        client.disconnect()
    finally:
        client.loop_stop()

    with state.lock:
        by_id = {i: sub_id for sub_id, i in enumerate(distinct, start=1)}
        routed_ids = [state.routed.get(k, set()) for k in range(len(topics))]
    stray = set().union(*routed_ids) - set(by_id.values())
    if stray:
        raise AssertionError(f"deliveries carried unknown subscription identifiers {stray}")
    return [
        {i for i, topic_filter in enumerate(filters) if by_id[topic_filter] in ids}
        for ids in routed_ids
    ]


# --------------------------------------------------------------------------------------- NATS


def nats_available(timeout: float = 2.0) -> bool:
    """True when something on the NATS address greets with the protocol's ``INFO`` line."""
    try:
        with socket.create_connection((NATS_HOST, NATS_PORT), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(5) == b"INFO "
    except OSError:
        return False


def require_nats() -> None:
    """Skip the calling test (or fixture) when nats-server is unreachable; fail it on CI."""
    require(nats_available(), f"nats-server at {NATS_ADDRESS}")


def _check_nats_args(patterns: Sequence[str], subjects: Sequence[str]) -> None:
    """Reject what would be a protocol error (or a ``-ERR``) rather than a non-match."""
    for text in (*patterns, *subjects):
        if not text or any(c in text for c in " \t\r\n"):
            raise ValueError(f"not a valid NATS subject or pattern: {text!r}")
    for subject in subjects:
        if any(token in ("*", ">") for token in subject.split(".")):
            raise ValueError(f"NATS subjects to publish may not contain wildcards: {subject!r}")


async def _route_with_nats(
    patterns: Sequence[str], subjects: Sequence[str], run: str
) -> list[set[int]]:
    errors: list[str] = []

    async def on_error(error: Exception) -> None:
        errors.append(f"{type(error).__name__}: {error}")

    options: dict[str, Any] = {}
    # nats-py >= 2.1x validates subscribe subjects itself and rejects tokens such as "a*"
    # that the server accepts as literals; the server must be the judge here.
    if "skip_subject_validation" in inspect.signature(NatsClient.connect).parameters:
        options["skip_subject_validation"] = True
    nc = await nats.connect(
        f"nats://{NATS_ADDRESS}",
        name=f"topicstore-test-{run}",
        allow_reconnect=False,
        connect_timeout=5,
        error_cb=on_error,
        **options,
    )
    try:
        sentinel = await nc.subscribe(f"_topicstore_test.{run}.done")
        subs: list[Subscription] = [await nc.subscribe(pattern) for pattern in patterns]
        for k, subject in enumerate(subjects):
            await nc.publish(subject, f"{run}:{k}".encode())
        # Not nc.flush(): nats-py 2.16 writes its PING ahead of still-buffered PUBs, so the
        # PONG can come back before they were even sent. The sentinel is buffered after every
        # PUB, and the server delivers one connection's messages in order, so once it is
        # parsed every earlier delivery already sits in its subscription's queue.
        await nc.publish(f"_topicstore_test.{run}.done", f"{run}:done".encode())
        while True:
            msg = await sentinel.next_msg(timeout=30)
            if msg.data == f"{run}:done".encode():
                break
        if errors:
            raise RuntimeError(f"NATS reported errors: {errors[:5]}")

        routed: list[set[int]] = [set() for _ in subjects]
        for i, sub in enumerate(subs):
            seen: list[Msg] = []
            while sub.pending_msgs:
                seen.append(await sub.next_msg(timeout=5))
            for msg in seen:
                got_run, _, rest = msg.data.decode("utf-8", "replace").partition(":")
                if got_run != run or rest == "done":
                    continue  # another run's traffic, or our sentinel matched by a pattern
                k = int(rest)
                if i in routed[k]:
                    raise AssertionError(f"{subjects[k]!r} delivered twice to {patterns[i]!r}")
                routed[k].add(i)
        if errors:
            raise RuntimeError(f"NATS reported errors: {errors[:5]}")
        return routed
    finally:
        await nc.close()


def route_with_nats(
    patterns: Sequence[str], subjects: Sequence[str], *, timeout: float = 60.0
) -> list[set[int]]:
    """For each subject index, the indices of the patterns nats-server delivers it to.

    One connection, one subscription per pattern (repeats included), every subject
    published once with body ``"<run id>:<subject index>"``, then a sentinel on a subject
    unique to this run; its arrival proves every earlier delivery has arrived. Subjects are
    not prefixed, so other runs' traffic may reach a ``>`` subscription: the body filters it.
    Client-side subject validation is off, so the server alone decides what matches.
    """
    _check_nats_args(patterns, subjects)
    run = uuid.uuid4().hex
    return asyncio.run(asyncio.wait_for(_route_with_nats(patterns, subjects, run), timeout=timeout))


# ------------------------------------------------------------------- shared subscriptions


def share_with_mosquitto(
    filters: Sequence[str], topics: Sequence[str], *, timeout: float = 60.0
) -> list[set[int]]:
    """For each topic index, the indices of the filters whose client received it, with one
    MQTT v5 client per filter (shared subscriptions, ``$share/{group}/{filter}``, balance
    between sessions, so each member must be a session of its own).

    A separate client publishes every topic at QoS 1 with body ``"<run id>:<index>"``, then
    a sentinel on a topic every client also subscribes to; Mosquitto delivers one client's
    messages in order, so a client has everything meant for it once its sentinel arrives.
    Topics should carry a per-run prefix: shared groups with another run's members would
    take this run's messages.
    """
    run = uuid.uuid4().hex
    sentinel_topic = f"topicstore-test/{run}/done"
    deadline = time.monotonic() + timeout
    states: list[_MqttRun] = []
    clients: list[mqtt.Client] = []
    try:
        for i, topic_filter in enumerate([*filters, None]):
            state = _MqttRun(run)
            client = _mqtt_client(f"topicstore-share-{run}-{i}", 10.0)
            client.on_connect = state.on_connect
            client.on_disconnect = state.on_disconnect
            client.on_subscribe = state.on_subscribe
            client.on_publish = state.on_publish
            client.on_message = state.on_message
            client.connect(MQTT_HOST, MQTT_PORT, keepalive=30, clean_start=True)
            client.loop_start()
            states.append(state)
            clients.append(client)
            state.wait(lambda s=state: s.connack is not None, "waiting for CONNACK", deadline)  # type: ignore[misc]
            if topic_filter is None:
                break  # the publisher
            for sub_id, text in enumerate((topic_filter, sentinel_topic), start=1):
                properties = Properties(PacketTypes.SUBSCRIBE)  # type: ignore[no-untyped-call]
                properties.SubscriptionIdentifier = sub_id
                client.subscribe(text, options=SubscribeOptions(qos=1), properties=properties)
            state.wait(lambda s=state: len(s.subacks) == 2, "waiting for SUBACKs", deadline)  # type: ignore[misc]
            refused = [c for codes in state.subacks.values() for c in codes if c.is_failure]
            if refused:
                raise RuntimeError(f"Mosquitto refused {topic_filter!r}: {refused}")
        publisher = clients[-1]
        for k, topic in enumerate(topics):
            publisher.publish(topic, f"{run}:{k}".encode(), qos=1)
            if k % 200 == 199:  # keep each client's outgoing queue far from its limit
                time.sleep(0.05)
        publisher.publish(sentinel_topic, f"{run}:done:0".encode(), qos=1)
        for state in states[:-1]:
            state.wait(lambda s=state: 0 in s.sentinels, "waiting for the sentinel", deadline)  # type: ignore[misc]
    finally:
        for client in clients:
            client.disconnect()
            client.loop_stop()
    received: list[set[int]] = [set() for _ in topics]
    for i, state in enumerate(states[:-1]):
        for k in state.routed:
            received[k].add(i)
    return received


async def _share_with_nats(
    subscriptions: Sequence[tuple[str, str | None]], subjects: Sequence[str], run: str
) -> list[set[int]]:
    nc = await nats.connect(
        f"nats://{NATS_ADDRESS}", name=f"topicstore-share-{run}", allow_reconnect=False
    )
    try:
        sentinel = await nc.subscribe(f"_topicstore_test.{run}.done")
        subs = [await nc.subscribe(subject, queue=queue or "") for subject, queue in subscriptions]
        for k, subject in enumerate(subjects):
            await nc.publish(subject, f"{run}:{k}".encode())
        await nc.publish(f"_topicstore_test.{run}.done", f"{run}:done".encode())
        while (await sentinel.next_msg(timeout=30)).data != f"{run}:done".encode():
            pass
        received: list[set[int]] = [set() for _ in subjects]
        for i, sub in enumerate(subs):
            while sub.pending_msgs:
                msg = await sub.next_msg(timeout=5)
                got_run, _, rest = msg.data.decode("utf-8", "replace").partition(":")
                if got_run == run and rest != "done":
                    received[int(rest)].add(i)
        return received
    finally:
        await nc.close()


def share_with_nats(
    subscriptions: Sequence[tuple[str, str | None]],
    subjects: Sequence[str],
    *,
    timeout: float = 60.0,
) -> list[set[int]]:
    """For each subject index, the indices of the (subject, queue group or None)
    subscriptions nats-server delivered it to (queue subscribe: one member per group)."""
    run = uuid.uuid4().hex
    return asyncio.run(
        asyncio.wait_for(_share_with_nats(subscriptions, subjects, run), timeout=timeout)
    )
