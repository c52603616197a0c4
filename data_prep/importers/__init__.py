"""Importers: real data into the project's corpus layout (``runs/``, ``policy_cases/``, ``manifest.json``,
``rejects.jsonl``).

- ``workflow_v2``: seed-style workflow JSONL (one workflow per line) into runs whose model ledger comes
  from the reference trace's ``log_action`` calls;
- ``eal_case``: EAL-style case YAML (one case per file) into ``policy-case/v1`` records, probes included;
- ``runs``: the project's own ``ledger-run/v1`` JSONL, re-validated and re-verified;
- ``inspect_log``, ``otel_genai``, ``openai_agents``: agent traces (inspect_ai logs, OTLP GenAI spans,
  OpenAI Agents SDK trace exports) into runs, through ``traces.build_trace_run``.

Bad input never raises: each bad record becomes a reject ``{source, line, field, problem}`` printed as
``file:line: field: problem``.
"""
