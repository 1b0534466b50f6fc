"""Uploads handed to Hermes (files.py): documents the way Hermes' own adapters give them."""

import asyncio
import base64

from mobile import files

STORED = "1796306309528-tel-1-notes.txt"  # how the gateway names its saved copy


def incoming(tmp_path, name, data, mime="", text="read my notes", kind="document"):
    path = tmp_path / f"1796306309528-tel-1-{name}"
    path.write_bytes(data)
    file = {"kind": kind, "name": name, "size": len(data), "path": str(path)}
    if mime:
        file["mime"] = mime
    return path, asyncio.run(files.incoming("tel-1", text, file))


def test_a_small_text_document_is_inlined_under_its_own_name(tmp_path):
    path, got = incoming(tmp_path, "notes.txt", b"line one\nline two\n", "text/plain")
    assert got.kind == "document"
    assert "[Content of notes.txt]:\nline one\nline two\n" in got.text, got.text
    assert "'notes.txt'" in got.text and f"'{STORED}'" not in got.text, got.text
    assert str(path) in got.text, "the model is not told where the file is saved"
    assert got.text.rstrip().endswith("read my notes")
    assert got.media_urls == [], "Hermes would announce the stored name again"


def test_a_text_document_without_a_mime_is_still_text(tmp_path):
    _, got = incoming(tmp_path, "data.csv", b"a,b\n1,2\n")
    assert "[Content of data.csv]:\na,b\n1,2\n" in got.text, got.text


def test_a_binary_or_large_document_is_given_by_path_only(tmp_path):
    path, got = incoming(tmp_path, "report.pdf", b"%PDF-1.4 binary", "application/pdf")
    assert "[Content of" not in got.text and "'report.pdf'" in got.text and str(path) in got.text
    _, big = incoming(tmp_path, "big.txt", b"x" * (files.MAX_TEXT_INLINE_BYTES + 1), "text/plain")
    assert "[Content of" not in big.text and "'big.txt'" in big.text
    _, latin = incoming(tmp_path, "latin.txt", "caf\xe9".encode("latin-1"), "text/plain")
    assert "[Content of" not in latin.text


def test_names_are_shown_sanitized_as_hermes_does(tmp_path):
    _, got = incoming(tmp_path, "my notes (v2)!.md", b"# hi\n", "text/markdown", text="")
    assert "[Content of my notes _v2__.md]:\n# hi\n" in got.text, got.text


def test_images_and_voice_are_still_attachments(tmp_path):
    path, got = incoming(tmp_path, "cat.png", b"\x89PNG", "image/png", kind="image")
    assert (got.kind, got.media_urls, got.text) == ("image", [str(path)], "read my notes")
    _, voice = incoming(tmp_path, "voice.ogg", b"OggS", "audio/ogg", text="hello", kind="voice")
    assert voice.kind == "audio", "a voice note with the app's text must not be transcribed again"


def test_a_photo_or_recording_sent_as_a_document_stays_an_attachment(tmp_path):
    # Hermes sorts attachments by their own type (a PNG sent as a document still goes to
    # vision), as it did before documents were inlined.
    path, got = incoming(tmp_path, "scan.png", b"\x89PNG", "image/png")
    assert (got.kind, got.media_urls, got.media_types) == ("document", [str(path)], ["image/png"])
    _, clip = incoming(tmp_path, "memo.m4a", b"....", "audio/mp4")
    assert clip.media_urls and clip.media_types == ["audio/mp4"]


def test_a_file_the_gateway_could_not_save_becomes_a_note():
    got = asyncio.run(files.incoming("tel-1", "", {"kind": "document", "name": "x.txt", "error": "disk full"}))
    assert got.kind == "text" and "could not pass it on: disk full" in got.text


def test_an_inline_upload_is_kept_and_inlined(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_hermes_home", lambda: tmp_path)
    data = base64.b64encode(b"inline words\n").decode()
    got = asyncio.run(files.incoming("tel-1", "", {"kind": "document", "name": "n.txt", "data": data}))
    saved = list((tmp_path / "cache" / "mobile").iterdir())
    assert len(saved) == 1 and saved[0].read_bytes() == b"inline words\n"
    assert "[Content of n.txt]:\ninline words\n" in got.text and str(saved[0]) in got.text
