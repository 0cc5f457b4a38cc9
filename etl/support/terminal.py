"""Text from the server, made safe for a terminal.

Names and messages the platform sends reach the terminal in tables, reports and error lines. Control
characters there can clear the screen, retitle the window, plant hyperlinks (OSC 8) or overwrite a line
(`\\r`), and bidirectional overrides can make text read other than it is stored. Before such text is
printed they are taken out (tabs and line breaks become a space); files keep the text as it was sent.
"""

from __future__ import annotations

# C0 and C1 controls, DEL, and the bidirectional formatting characters (marks, embeddings, overrides,
# isolates), and the Unicode line and paragraph separators.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)
_CONTROLS = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI)
_SPACE = {0x09, 0x0A, 0x0D}
_STRIP = {c: (" " if c in _SPACE else None) for c in _CONTROLS}
_STRIP_KEEP_LINES = {**_STRIP, 0x0A: "\n"}
_ESCAPE = {c: f"\\u{c:04x}" for c in _CONTROLS if c >= 0x7F}  # JSON escapes orjson leaves raw


def printable(text: str) -> str:
    """`text` on one line, without control or bidirectional formatting characters."""
    return text.translate(_STRIP)


def printable_lines(text: str) -> str:
    """`text` without control or bidirectional formatting characters; its line breaks kept."""
    return text.translate(_STRIP_KEEP_LINES)


def json_for_terminal(text: str) -> str:
    """JSON text with the characters JSON writers leave raw inside strings (DEL, C1 controls, bidi
    formatting) escaped: the same document, safe to print."""
    return text.translate(_ESCAPE)
