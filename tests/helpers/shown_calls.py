"""The calls a writer prompt shows, read back from its text (what scripted teachers and fake
endpoints answer from): one home for the layout of ``data_prep.sft.render.call_text``."""

import json
import re

# status line, then the call as JSON (call_id, tool, arguments)
CALL_RE = re.compile(r"status: (?P<status>\S+)\nCall (?P<seq>\d+): (?P<shown>\{.*\})$", re.MULTILINE)


def shown_calls(text: str) -> list[dict]:
    """Every call shown in ``text``, in order: ``call_id``, ``tool``, ``arguments``, ``status``, ``seq``."""
    return [
        {**json.loads(m["shown"]), "status": m["status"], "seq": int(m["seq"])} for m in CALL_RE.finditer(text)
    ]
