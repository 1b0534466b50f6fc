"""Hermes platform plugin `mobile`: the hermes-mobile gateway's agent link.

Install by copying this directory to ``$HERMES_HOME/plugins/mobile/`` (or run
``hermes-mobile hermes install --hermes-home DIR``), then enable it in
config.yaml; see docs/hermes.md in the hermes-mobile repository.
"""

from .adapter import register

__all__ = ["register"]
