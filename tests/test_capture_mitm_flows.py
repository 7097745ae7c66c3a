"""A mitmproxy flow file (`mitmdump -w`) given to ingest: one clear error line saying what it
is and how to export it as a HAR, not "format not recognised"."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli


def _tnet(value: object) -> bytes:
    """tnetstring encoding (mitmproxy's flow format) of str, int and dict values."""
    if isinstance(value, dict):
        body = b"".join(_tnet(k) + _tnet(v) for k, v in value.items())
        return str(len(body)).encode() + b":" + body + b"}"
    if isinstance(value, int):
        text = str(value).encode()
        return str(len(text)).encode() + b":" + text + b"#"
    data = str(value).encode()
    return str(len(data)).encode() + b":" + data + b";"


def test_a_mitmproxy_flow_file_is_named_with_how_to_export_a_har(tmp_path: Path) -> None:
    flows = tmp_path / "traffic.flows"
    flows.write_bytes(_tnet({"version": 21, "type": "http", "id": "f1"}) * 2)
    done = run_cli("ingest", str(flows), "--warehouse", str(tmp_path / "wh"))
    assert done.returncode == 3  # an input error
    assert f"error: {flows} is a mitmproxy flow file (mitmdump -w)" in done.stderr
    assert f"mitmdump -nr {flows} --set hardump={flows}.har" in done.stderr
    assert "Traceback" not in done.stderr
