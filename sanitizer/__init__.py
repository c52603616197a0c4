"""ReDoS-safe sanitizer for teacher ledgers: RE2 rule packs, structured records, reports and a CLI.

See ``sanitizer/README.md``. The package depends on nothing else in the repository.
"""

from sanitizer.core import DEFAULT_SALT, RuleProblem, Sanitizer, SanitizeResult, check_rule
from sanitizer.engine import HIDDEN_ID_PLACEHOLDER, HIDDEN_ID_RULE, Finding
from sanitizer.rules import DEFAULT_PACKS, DEFAULT_PACKS_DIR, Pack, Rule, RuleError, load_pack, load_packs

__all__ = [
    "DEFAULT_PACKS",
    "DEFAULT_PACKS_DIR",
    "DEFAULT_SALT",
    "HIDDEN_ID_PLACEHOLDER",
    "HIDDEN_ID_RULE",
    "Finding",
    "Pack",
    "Rule",
    "RuleError",
    "RuleProblem",
    "SanitizeResult",
    "Sanitizer",
    "check_rule",
    "load_pack",
    "load_packs",
]
