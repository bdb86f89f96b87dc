"""The HTTP connection itself: uvicorn's httptools protocol with three guards uvicorn lacks,
and responses that leave in one send.

* A request deadline: its headers and body must arrive within ``request_timeout_s`` of
  the connection opening (or, on a kept-alive connection, of the request's first byte).
  uvicorn times out only idle kept-alive connections; a client that connects and sends
  nothing, or half a request, was held forever (65 s+ in the issue), and enough of them
  used up the process's file descriptors. Past the deadline the client gets a 408 in the
  error envelope (when no response has started) and the connection is closed.
* A connection cap, ``max_connections`` (kept below the file-descriptor limit): a new
  connection over the cap closes the connection that has waited longest for its request
  (an idle kept-alive one, or the slowest sender: a 503 ``too_many_connections`` to that
  one), so a new client, a health probe, always gets in; only when every connection is
  busy with a request in the application is the newcomer answered 503 at once. Without it
  ``accept()`` failed with EMFILE at the descriptor limit and the listening socket stopped
  taking connections, health probes included.
* The parser's own refusals (bytes that are not HTTP/1.1) answer 400 in the envelope, not
  uvicorn's plain text.
* One send per response (``OneSend``): uvicorn writes a response's head and its body in two
  ``send()`` calls. On loopback each send delivers to the client inside the call and wakes
  it, and on a busy machine the woken client may take the core from the sending thread while
  that thread holds the GIL: under write churn the head's send was the largest single
  holder of the writing replica's GIL (py-spy ``--gil``). The head now waits for the body's
  first part, or for the end of the event loop's turn, whichever comes first.

Parameters are class attributes set once per process by ``configure`` (each worker of
``topicstore serve --workers N`` configures its own from the settings)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar, Final

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

log = logging.getLogger(__name__)


#: How long a connection we answered and closed keeps reading (and dropping) what the client
#: still sends: see ``GuardedHttpProtocol._linger``.
LINGER_S: Final = 2.0


class OneSend:
    """The transport as one request's cycle sees it: the response's head (the first write
    once the response has started) is held and sent with the next write, the body's first
    part, in one ``send()``; if none comes within this turn of the event loop (a streamed
    body whose first part takes time), it is sent alone at the end of the turn. A close
    sends what is held first, so the client sees exactly the bytes it saw before."""

    __slots__ = ("_cycle", "_head", "_loop", "_sent_head", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: Any, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._cycle = cycle
        self._loop = loop
        self._head: bytes | None = None
        self._sent_head = False

    def write(self, data: bytes) -> None:
        if self._head is not None:
            data, self._head = self._head + data, None
        elif not self._sent_head and self._cycle.response_started:
            self._head, self._sent_head = data, True
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        head, self._head = self._head, None
        # A transport closed meanwhile takes nothing (uvloop raises once it is closed).
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


def raw_response(status: int, code: str, message: str, extra: bytes = b"") -> bytes:
    """A complete HTTP/1.1 response in the error envelope that closes the connection, for
    the moments no application is there to answer."""
    body = orjson.dumps({"error": {"code": code, "message": message}})
    return b"".join(
        [
            STATUS_LINE[status],
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n",
            extra,
            b"\r\n",
            body,
        ]
    )


#: Per server: connections waiting for (the rest of) a request, oldest first.
_WAITING: dict[int, dict[GuardedHttpProtocol, None]] = {}


def _waiting(state: ServerState) -> dict[GuardedHttpProtocol, None]:
    return _WAITING.setdefault(id(state), {})


class GuardedHttpProtocol(HttpToolsProtocol):
    """See the module docstring."""

    request_timeout_s: ClassVar[float] = 10.0
    max_connections: ClassVar[int] = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False
        self._in_request = False
        self._lingering = False

    # -- the cap ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        waiting = _waiting(self.server_state)
        if len(self.connections) >= self.max_connections:
            oldest = next(iter(waiting), None)
            if oldest is None:  # every connection is busy in the app: refuse this one
                self.transport = transport
                self._refused = True
                transport.write(
                    raw_response(
                        503,
                        "too_many_connections",
                        f"the server holds its maximum of {self.max_connections} connections",
                        b"retry-after: 1\r\n",
                    )
                )
                self._linger()
                return
            oldest._shed()
        super().connection_made(transport)
        self._wait()

    def _shed(self) -> None:
        """Make room for a newer connection: close this one, which has waited longest."""
        self._stop_waiting()
        if not self._in_request and self.cycle is not None:  # idle after a response
            self.transport.close()
            return
        self._answer_and_close(
            raw_response(
                503,
                "too_many_connections",
                "the server is at its connection limit and this request was the slowest",
                b"retry-after: 1\r\n",
            )
        )

    # -- the deadline -------------------------------------------------------------------

    def _wait(self) -> None:
        _waiting(self.server_state)[self] = None
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.request_timeout_s, self._timed_out)

    def _stop_waiting(self) -> None:
        _waiting(self.server_state).pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        self._stop_waiting()
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()
            return
        self._answer_and_close(
            raw_response(
                408,
                "request_timeout",
                f"the request did not arrive within {self.request_timeout_s:g} s",
            )
        )

    def _answer_and_close(self, response: bytes) -> None:
        if self.cycle is not None and not self.cycle.response_complete:
            # The application waits for the body: it is told the client is gone, and
            # whatever it sends now is dropped instead of following our answer.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(response)
            self._linger()

    def _linger(self) -> None:
        """Close after an answer of ours without losing it: half-close (FIN after the
        answer), then read and drop what the client still sends until it closes, for at
        most ``LINGER_S``. Closing outright while a slow client is still sending makes the
        kernel answer its next bytes with a reset, and a reset empties the client's receive
        buffer, answer included (2 of 300 shed clients saw a reset instead of the 503)."""
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._lingering:
            super().data_received(data)

    def eof_received(self) -> None:
        """The client closed its side: once we are lingering, that is the end of it (the
        transport closes when this returns a false value)."""
        if not self._lingering:
            super().eof_received()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = OneSend(self.transport, cycle, self.loop)  # type: ignore[assignment]

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_request = True
        self._wait()  # a kept-alive connection's next request starts its own deadline

    def on_message_complete(self) -> None:
        self._in_request = False
        self._stop_waiting()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            _waiting(self.server_state)[self] = None  # idle now: first to go when full

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        if self._refused:
            return
        super().connection_lost(exc)

    # -- the parser's refusals ----------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        self._stop_waiting()
        self.transport.write(raw_response(400, "invalid_http", "the request is not valid HTTP/1.1"))
        self.transport.close()


def configure(request_timeout_s: float, max_connections: int) -> None:
    """Set the guards for every connection this process accepts."""
    GuardedHttpProtocol.request_timeout_s = request_timeout_s
    GuardedHttpProtocol.max_connections = max_connections
