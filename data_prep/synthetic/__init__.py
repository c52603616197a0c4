"""The synthetic ledger world: workflow families, sabotage with gold labels, scripted teachers,
sanitizer hazards and EAL-style authorization-policy cases.

    from data_prep.synthetic import SynthConfig, generate_corpus
    manifest = generate_corpus(SynthConfig(runs=2000, seed=7), Path("out/synth"))
"""

from data_prep.synthetic.config import SynthConfig
from data_prep.synthetic.corpus import generate_corpus, iter_policy_cases, iter_runs_generated

__all__ = ["SynthConfig", "generate_corpus", "iter_policy_cases", "iter_runs_generated"]
