"""`python -m hermes_mobile_client chat|send …`"""

from __future__ import annotations

import sys

USAGE = """usage: python -m hermes_mobile_client COMMAND [OPTIONS]

commands:
  chat   a terminal chat with the agent (python -m hermes_mobile_client chat --help)
  send   deliver a message to a phone, as `hermes-mobile send` does (send --help)
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "chat":
        from .chat import main as chat_main

        return chat_main(rest)
    if cmd == "send":
        from .send import main as send_main

        return send_main(rest)
    if cmd in ("--version", "version"):
        from ._version import __version__

        print(f"hermes_mobile_client {__version__}")
        return 0
    print(f"unknown command {cmd!r}\n\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
