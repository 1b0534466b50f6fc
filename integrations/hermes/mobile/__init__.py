"""Hermes platform plugin `mobile`: the hermes-mobile gateway's agent link.

Install by copying this directory to ``$HERMES_HOME/plugins/mobile/`` (or run
``hermes-mobile hermes install --hermes-home DIR``), then enable it in
config.yaml; see docs/hermes.md in the hermes-mobile repository.
"""


def register(ctx) -> None:
    # Imported here, not at the top: the adapter needs Hermes, while the plugin's pure
    # parts (inbox.py, cards.py, …) are imported by its unit tests without it.
    from .adapter import register as register_adapter

    register_adapter(ctx)


__all__ = ["register"]
