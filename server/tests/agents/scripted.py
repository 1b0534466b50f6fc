#!/usr/bin/env python3
"""A scripted agent for the server's agent-link tests (docs/agent-protocol.md).

It says hello, then answers each user message by its text:
  echo <words>   -> reply "echo: <words>" (done), end_turn
  stream         -> three replies to one id, the last done, end_turn
  crash          -> exits with status 3 (the gateway restarts it)
  garbage        -> writes a line that is not JSON, then replies "after garbage"
  huge           -> writes a 17 MiB line, then replies "after huge"
  file <path>    -> send_file with that path (ref "f"), then reply, end_turn
  inline         -> send_file with base64 data
  deliver <dev>  -> deliver "cron says hi" to <dev> (ref "d")
  card           -> open_prompt exec_approval "rm -rf /tmp/x"
  slow           -> nothing (the turn stays in flight)
Every line from the gateway is also appended to $AGENT_LOG (if set), so tests can see
what the agent received. SIGTERM is logged there as "SIGTERM" before exiting 0.
"""
import base64, json, os, signal, sys

LOG = os.environ.get("AGENT_LOG")


def log(line):
    if LOG:
        with open(LOG, "a") as f:
            f.write(line.rstrip("\n") + "\n")


def on_term(*_):
    log("SIGTERM")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


send({"t": "hello", "v": 1, "agent": "scripted", "inline": os.environ.get("AGENT_INLINE") == "1"})
n = 0
for line in sys.stdin:
    log(line)
    msg = json.loads(line)
    if msg.get("t") != "message":
        continue
    dev, text = msg["device"], (msg.get("text") or "")
    n += 1
    rid = f"r{n}"
    if msg.get("file"):
        f = msg["file"]
        where = f.get("path") or ("inline %d bytes" % len(base64.b64decode(f.get("data", ""))))
        send({"t": "reply", "device": dev, "id": rid, "text": f"file {f['kind']} {f['name']} {f['size']} at {where}"})
        send({"t": "end_turn", "device": dev})
        continue
    word, _, rest = text.partition(" ")
    if word == "echo":
        send({"t": "reply", "device": dev, "id": rid, "text": "echo: " + rest, "done": True})
    elif word == "stream":
        send({"t": "reply", "device": dev, "id": rid, "text": "one", "done": False})
        send({"t": "reply", "device": dev, "id": rid, "text": "one two", "done": False})
        send({"t": "reply", "device": dev, "id": rid, "text": "one two three", "done": True})
    elif word == "crash":
        sys.exit(3)
    elif word == "garbage":
        sys.stdout.write("this is not json\n")
        send({"t": "reply", "device": dev, "id": rid, "text": "after garbage"})
    elif word == "huge":
        sys.stdout.write('{"t":"reply","text":"' + "x" * (17 * 1024 * 1024) + '"}\n')
        send({"t": "reply", "device": dev, "id": rid, "text": "after huge"})
    elif word == "file":
        send({"t": "send_file", "ref": "f", "device": dev, "kind": "document", "name": os.path.basename(rest), "path": rest})
        send({"t": "reply", "device": dev, "id": rid, "text": "sent the file"})
    elif word == "inline":
        data = base64.b64encode(b"inline bytes").decode()
        send({"t": "send_file", "ref": "f", "device": dev, "kind": "document", "name": "inline.txt", "data": data})
    elif word == "deliver":
        send({"t": "deliver", "ref": "d", "id": "cron-" + rest, "target": "mobile:" + rest, "text": "cron says hi"})
    elif word == "card":
        send({"t": "open_prompt", "ref": "p", "device": dev, "prompt": "ap-%d" % n, "kind": "exec_approval",
              "command": "rm -rf /tmp/x", "description": "delete in root path", "options": ["once", "deny"]})
        continue
    elif word == "slow":
        continue
    else:
        send({"t": "reply", "device": dev, "id": rid, "text": "?"})
    send({"t": "end_turn", "device": dev})
