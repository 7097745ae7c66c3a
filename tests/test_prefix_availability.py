"""When a cache entry exists (Anthropic documents that an entry becomes available only once
the first response begins; the same is assumed for every provider, so a request counts as a
cache source only from its first response byte):

- a request the provider refused (an HTTP error, or no response at all) never wrote one, so its
  retry expects no read and is no provider_miss, yet it stays in its conversation;
- a request whose response began (HTTP 200, even a stream cut later) did write one;
- requests sent before an earlier one's first byte cannot read it (parallel fan-out), while an
  older entry that was there still can be read;
- an entry's lifetime counts from when it became available."""

from __future__ import annotations

from pathlib import Path

from test_prefix_support import (
    ANTHROPIC,
    BIG,
    DEEPSEEK,
    KEY,
    anthropic,
    at,
    chat,
    cut_stream,
    deepseek,
    openai_read,
    refused,
    system,
    tokens,
    turns,
    user,
    warehouse,
)

S = system("Err scenario. " + BIG)
M1 = [S, user("q err")]
M2 = [*M1, {"role": "assistant", "content": "ok"}, user("q2")]


def test_a_retry_after_a_rate_limit_expects_no_read_and_is_no_provider_miss(
    tmp_path: Path,
) -> None:
    got = turns(
        warehouse(
            tmp_path,
            [
                refused(at(0), "e429", {"model": "gpt-4.1-2025-04-14", "messages": M1}),
                chat(at(2), "retry", M1, read=0),
                chat(at(30), "next", M2, read=openai_read(tokens(*M1))),
            ],
        )
    )
    assert (got["retry"]["expected_read_tokens"], got["retry"]["cause"]) == (0, None)
    # the refused request stays in the conversation; the retry and the next turn read as allowed
    assert got["retry"]["conversation_id"] == got["e429"]["conversation_id"] == "e429"
    assert got["next"]["expected_read_tokens"] == got["next"]["cache_read_tokens"] > 0
    assert got["next"]["cause"] is None


def test_a_request_that_got_no_response_at_all_left_no_cache_entry(tmp_path: Path) -> None:
    got = turns(
        warehouse(
            tmp_path,
            [
                refused(
                    at(0), "lost", {"model": "gpt-4.1-2025-04-14", "messages": M1}, status=None
                ),
                chat(at(5), "retry", M1, read=0),
            ],
        )
    )
    assert (got["retry"]["expected_read_tokens"], got["retry"]["cause"]) == (0, None)


def test_an_anthropic_retry_after_overloaded_expects_no_read(tmp_path: Path) -> None:
    blocks = [{"type": "text", "text": "Err. " + BIG, "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "q err"}]}]
    body = {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 100,
        "system": blocks,
        "messages": messages,
    }
    n, written = tokens(blocks[0], *messages), tokens(blocks[0])
    got = turns(
        warehouse(
            tmp_path,
            [
                refused(at(0), "a529", body, url=ANTHROPIC, status=529, header=("x-api-key", KEY)),
                anthropic(at(2), "retry", blocks, messages, uncached=n - written, write=written),
            ],
        )
    )
    assert (got["retry"]["expected_read_tokens"], got["retry"]["cause"]) == (0, None)


def test_a_stream_cut_after_its_first_chunk_did_write_the_cache(tmp_path: Path) -> None:
    got = turns(
        warehouse(
            tmp_path,
            [
                cut_stream(at(0), "cut", M1),
                chat(at(20), "retry", M1, read=openai_read(tokens(*M1))),
            ],
        )
    )
    assert got["retry"]["expected_read_tokens"] == openai_read(tokens(*M1)) > 0
    assert got["retry"]["cause"] is None


def test_a_refused_request_does_not_make_a_deepseek_shared_prefix_unit(tmp_path: Path) -> None:
    # DeepSeek persists a prefix two requests shared (DeepSeek's context-caching guide); a refused
    # request was never seen, so one processed request and one refused leave no such unit
    shared = system("Shared. " + BIG)
    refused_second = [
        deepseek(at(0), "a", [shared, user("q1")]),
        refused(at(10), "b", {"model": "deepseek-chat", "messages": [shared, user("q2")]},
                url=DEEPSEEK),
        deepseek(at(20), "c", [shared, user("q3")]),
    ]  # fmt: skip
    assert turns(warehouse(tmp_path / "refused", refused_second))["c"]["expected_read_tokens"] == 0
    processed_second = [
        deepseek(at(0), "a", [shared, user("q1")]),
        deepseek(at(10), "b", [shared, user("q2")]),
        deepseek(at(20), "c", [shared, user("q3")]),
    ]
    processed = turns(warehouse(tmp_path / "processed", processed_second))
    assert processed["c"]["expected_read_tokens"] > 2000


MAP = system("Map step. Summarise the chunk. " + BIG)


def _chunk(i: int) -> list[dict[str, str]]:
    return [MAP, user(f"Chunk {i}: " + "text " * 50)]


def test_parallel_requests_sent_before_the_first_byte_do_not_expect_each_others_prefix(
    tmp_path: Path,
) -> None:
    lines = [
        chat(at(i * 0.03), f"map-{i}", _chunk(i), first_byte_ms=600.0, end_ms=900.0)
        for i in range(6)
    ]
    # one more once they have answered (the last first byte at 750 ms): it can read the prompt
    lines.append(chat(at(0.8), "late", _chunk(9), read=openai_read(tokens(MAP))))
    got = turns(warehouse(tmp_path, lines))
    assert [got[f"map-{i}"]["expected_read_tokens"] for i in range(6)] == [0] * 6
    assert got["late"]["expected_read_tokens"] == openai_read(tokens(MAP)) > 0


def test_without_a_first_byte_time_the_end_of_the_response_makes_the_entry_available(
    tmp_path: Path,
) -> None:
    lines = [
        chat(at(0), "a", _chunk(0), end_ms=900.0),
        chat(at(0.5), "during", _chunk(1)),
        chat(at(1.0), "after", _chunk(2), read=openai_read(tokens(MAP))),
    ]
    got = turns(warehouse(tmp_path, lines))
    assert got["during"]["expected_read_tokens"] == 0
    assert got["after"]["expected_read_tokens"] == openai_read(tokens(MAP))


def test_an_older_entry_is_still_read_while_the_request_just_before_has_not_answered(
    tmp_path: Path,
) -> None:
    lines = [
        chat(at(0), "planner", _chunk(0), first_byte_ms=100.0),
        # a minute later two parallel requests: the second starts before the first answers
        chat(at(60), "first", _chunk(1), read=openai_read(tokens(MAP)), first_byte_ms=600.0),
        chat(at(60.1), "second", _chunk(2), read=openai_read(tokens(MAP)), first_byte_ms=600.0),
    ]
    got = turns(warehouse(tmp_path, lines))
    assert got["second"]["expected_read_tokens"] == openai_read(tokens(MAP)) > 0


def test_a_cache_lifetime_counts_from_when_the_entry_became_available(tmp_path: Path) -> None:
    # OpenAI keeps an unused prefix 600 s (pipeline/rules/cache_rules.csv). The first answer's
    # first byte came 30 s after it started; the next turn comes 620 s after that start, so
    # 590 s after the entry was there: still alive, the read is expected and nothing expired
    lines = [
        chat(at(0), "slow", M1, first_byte_ms=30_000.0, end_ms=31_000.0),
        chat(at(620), "next", M2, read=openai_read(tokens(*M1))),
    ]
    got = turns(warehouse(tmp_path, lines))
    assert got["next"]["expected_read_tokens"] == openai_read(tokens(*M1)) > 0
    assert got["next"]["cause"] is None


def test_a_turn_less_than_a_millisecond_past_the_lifetime_is_an_expiry_in_every_view(
    tmp_path: Path,
) -> None:
    # request_prefix measures lifetimes in microseconds; cache_breaks once measured idle time in
    # whole milliseconds, so a turn 0.5 ms past the 600 s lifetime was expired for the one
    # (nothing expected) and had no cause at all in the other
    lines = [
        chat(at(0), "first", M1, first_byte_ms=1_000.0, end_ms=2_000.0),
        chat(at(601.0005), "late", M2, read=0),
    ]
    got = turns(warehouse(tmp_path, lines))
    assert got["late"]["expected_read_tokens"] == 0
    assert got["late"]["cause"] == "expired"
