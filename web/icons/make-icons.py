"""Renders the app's PNG icons (issue 18) from one SVG drawing with headless Chromium, so
the PNGs match web/icon.svg. Not served; run it after changing the drawing:

    ~/.cache/hermes-mobile/browser-venv-1.65.2/bin/python web/icons/make-icons.py

"any" icons: the rounded blue tile on a transparent background. Maskable: the blue fills
the square edge to edge (the launcher cuts its own shape) and the drawing is scaled to
stay inside the central 80 % circle, the safe zone of the maskable-icon spec.
"""

import os
import struct
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
BLUE = "#4f6ef7"
# The drawing of web/icon.svg on a 64-unit grid: bubble, eyes, the yellow wings of Hermes.
DRAWING = (
    '<path fill="#fff" d="M18 17h28a7 7 0 0 1 7 7v15a7 7 0 0 1-7 7H31l-9 7v-7h-4a7 7 0 0 1-7-7V24a7 7 0 0 1 7-7z"/>'
    f'<rect x="23" y="26" width="5" height="9" rx="2.5" fill="{BLUE}"/>'
    f'<rect x="36" y="26" width="5" height="9" rx="2.5" fill="{BLUE}"/>'
    '<path d="M5 22c3 1 6 1 8 0-2 2-2 5-2 8-4-1-6-4-6-8zM59 22c-3 1-6 1-8 0 2 2 2 5 2 8 4-1 6-4 6-8z" fill="#ffd166"/>'
)


def svg(maskable):
    if maskable:
        # The drawing's farthest point (a wing tip) is 29 units from the centre; at 0.72 it
        # is 21 units, inside the safe circle's 25.6 (40 % of 64).
        body = f'<rect width="64" height="64" fill="{BLUE}"/><g transform="translate(32 33) scale(.72) translate(-32 -33)">{DRAWING}</g>'
    else:
        body = f'<rect width="64" height="64" rx="14" fill="{BLUE}"/>{DRAWING}'
    return f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64" width="100%" height="100%">{body}</svg>'


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def main():
    out = {"icon-192.png": (192, False), "icon-512.png": (512, False), "maskable-512.png": (512, True)}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
        for name, (size, maskable) in out.items():
            page = browser.new_page(viewport={"width": size, "height": size}, device_scale_factor=1)
            page.set_content(f'<html><body style="margin:0;background:transparent">{svg(maskable)}</body></html>')
            data = page.screenshot(omit_background=True, clip={"x": 0, "y": 0, "width": size, "height": size})
            assert png_size(data) == (size, size), (name, png_size(data))
            (HERE / name).write_bytes(data)
            print(f"{name}: {size}x{size}, {len(data)} bytes")
            page.close()
        browser.close()


if __name__ == "__main__":
    main()
