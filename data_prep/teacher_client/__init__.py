"""Teacher collection: turn runs and policy cases into a real teacher's outputs through an
OpenAI-compatible Chat Completions endpoint (``python data_prep/teacher.py``).

One job per module: ``settings`` (decoding and retry settings), ``endpoint`` (HTTP with retries and
redaction), ``cache`` (append-only response cache), ``pricing`` (token cost) and ``collect`` (rendering,
parsing, ordering, output corpus and manifest).
"""
