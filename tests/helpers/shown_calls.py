"""The calls a writer prompt shows, read back from its text (what scripted teachers and fake
endpoints answer from): one home for the layout of ``data_prep.sft.render.call_text``."""

import json
import re

# the arguments as JSON, the request in words, the status line, then the call line (call_id, tool)
CALL_RE = re.compile(
    r"^Arguments of call \d+: (?P<arguments>\{.*\})\nAsked: .*\nstatus: (?P<status>\S+)\n"
    r"Call (?P<seq>\d+): (?P<shown>\{.*\})$",
    re.MULTILINE,
)


def shown_calls(text: str) -> list[dict]:
    """Every call shown in ``text``, in order: ``call_id``, ``tool``, ``arguments``, ``status``, ``seq``."""
    return [
        {**json.loads(m["shown"]), "arguments": json.loads(m["arguments"]), "status": m["status"], "seq": int(m["seq"])}
        for m in CALL_RE.finditer(text)
    ]
