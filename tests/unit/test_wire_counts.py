"""The bench's statement counter reads the frontend protocol's message headers: whatever
pieces the bytes arrive in, it counts the same messages and forwards every byte unchanged;
it refuses encryption itself, so the headers stay readable."""

from __future__ import annotations

import struct

from bench.wire import GSSENC_REQUEST, SSL_REQUEST, FrontendStream, WireCounts


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


STARTUP = (lambda body: struct.pack("!I", len(body) + 4) + body)(
    struct.pack("!I", 196608) + b"user\0postgres\0database\0test\0\0"
)
SESSION = STARTUP + b"".join(
    [
        message(b"Q", b"BEGIN\0"),
        message(b"P", b"\0SELECT $1\0\0\0"),
        message(b"B", b"\0\0" + bytes(12)),
        message(b"E", b"\0\0\0\0\0"),
        message(b"S"),
        message(b"B", b"\0\0" + bytes(300)),  # longer than a header split across pieces
        message(b"E", b"\0\0\0\0\0"),
        message(b"S"),
        message(b"Q", b"COMMIT\0"),
        message(b"X"),
    ]
)


def feed_in_pieces(data: bytes, size: int) -> tuple[WireCounts, bytes, bytes]:
    counts = WireCounts()
    stream = FrontendStream(counts)
    forwarded, replies = [], []
    for i in range(0, len(data), size):
        forward, reply = stream.feed(data[i : i + size])
        forwarded.append(forward)
        replies.append(reply)
    return counts, b"".join(forwarded), b"".join(replies)


def test_counts_the_same_messages_whatever_pieces_the_bytes_come_in() -> None:
    for size in (1, 2, 3, 5, 7, 64, len(SESSION)):
        counts, forwarded, replies = feed_in_pieces(SESSION, size)
        assert forwarded == SESSION, size
        assert replies == b""
        assert counts.messages == {"Q": 2, "P": 1, "B": 2, "E": 2, "S": 2, "X": 1}, size
        assert (counts.statements, counts.round_trips) == (4, 4)
        assert counts.to_server == len(SESSION)


def test_answers_a_request_for_encryption_itself_and_forwards_the_rest() -> None:
    for code in (SSL_REQUEST, GSSENC_REQUEST):
        request = struct.pack("!II", 8, code)
        for size in (1, 3, len(request)):
            counts = WireCounts()
            stream = FrontendStream(counts)
            replies = b"".join(
                stream.feed(request[i : i + size])[1] for i in range(0, len(request), size)
            )
            assert replies == b"N"  # not supported: the client goes on in plain text
            forward, reply = stream.feed(SESSION)
            assert (forward, reply) == (SESSION, b"")
            assert counts.statements == 4


def test_the_totals_of_two_moments_subtract() -> None:
    before, _, _ = feed_in_pieces(SESSION, 10)
    after, _, _ = feed_in_pieces(SESSION + SESSION[len(STARTUP) :], 10)
    assert after.statements == 8
    assert after.minus(before).statements == 4
    assert after.minus(before).to_server == len(SESSION) - len(STARTUP)
