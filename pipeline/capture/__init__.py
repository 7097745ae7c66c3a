"""Capture: write live LLM API traffic in the capture format (schemas/capture.schema.json).

Three ways in, one format out, all through `pipeline.capture_format.make_record`:
- `proxy`: a recording reverse proxy (`cacheaudit capture proxy --upstream URL`);
- `hooks`: httpx clients that record what an application sends and receives
  (`recording_client(out_dir)` for `openai.OpenAI(http_client=...)`);
- `mitm_addon`: a mitmproxy addon (`mitmdump -s pipeline/capture/mitm_addon.py`).

`writer.CaptureWriter` is the durable rotating JSONL file all three append to, and
`exchange.ExchangeRecorder` measures one exchange (timings, chunks, outcome) for the first two.
"""
