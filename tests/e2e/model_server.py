#!/usr/bin/env python3
"""A scripted OpenAI-compatible model server for the Hermes end-to-end test.

Hermes calls `POST /v1/chat/completions` (always `stream: true`) and probes a few
metadata routes; this server answers them on loopback, with no real model. What it
answers is chosen by keywords in the last user message, so the test drives it:

| the last user message contains | the answer |
|---|---|
| `long answer`             | a long answer streamed in many small chunks |
| `two-part answer`         | TWO_PART_ANSWER: 6,479 characters in two paragraphs, streamed word by word |
| `slow answer`             | a text dribbled one word a second for about a minute (something to `/stop`) |
| `run sleep <seconds>`     | a `terminal` tool call `sleep <seconds>`; then a text quoting the tool's result |
| `delete <path>`           | a `terminal` tool call `rm -rf <path>`; then a text quoting the tool's result |
| `clarify`                 | a `clarify` tool call with three choices; then `You chose: <answer>` |
| `open question`           | a `clarify` tool call without choices; then `You chose: <answer>` |
| `picture <abs path>`      | a text with `MEDIA:<abs path>` (Hermes sends the file) |
| `cron`                    | `Cron report: the backup finished.` |
| anything else             | `Echo: <message>` |

After a tool call the next request ends with a `tool` message; the server answers it
with text built from that tool result. Every request body is kept: `GET /_log` returns
them (the test checks that an uploaded file reached the model as a saved path).

    python3 model_server.py --port 0 --port-file /tmp/port   # prints/writes the port
"""

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "e2e-model"
LOG = []
LOG_LOCK = threading.Lock()
LONG_WORDS = 60
SLOW_WORDS = 60  # one a second: `slow answer` takes about a minute


def _paragraph(head, tail, size):
    words = " ".join(f"{head.split()[0].lower()}{i}" for i in range(size))
    return f"{head} {words[: size - len(head) - len(tail) - 2].rstrip()} {tail}"


# Over Hermes' default 4,096 characters a message and under the gateway's 12,000: Hermes
# split it at 3,968 + 2,510 when the adapter did not declare its own limit.
TWO_PART_ANSWER = (_paragraph("Part one:", "End of part one.", 3968) + "\n\n"
                   + _paragraph("Part two:", "The very end.", 6479 - 3968 - 2))
assert len(TWO_PART_ANSWER) == 6479, len(TWO_PART_ANSWER)


def _text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _without_notes(text):
    """The user's own words: Hermes adds paragraphs like "[System note: ...]" around them."""
    kept = [p for p in re.split(r"\n\s*\n", text) if not p.lstrip().startswith("[")]
    return "\n\n".join(kept).strip() or text.strip()


def _last_user(messages):
    for m in reversed(messages):
        if m.get("role") == "user":
            return _text_of(m.get("content"))
    return ""


def plan(body):
    """Return ("text", str, chunk_delay) or ("tool", name, args)."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    user = _last_user(messages)
    low = user.lower()
    tools = {t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    if last.get("role") == "tool":
        result = _text_of(last.get("content"))
        try:
            parsed = json.loads(result)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("user_response"):
            return ("text", f"You chose: {parsed['user_response']}", 0)  # a clarify answer
        return ("text", f"Tool result: {result[:300]}", 0)
    if "long answer" in low:
        words = " ".join(f"word{i}" for i in range(LONG_WORDS))
        return ("text", f"Here is a long answer: {words}. The end.", 0.05)
    if "two-part answer" in low:
        return ("text", TWO_PART_ANSWER, 0.002)
    if "slow answer" in low:
        words = " ".join(f"slow{i}" for i in range(SLOW_WORDS))
        return ("text", f"A slow answer: {words}. The end.", 1.0)
    m = re.search(r"run sleep (\d+)", low)
    if m and "terminal" in tools:
        return ("tool", "terminal", {"command": f"sleep {m.group(1)}"})
    m = re.search(r"delete (\S+)", user)
    if m and "terminal" in tools:
        return ("tool", "terminal", {"command": f"rm -rf {m.group(1)}"})
    if "open question" in low and "clarify" in tools:
        return ("tool", "clarify", {"question": "What name should I use for you?"})
    if "clarify" in low and "clarify" in tools:
        return ("tool", "clarify", {"question": "Which colour do you want?", "choices": ["red", "green", "blue"]})
    m = re.search(r"picture (/\S+)", user)
    if m:
        return ("text", f"Here is your picture.\nMEDIA:{m.group(1)}", 0)
    if "cron" in low:
        return ("text", "Cron report: the backup finished.", 0)
    if not user and any(m.get("role") == "system" for m in messages):
        return ("text", "OK.", 0)
    return ("text", f"Echo: {_without_notes(user)[:200]}", 0)


def _chunk(delta, finish=None, usage=None):
    obj = {
        "id": "chatcmpl-e2e",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
        obj["choices"] = []
    return obj


USAGE = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0].rstrip("/")
        if path == "/_log":
            with LOG_LOCK:
                return self._json(200, list(LOG))
        if path in ("/v1/models", "/models"):
            return self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "e2e"}]})
        if path in (f"/v1/models/{MODEL}",):
            return self._json(200, {"id": MODEL, "object": "model", "owned_by": "e2e"})
        if path == "/health":
            return self._json(200, {"ok": True})
        return self._json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            return self._json(404, {"error": {"message": "not found", "type": "not_found"}})
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._json(400, {"error": {"message": "bad json"}})
        with LOG_LOCK:
            LOG.append(body)
        step = plan(body)
        if body.get("stream"):
            self._stream(step)
        else:
            self._whole(step)

    def _whole(self, step):
        if step[0] == "tool":
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{int(time.time()*1000)}", "type": "function",
                 "function": {"name": step[1], "arguments": json.dumps(step[2])}}]}
            finish = "tool_calls"
        else:
            msg = {"role": "assistant", "content": step[1]}
            finish = "stop"
        self._json(200, {"id": "chatcmpl-e2e", "object": "chat.completion", "created": int(time.time()),
                         "model": MODEL, "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                         "usage": USAGE})

    def _stream(self, step):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def emit(obj):
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

        try:
            emit(_chunk({"role": "assistant", "content": ""}))
            if step[0] == "tool":
                call_id = f"call_{int(time.time()*1000)}"
                emit(_chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                             "function": {"name": step[1], "arguments": ""}}]}))
                emit(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps(step[2])}}]}))
                emit(_chunk({}, finish="tool_calls"))
            else:
                text, delay = step[1], step[2]
                pieces = re.findall(r"\S+\s*|\s+", text) if delay else [text]
                for piece in pieces:
                    emit(_chunk({"content": piece}))
                    if delay:
                        time.sleep(delay)
                emit(_chunk({}, finish="stop"))
            emit(_chunk({}, usage=USAGE))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    args = ap.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(port))
        import os
        os.replace(args.port_file + ".tmp", args.port_file)
    print(f"model server on http://{args.host}:{port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
