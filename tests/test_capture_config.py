"""Routing several upstreams by path prefix or Host header, and the config file's errors."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from fixtures.capture.fake_upstream import FakeUpstream
from fixtures.capture.harness import capture_lines, serving

from pipeline.capture.config import (
    ProxyConfig,
    UpstreamRoute,
    load_config,
    parse_listen,
    upstream_route,
)
from pipeline.capture.proxy import CaptureProxy, ProxyOptions
from pipeline.capture.writer import CaptureWriter
from pipeline.errors import InputError, UsageError

CONFIG = """
listen = "127.0.0.1:9999"
out = "captures"

[[upstream]]
prefix = "/deepseek"
url = "https://api.deepseek.com"

[[upstream]]
prefix = "/deepseek/beta"
url = "https://api.deepseek.com/beta"

[[upstream]]
host = "anthropic.localhost"
url = "https://api.anthropic.com"
agent = "claude-code"

[[upstream]]
url = "https://api.openai.com/"
"""


def _config(tmp_path: Path, text: str = CONFIG) -> ProxyConfig:
    path = tmp_path / "upstreams.toml"
    path.write_text(text)
    return load_config(path)


def _target(cfg: ProxyConfig, path: str, host: str = "127.0.0.1:8787", query: str = "") -> str:
    route = cfg.route_for(path, host)
    assert route is not None
    return route.target(path, query)


def test_the_longest_prefix_wins_and_is_stripped(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert (cfg.listen, cfg.out) == ("127.0.0.1:9999", "captures")
    assert _target(cfg, "/deepseek/chat/completions") == "https://api.deepseek.com/chat/completions"
    assert (
        _target(cfg, "/deepseek/beta/completions", query="x=1")
        == "https://api.deepseek.com/beta/completions?x=1"
    )
    assert _target(cfg, "/deepseekx/v1/models") == "https://api.openai.com/deepseekx/v1/models"
    assert _target(cfg, "/v1/chat/completions") == "https://api.openai.com/v1/chat/completions"


def test_a_host_header_route_beats_a_prefix_route(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert (
        _target(cfg, "/v1/messages", host="anthropic.localhost:8787")
        == "https://api.anthropic.com/v1/messages"
    )
    route = cfg.route_for("/deepseek/x", "anthropic.localhost")
    assert route is not None and route.agent == "claude-code"


def test_without_a_catch_all_an_unrouted_path_has_no_upstream() -> None:
    cfg = ProxyConfig(routes=[UpstreamRoute(url="https://api.deepseek.com", prefix="/deepseek")])
    assert cfg.route_for("/v1/chat/completions", None) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("listen = 1", "no [[upstream]] entries"),
        ('[[upstream]]\nprefix = "/x"', "needs url"),
        ('[[upstream]]\nurl = "ftp://x"', "is not an http(s) URL"),
        ('[[upstream]]\nurl = "https://x"\nprefix = "x"', "must start with /"),
        ('[[upstream]]\nurl = "https://x"\nhots = "y"', "unknown keys ['hots']"),
        ("[[upstream]\n", "not valid TOML"),
    ],
)
def test_a_bad_config_is_an_input_error_that_says_what_is_wrong(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        _config(tmp_path, text)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("url", "shown", "message"),
    [
        (
            "http://user:PLANTEDPW22@127.0.0.1:18804",
            "'http://***@127.0.0.1:18804'",
            "must not have a user name or password",
        ),
        (
            "https://PLANTEDTOKEN22@api.example.com/v1",
            "'https://***@api.example.com/v1'",
            "must not have a user name or password",
        ),
        (
            "http://127.0.0.1:18804/?key=PLANTEDUPKEY23",
            "'http://127.0.0.1:18804/?...'",
            "must not have a query or fragment",
        ),
        ("https://api.example.com/v1#PLANTEDFRAG", "'https://api.example.com/v1#...'", "fragment"),
        ("ftp://u:PLANTEDPW@h/?key=PLANTEDKEY", "'ftp://***@h/?...'", "not an http(s) URL"),
        ("user:PLANTEDPW@api.example.com", "'***@api.example.com'", "not an http(s) URL"),
    ],
)
def test_a_refused_upstream_url_is_named_without_its_password_or_query(
    tmp_path: Path, url: str, shown: str, message: str
) -> None:
    toml = tmp_path / "upstreams.toml"
    toml.write_text(f'[[upstream]]\nurl = "{url}"\n')
    for refuse in (lambda: upstream_route(url), lambda: load_config(toml)):
        with pytest.raises(InputError) as caught:
            refuse()
        text = f"{caught.value.message} {caught.value.hint}"
        assert "PLANTED" not in text
        assert shown in text and message in text


def test_upstream_credentials_are_refused_with_a_hint_to_send_them_from_the_client() -> None:
    # The forwarding client would turn them into Basic auth, replacing each client's own
    # Authorization header (its API key): refused, so nothing is silently rewritten.
    with pytest.raises(InputError) as caught:
        upstream_route("http://user:pw@127.0.0.1:18804/v1")
    assert caught.value.hint is not None and "from the client" in caught.value.hint


def test_listen_addresses_parse_and_bad_ones_are_usage_errors() -> None:
    assert parse_listen("127.0.0.1:8787") == ("127.0.0.1", 8787)
    assert parse_listen(":9000") == ("127.0.0.1", 9000)
    assert parse_listen("[::1]:9000") == ("::1", 9000)
    assert parse_listen("0.0.0.0:0") == ("0.0.0.0", 0)
    for bad in ("127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(UsageError):
            parse_listen(bad)


def test_a_bare_listen_port_means_loopback_and_a_host_without_a_port_is_refused() -> None:
    assert parse_listen("18903") == ("127.0.0.1", 18903)
    assert parse_listen(" 8787 ") == ("127.0.0.1", 8787)
    for bad in ("localhost", "0.0.0.0", "[::1]", "127.0.0.1:", ""):
        with pytest.raises(UsageError) as caught:
            parse_listen(bad)
        assert caught.value.message.startswith("--listen wants HOST:PORT, e.g. 127.0.0.1:8787")
    with pytest.raises(UsageError, match="brackets"):
        parse_listen("::1")  # not host ":" and port 1


def test_the_proxy_routes_by_prefix_and_host_and_answers_404_when_nothing_matches(
    tmp_path: Path,
) -> None:
    upstream = FakeUpstream(first_pause_ms=0, gap_ms=0)
    out = tmp_path / "capture"
    body = {"model": "m", "messages": []}
    with serving(upstream) as up:
        cfg = ProxyConfig(
            routes=[
                UpstreamRoute(url=up.url, prefix="/deepseek"),
                UpstreamRoute(url=up.url + "/v1", host="anthropic.localhost", agent="claude"),
            ]
        )
        writer = CaptureWriter(out)
        with serving(CaptureProxy(cfg, writer, ProxyOptions(), log=lambda _: None)) as proxy:
            a = httpx.post(proxy.url + "/deepseek/chat/completions", json=body)
            b = httpx.post(
                proxy.url + "/messages", json=body, headers={"host": "anthropic.localhost"}
            )
            c = httpx.post(proxy.url + "/other/chat/completions", json=body)
        writer.close()
    assert (a.status_code, b.status_code, c.status_code) == (200, 200, 404)
    assert [s.path for s in upstream.seen] == ["/chat/completions", "/v1/messages"]
    first, second = [orjson.loads(line) for line in capture_lines(out)]
    assert first["request"]["url"] == up.url + "/chat/completions"
    assert second["request"]["url"] == up.url + "/v1/messages"
    assert second["hints"]["agent"] == "claude"
