"""configs/data/unfiltered.yaml is configs/data/default.yaml with the filters off and nothing else."""

from data_prep.sft.config import REPO_ROOT, load_build_config

PRESETS = REPO_ROOT / "configs" / "data"
FILTER_FIELDS = {
    "writer_require_verdict_match",
    "writer_min_agreement",
    "writer_min_compliance",
    "writer_memory_require_decision_match",
    "reader_require_label_match",
    "reader_require_cited_match",
}


def test_unfiltered_differs_from_default_only_in_its_filters():
    default = load_build_config(PRESETS / "default.yaml")
    unfiltered = load_build_config(PRESETS / "unfiltered.yaml")
    d, u = default.to_dict(), unfiltered.to_dict()
    assert {k for k in d if d[k] != u[k]} == FILTER_FIELDS
    assert u["sanitizer_packs"] and u["writer_text_packs"]  # the sanitizer stays on


def test_the_manifest_filters_say_which_ran():
    assert load_build_config(PRESETS / "default.yaml").filters() == {
        "any": True,
        "writer_verdict_match": True,
        "writer_content_agreement": True,
        "writer_protocol_compliance": True,
        "writer_memory_decision_match": True,
        "reader_label_match": True,
        "reader_cited_match": True,
    }
    off = load_build_config(PRESETS / "unfiltered.yaml").filters()
    assert not any(off.values())
