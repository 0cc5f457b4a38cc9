"""Text from the server made safe to print."""

from __future__ import annotations

import json

from etl.support.terminal import json_for_terminal, printable, printable_lines

STEERING = "a\x1b[2Jb\x1b]0;title\x07c\x1b]8;;https://x\x07d\re\u202ef\u2066g\x9bh\x7fi\tj\nk"


def test_printable_strips_control_and_bidi_characters_keeping_the_text():
    assert printable(STEERING) == "a[2Jb]0;titlec]8;;https://xd efghi j k"
    assert printable_lines("one\x1b\ntwo\r") == "one\ntwo "
    assert printable("obj-1 Цех №2 ✓") == "obj-1 Цех №2 ✓"  # other text is left alone


def test_json_for_terminal_escapes_what_json_writers_leave_raw():
    text = json.dumps({"name": "a\x9bb\u202ec\x7f"}, ensure_ascii=False)
    safe = json_for_terminal(text)
    assert not any(c in safe for c in "\x9b\u202e\x7f")
    assert json.loads(safe) == {"name": "a\x9bb\u202ec\x7f"}  # the same document
