"""SSE, JSON-array and AWS event-stream framing."""

from __future__ import annotations

import zlib

import pytest
from conftest import SAMPLES

from pipeline.eventstream import EventStreamError, encode_message, iter_eventstream
from pipeline.streams import iter_json_array, iter_sse, looks_like_sse


def test_sse_events_split_on_blank_lines_with_lf_crlf_and_cr() -> None:
    body = b"data: a\n\ndata: b\r\n\r\ndata: c\r\rdata:d"
    events = list(iter_sse(body))
    assert [e.data for e in events] == [b"a", b"b", b"c", b"d"]
    # Offsets: just past each event's blank line; the last event (no blank line) ends at EOF.
    assert [e.end for e in events] == [9, 20, 29, len(body)]


def test_sse_comments_and_keepalives_are_ignored_and_event_names_kept() -> None:
    body = b': keep-alive\n\n: OPENROUTER PROCESSING\n\nevent: error\ndata: {"x":1}\n\n'
    events = list(iter_sse(body))
    assert len(events) == 1
    assert events[0].event == "error"
    assert events[0].data == b'{"x":1}'


def test_multi_line_data_fields_are_joined_with_newlines() -> None:
    events = list(iter_sse(b"data: one\ndata: two\n\n"))
    assert events[0].data == b"one\ntwo"


def test_data_without_a_space_after_the_colon_is_read_the_same() -> None:
    assert next(iter_sse(b"data:{}\n\n")).data == b"{}"


def test_trailing_spaces_after_a_json_payload_stay_in_data_but_do_not_break_parsing() -> None:
    ev = next(iter_sse(b'data: {"a":1}      \n\n'))
    assert ev.data.strip() == b'{"a":1}'


def test_looks_like_sse_after_leading_blank_lines() -> None:
    assert looks_like_sse(b"\n\n: ping\n\ndata: {}\n\n")
    assert not looks_like_sse(b'\n\n{"id": 1}')


def test_json_array_elements_with_byte_offsets_and_braces_inside_strings() -> None:
    body = b'[{"a":"}{\\"]"},\r\n{"b":[1,2]}\n]'
    items = list(iter_json_array(body))
    assert [v for v, _ in items] == [{"a": '}{"]'}, {"b": [1, 2]}]
    assert items[0][1] == body.index(b",")
    assert items[1][1] == body.rindex(b"}") + 1


def test_a_truncated_json_array_yields_the_complete_elements_only() -> None:
    assert [v for v, _ in iter_json_array(b'[{"a":1},{"b":')] == [{"a": 1}]


def test_the_bedrock_sample_event_stream_decodes_every_message_with_valid_crcs() -> None:
    body = (SAMPLES / "bedrock_converse_stream.eventstream").read_bytes()
    messages = list(iter_eventstream(body))
    kinds = [m.header(":event-type") for m in messages]
    assert kinds[0] == "messageStart"
    assert kinds[-2:] == ["messageStop", "metadata"]
    assert messages[-1].end == len(body)
    assert all(m.header(":message-type") == "event" for m in messages)


def test_an_event_stream_cut_mid_message_ends_quietly_after_the_good_messages() -> None:
    one = encode_message({":message-type": "event", ":event-type": "a"}, b"{}")
    two = encode_message({":message-type": "event", ":event-type": "b"}, b'{"x":1}')
    messages = list(iter_eventstream(one + two[:-5]))
    assert [m.header(":event-type") for m in messages] == ["a"]


def test_a_corrupted_event_stream_message_raises() -> None:
    msg = bytearray(encode_message({":event-type": "a"}, b'{"x":1}'))
    msg[-6] ^= 0xFF  # flip a payload byte: the message CRC no longer matches
    with pytest.raises(EventStreamError):
        list(iter_eventstream(bytes(msg)))


def test_encode_message_matches_the_aws_layout() -> None:
    msg = encode_message({"k": "v"}, b"P")
    headers = b"\x01k\x07\x00\x01v"
    assert int.from_bytes(msg[:4], "big") == 12 + len(headers) + 1 + 4
    assert int.from_bytes(msg[4:8], "big") == len(headers)
    assert int.from_bytes(msg[8:12], "big") == zlib.crc32(msg[:8])
    assert msg[12:-4] == headers + b"P"
