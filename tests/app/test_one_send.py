"""A response leaves in one send: ``app.connections.OneSend`` holds the head until the
body's first part (or the end of the event loop's turn), over a real socket pair and
uvicorn's own request cycle."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.connections import OneSend

Run = Callable[[RequestResponseCycle, socket.socket, list[bytes]], Awaitable[None]]


class Sends:
    """The socket's transport, recording each write it passes on (one ``send()`` each)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def close(self) -> None:
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


def _cycle(transport: asyncio.Transport) -> RequestResponseCycle:
    log = logging.getLogger(__name__)
    return RequestResponseCycle(
        scope={"type": "http", "method": "GET", "path": "/", "http_version": "1.1"},  # type: ignore[typeddict-item]
        transport=transport,
        flow=FlowControl(transport),
        logger=log,
        access_logger=log,
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )


def _with_cycle(body: Run) -> None:
    async def main() -> None:
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(
            asyncio.Protocol, ours
        )
        sends = Sends(transport)
        cycle = _cycle(transport)
        cycle.transport = OneSend(sends, cycle, asyncio.get_running_loop())  # type: ignore[arg-type, assignment]
        try:
            await body(cycle, theirs, sends.writes)
        finally:
            transport.close()
            theirs.close()

    asyncio.run(main())


async def _received(peer: socket.socket) -> bytes:
    await asyncio.sleep(0.05)
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b""


START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}


def test_head_and_body_arrive_together() -> None:
    async def body(cycle: RequestResponseCycle, peer: socket.socket, sends: list[bytes]) -> None:
        await cycle.send(START)  # type: ignore[arg-type]
        await cycle.send({"type": "http.response.body", "body": b"ok"})
        data = await _received(peer)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
        assert data.endswith(b"\r\n\r\nok"), data
        assert sends == [data]

    _with_cycle(body)


def test_a_late_body_does_not_hold_the_head() -> None:
    async def body(cycle: RequestResponseCycle, peer: socket.socket, sends: list[bytes]) -> None:
        await cycle.send(START)  # type: ignore[arg-type]
        head = await _received(peer)  # the loop turned: the head went alone
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n"), head
        await cycle.send({"type": "http.response.body", "body": b"ok"})
        assert await _received(peer) == b"ok"
        assert sends == [head, b"ok"]

    _with_cycle(body)


def test_a_close_sends_what_is_held() -> None:
    async def body(cycle: RequestResponseCycle, peer: socket.socket, sends: list[bytes]) -> None:
        await cycle.send(START)  # type: ignore[arg-type]
        assert sends == []  # held
        cycle.transport.close()
        assert (await _received(peer)).startswith(b"HTTP/1.1 200 OK\r\n")
        assert len(sends) == 1

    _with_cycle(body)
