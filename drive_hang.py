import httpx, json, sys
h = {"authorization": "Bearer sk-PLANTEDHANG00000000000000000", "x-mode": sys.argv[1], "x-rid": "hang-"+sys.argv[1]}
b = json.dumps({"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
try:
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", "http://127.0.0.1:18811/v1/chat/completions", headers=h, content=b) as r:
            data = b"".join(r.iter_raw())
            print(sys.argv[1], r.status_code, data[:200])
except Exception as e: print(sys.argv[1], repr(e)[:200])
