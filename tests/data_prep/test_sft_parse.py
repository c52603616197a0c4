"""Lenient parsing of memory answers: a failure names what is wrong, so a report can tell a writer that
never closes its answer from one that writes the wrong structure."""

from data_prep.sft.parse import ParseFailure, parse_memory

RECORD = '{"authorization_ref": "AUTH-1", "issuer": "cfo"}'


def test_a_closed_memory_parses_whatever_surrounds_it():
    assert parse_memory(f'Here it is: {{"records": [{RECORD}]}} done') == [
        {"authorization_ref": "AUTH-1", "issuer": "cfo"}
    ]


def test_an_answer_cut_inside_its_records_is_called_unfinished():
    """The first object that decodes is then a record; it must not be mistaken for the answer."""
    cut = parse_memory(f'{{"records": [{RECORD}, {RECORD}, {{"authorization_ref": "AU')
    assert isinstance(cut, ParseFailure)
    assert cut.reason == "unfinished answer: the records object never closes"


def test_a_wrong_structure_is_named_as_such():
    assert parse_memory('{"records": "none"}').reason == "records is not a list of objects"
    assert parse_memory(RECORD).reason == "records is not a list of objects"
    assert parse_memory("no json here").reason == "no JSON object"
