"""Azure OpenAI: the URL names a deployment, not a model, so the model is the one the response
body reports, and the request is priced by the price library's Azure rows (which fall back to
OpenAI's, as Azure resells them): gpt-4o-2024-08-06 at 2.50 / 1.25 cached / 10.00 per million."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from test_ingest_support import capture_record, line

from pipeline import sql
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

AZURE = (
    "https://myresource.openai.azure.com/openai/deployments/prod-chat/chat/completions"
    "?api-version=2024-10-21"
)


def test_an_azure_deployment_is_priced_as_the_model_its_response_names(tmp_path: Path) -> None:
    record = capture_record(
        1, url=AZURE, body=orjson.dumps({"messages": [{"role": "user", "content": "hi"}]})
    )
    response = orjson.loads(record["response"]["body"])
    response["model"] = "gpt-4o-2024-08-06"
    record["response"]["body"] = orjson.dumps(response).decode()
    (tmp_path / "azure.jsonl").write_bytes(line(record))
    wh = Warehouse(tmp_path / "wh")
    ingest([tmp_path / "azure.jsonl"], wh, workers=1)
    con = sql.connect(wh)
    ((provider, model, requested, inp, read, out),) = con.sql(
        "SELECT provider, model, requested_model, input_tokens, cache_read_tokens,"
        " output_tokens FROM requests"
    ).fetchall()
    assert (provider, model, requested) == ("azure_openai", "gpt-4o-2024-08-06", None)
    ((cost, layer),) = con.sql("SELECT cost_total, price_layer FROM request_costs").fetchall()
    assert layer == "library"
    assert cost == pytest.approx(((inp - read) * 2.50 + read * 1.25 + out * 10.00) / 1e6)
