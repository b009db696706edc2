"""A RunPod serverless worker for llama-server, as production workers run it.

Each job's ``input`` is an OpenAI chat request; it is forwarded to the
llama-server at $LLAMA_SERVER_URL and the chat response is the job's output.
``input.endpoint`` may name another llama-server route (e.g. /tokenize).

An HTTP error from llama-server fails the job with its status and message
(``raise_for_status`` alone would keep only the status line), so agent-harness
can say what went wrong. Run locally with the runpod package's test server:

    python scripts/runpod_worker.py --rp_serve_api --rp_api_host 127.0.0.1 --rp_api_port 8182
"""

import json
import os
import urllib.error
import urllib.request

import runpod

LLAMA_SERVER_URL = os.environ.get("LLAMA_SERVER_URL", "http://127.0.0.1:8080")
TIMEOUT_SECS = float(os.environ.get("LLAMA_SERVER_TIMEOUT_SECS", "600"))


def handler(job):
    body = dict(job["input"])
    route = body.pop("endpoint", "/v1/chat/completions")
    request = urllib.request.Request(
        LLAMA_SERVER_URL + route,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECS) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:2000]
        raise RuntimeError(f"llama-server answered {e.code}: {detail}") from None


if __name__ == "__main__":
    runpod.serverless.start({"handler": handler})
