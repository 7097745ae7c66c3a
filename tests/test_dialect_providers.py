"""Provider and dialect identity from host and path, with the user TOML mapping."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ingest_support import capture_record, line, run, table

from pipeline.errors import InputError
from pipeline.providers import Route, UserRule, load_user_rules, route

LOCAL_URL = "http://127.0.0.1:18901/v1/chat/completions"


@pytest.mark.parametrize(
    ("host", "path", "expected"),
    [
        ("api.deepseek.com", "/chat/completions", Route("deepseek", "chat_completions")),
        ("api.deepseek.com", "/responses", Route("deepseek", "responses")),
        ("api.openai.com", "/v1/responses", Route("openai", "responses")),
        ("api.anthropic.com", "/v1/messages", Route("anthropic", "messages")),
        (
            "generativelanguage.googleapis.com",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            Route("google", "generate_content"),
        ),
        (
            "generativelanguage.googleapis.com",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            Route("google", "generate_content"),
        ),
        (
            "generativelanguage.googleapis.com",
            "/v1beta/interactions",
            Route("google", "interactions"),
        ),
        (
            "us-central1-aiplatform.googleapis.com",
            "/v1/projects/p/locations/l/publishers/google/models/gemini-2.0-flash:generateContent",
            Route("google", "generate_content"),
        ),
        (
            "bedrock-runtime.us-east-1.amazonaws.com",
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream",
            Route("bedrock", "converse"),
        ),
        (
            "bedrock-runtime.eu-west-1.amazonaws.com",
            "/model/amazon.nova-micro-v1:0/converse",
            Route("bedrock", "converse"),
        ),
        ("openrouter.ai", "/api/v1/chat/completions", Route("openrouter", "chat_completions")),
        ("api.z.ai", "/api/paas/v4/chat/completions", Route("zhipu", "chat_completions")),
        (
            "dashscope-intl.aliyuncs.com",
            "/compatible-mode/v1/chat/completions",
            Route("alibaba", "chat_completions"),
        ),
        ("api.groq.com", "/openai/v1/chat/completions", Route("groq", "chat_completions")),
        ("api.moonshot.ai", "/v1/chat/completions", Route("moonshot", "chat_completions")),
        ("vllm.local:8000", "/v1/chat/completions", Route("vllm.local", "chat_completions")),
    ],
)
def test_builtin_routes(host: str, path: str, expected: Route) -> None:
    assert route(host, path) == expected


def test_paths_that_are_not_llm_calls_are_not_routed() -> None:
    assert route("api.anthropic.com", "/v1/messages/count_tokens") is None
    assert route("api.openai.com", "/v1/models") is None
    assert route("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash") is None


def test_a_user_toml_rule_maps_a_gateway_host_and_forces_its_dialect(tmp_path: Path) -> None:
    toml = tmp_path / "providers.toml"
    toml.write_text(
        '[[provider]]\nhost = "llm-gw.internal*"\nprovider = "vllm"\n'
        '[[provider]]\nhost = "claude-proxy.corp"\nprovider = "anthropic"\napi = "messages"\n'
    )
    rules = load_user_rules(toml)
    assert rules == [
        UserRule("llm-gw.internal*", "vllm", None),
        UserRule("claude-proxy.corp", "anthropic", "messages"),
    ]
    assert route("llm-gw.internal.example:443", "/v1/chat/completions", rules) == Route(
        "vllm", "chat_completions"
    )
    assert route("claude-proxy.corp", "/proxy/v1/complete", rules) == Route("anthropic", "messages")


def test_a_user_rule_overrides_a_builtin_host(tmp_path: Path) -> None:
    rules = [UserRule("api.openai.com", "my-openai", None)]
    assert route("api.openai.com", "/v1/chat/completions", rules) == Route(
        "my-openai", "chat_completions"
    )


def test_a_toml_entry_without_provider_is_an_input_error(tmp_path: Path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text('[[provider]]\nhost = "x"\n')
    with pytest.raises(InputError):
        load_user_rules(toml)


def _map(tmp_path: Path, text: str) -> Path:
    toml = tmp_path / "providers.toml"
    toml.write_text(text)
    return toml


def test_an_unknown_api_in_the_provider_map_is_an_input_error_naming_the_dialects(
    tmp_path: Path,
) -> None:
    toml = _map(tmp_path, '[[provider]]\nhost = "127.0.0.1"\nprovider = "vllm"\napi = "chat"\n')
    with pytest.raises(InputError) as info:
        load_user_rules(toml)
    message = info.value.message
    assert "entry 1" in message and "'chat'" in message
    assert "chat_completions" in message and "messages" in message and "converse" in message


def test_an_unknown_api_fails_the_ingest_like_a_bad_toml_before_reading_anything(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(line(capture_record(1, record_id="r1", url=LOCAL_URL)))
    bad_api = _map(tmp_path, '[[provider]]\nhost = "127.0.0.1"\nprovider = "vllm"\napi = "chat"\n')
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[[provider]\n")
    wh = tmp_path / "wh"
    api_run = cli("ingest", str(capture), "-w", str(wh), "--providers", str(bad_api))
    toml_run = cli("ingest", str(capture), "-w", str(wh), "--providers", str(bad_toml))
    assert toml_run.returncode != 0
    assert api_run.returncode == toml_run.returncode
    assert api_run.stderr.startswith("error: provider map") and "chat_completions" in api_run.stderr
    assert "records" not in api_run.stderr  # nothing was ingested


def test_a_host_pattern_with_a_port_matches_host_and_port_and_one_without_any_port() -> None:
    path = "/v1/chat/completions"
    with_port = [UserRule("127.0.0.1:1890*", "sim", None)]
    assert route("127.0.0.1:18901", path, with_port) == Route("sim", "chat_completions")
    assert route("127.0.0.1:8000", path, with_port) == Route("127.0.0.1", "chat_completions")
    assert route("127.0.0.1", path, with_port) == Route("127.0.0.1", "chat_completions")
    without_port = [UserRule("127.0.0.1", "local", None)]
    assert route("127.0.0.1:8000", path, without_port) == Route("local", "chat_completions")
    ipv6 = [UserRule("[::1]", "v6", None), UserRule("[::2]:80", "v6-80", None)]
    assert route("[::1]:8000", path, ipv6) == Route("v6", "chat_completions")
    assert route("[::2]:80", path, ipv6) == Route("v6-80", "chat_completions")
    assert route("[::3]:80", path) == Route("[::3]", "chat_completions")


def test_a_provider_map_entry_that_matched_no_record_is_named_in_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(
        b"".join(line(capture_record(i, record_id=f"r{i}", url=LOCAL_URL)) for i in range(2))
    )
    toml = _map(
        tmp_path,
        '[[provider]]\nhost = "127.0.0.1:1890*"\nprovider = "vllm"\n'
        '[[provider]]\nhost = "gw.internal*"\nprovider = "gateway"\n',
    )
    wh = tmp_path / "wh"
    run([capture], wh, providers_file=toml)
    assert {r["provider"] for r in table(wh, "requests")} == {"vllm"}
    warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("warning")]
    assert len(warnings) == 1, warnings
    assert "entry 2" in warnings[0] and '"gw.internal*"' in warnings[0]
    assert "--force" not in warnings[0]  # every file was read

    again = _map(tmp_path, '[[provider]]\nhost = "127.0.0.1"\nprovider = "renamed"\n')
    run([capture], wh, providers_file=again)
    assert "--force" in capsys.readouterr().err  # the map was not applied to the old file


def _simulated(tmp_path: Path, header: str) -> Path:
    record = capture_record(1, record_id="sim1", url=LOCAL_URL)
    record["response"]["headers"].append(["X-CacheAudit-Simulator", header])
    capture = tmp_path / "sim.jsonl"
    capture.write_bytes(line(record))
    return capture


def test_simulator_responses_are_labelled_with_the_provider_whose_rules_it_ran(
    tmp_path: Path,
) -> None:
    capture = _simulated(tmp_path, "cacheaudit-simulator; rules=openai; no inference")
    run([capture], tmp_path / "wh")
    (row,) = table(tmp_path / "wh", "requests")
    assert (row["provider"], row["host"]) == ("openai", "127.0.0.1:18901")


def test_a_provider_map_entry_beats_the_simulator_header_and_other_servers_keep_the_host(
    tmp_path: Path,
) -> None:
    capture = _simulated(tmp_path, "cacheaudit-simulator; rules=openai; no inference")
    toml = _map(tmp_path, '[[provider]]\nhost = "127.0.0.1"\nprovider = "mine"\n')
    run([capture], tmp_path / "wh1", providers_file=toml)
    assert table(tmp_path / "wh1", "requests")[0]["provider"] == "mine"
    for i, header in enumerate(("some-gateway; rules=openai", "cacheaudit-simulator; rules=x")):
        run([_simulated(tmp_path, header)], tmp_path / f"wh{i + 2}", force=True)
        assert table(tmp_path / f"wh{i + 2}", "requests")[0]["provider"] == "127.0.0.1"


def test_every_simulator_rule_set_names_a_provider_in_its_header() -> None:
    from pipeline.providers import SIMULATOR_HEADER, simulator_provider
    from pipeline.simulate import RULES, Simulator, SimulatorSettings

    for rules in RULES:
        headers = Simulator(SimulatorSettings(rules=rules)).headers
        assert simulator_provider(headers[SIMULATOR_HEADER]) == rules
