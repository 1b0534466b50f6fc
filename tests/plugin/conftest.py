"""Unit tests of the Hermes plugin's pure parts (integrations/hermes/mobile/), without
Hermes: the ordered inbox and its hold, card resolution, files. Run with
`python3 -m pytest tests/plugin` (or .ci/plugin-tests, which brings its own pytest).
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the plugin's directory
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integrations" / "hermes"))
