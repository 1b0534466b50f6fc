#!/usr/bin/env python3
"""A complete agent for hermes-mobile (docs/agent-protocol.md): it echoes each message.

    MOBILE_AGENT='exec:python3 examples/echo_agent.py' hermes-mobile

The protocol is on stdin (gateway -> agent) and stdout (agent -> gateway), one JSON
object per line; anything on stderr goes to the gateway's log.
"""
import json
import sys


def send(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


send({"t": "hello", "v": 1, "agent": "echo/1.0", "inline": False})
for line in sys.stdin:
    if not line.strip():
        continue
    event = json.loads(line)
    if event.get("t") == "welcome":
        print(f"echo agent linked to {event.get('gateway')}", file=sys.stderr)
    elif event.get("t") == "message":
        device, text = event["device"], event.get("text") or ""
        if "file" in event:
            text += f" [{event['file'].get('kind')}: {event['file'].get('name')}]"
        send({"t": "typing", "device": device})
        send({"t": "reply", "device": device, "id": f"echo-{event['id']}", "text": text or "…", "done": True})
        send({"t": "end_turn", "device": device})
    elif event.get("t") == "error":
        print(f"gateway error: {event.get('code')} {event.get('message')}", file=sys.stderr)
