"""From corpus to SFT datasets: verdict-match filters, sanitizer, dedup, held-out split, rendering."""

TASKS = ("writer_action", "writer_memory", "reader_verdict", "reader_policy")
RUN_TASKS = ("writer_action", "reader_verdict")
POLICY_TASKS = ("writer_memory", "reader_policy")
SPLITS = ("train", "validation", "heldout")
