"""The answer guard ends loops and finished objects, and never cuts a well-formed answer short."""

from train.answer_guard import AnswerGuard


def feed_all(guard: AnswerGuard, pieces: list[str]) -> tuple[str | None, int]:
    for k, piece in enumerate(pieces):
        why = guard.feed(hash(piece) & 0xFFFF, piece)
        if why:
            return why, k + 1
    return None, len(pieces)


def test_a_looping_call_id_is_cut_by_repetition():
    pieces = ['{"', "call", "_", "id", '":', ' "', "call", "_"] + ["e", "6"] * 100
    why, used = feed_all(AnswerGuard(), pieces)
    assert why == "repetition"
    assert used < 40  # cut within the window, not at max_new_tokens


def test_a_complete_object_ends_at_its_closing_brace():
    answer = '{"call_id": "call_80e76f8c7143", "tool": "get_x", "description": "a {b} \\"c}\\"", "claimed_outcome": "failed"}'
    pieces = list(answer) + ["\n", "tail"]
    why, used = feed_all(AnswerGuard(), pieces)
    assert why == "json_end"
    assert used == len(answer)  # braces inside strings (escaped quotes too) do not end it


def test_a_runaway_string_is_cut_by_field_length():
    pieces = ['{"findings": "'] + [f"w{i} " for i in range(300)]
    why, _ = feed_all(AnswerGuard(max_field_chars=100, window=1000), pieces)
    assert why == "field_length"


def test_repeated_digits_inside_a_real_answer_do_not_fire():
    answer = '{"label": "clean", "suspicion": 0, "cited_call_ids": [], "findings": "amount 1000000 to BA-5418"}'
    why, used = feed_all(AnswerGuard(), list(answer))
    assert (why, used) == ("json_end", len(answer))


def test_under_a_grammar_a_looping_field_is_closed_and_the_answer_goes_on():
    guard = AnswerGuard(cut_fields=True, budget=128)
    head = ['{"', "call", "_", "id", '": "', "call", "_"]
    fed = 0
    for piece in head + ["e", "6"] * 100:
        assert guard.feed(hash(piece) & 0xFFFF, piece) is None  # a loop in a field does not end the answer
        fed += 1
        if guard.closing:
            break
    assert guard.cuts == 1 and fed < len(head) + 40  # cut within the window
    rest = ['", "', "tool", '": "', "get", "_x", '", "', "claimed", '": "', "failed", '"}']
    assert guard.feed(1, rest[0]) is None and not guard.closing  # the quote closed the field
    why, _ = feed_all(guard, rest[1:])
    assert why == "field_cut" and guard.cuts == 1  # the object closed, after one cut


def test_under_a_grammar_a_string_still_open_near_the_budget_is_closed():
    guard = AnswerGuard(cut_fields=True, budget=40, reserve=8)
    pieces = ['{"', "description", '": "'] + [f"w{i} " for i in range(40)]
    fed = 0
    for piece in pieces:
        assert guard.feed(fed, piece) is None
        fed += 1
        if guard.closing:
            break
    assert fed == 40 - 8 and guard.cuts == 1


def test_near_the_budget_the_object_is_finished_values_cut_keys_spelled():
    guard = AnswerGuard(cut_fields=True, budget=12, reserve=8)  # from the 4th token on: finish
    pieces = ['{"', "call", "_", "id", '": "', "c", '", "', "tool", '": "', "x"]
    cuts, wants = [], []
    for k, piece in enumerate(pieces):
        guard.feed(k, piece)
        cuts.append(guard.cuts)
        wants.append(guard.wants)
    # counted once when finishing starts (inside the key "call_id", which is never cut), then once per
    # value: each is closed as soon as it opens, keys are left to the grammar
    assert cuts == [0, 0, 0, 1, 2, 2, 2, 2, 3, 3]
    assert wants[4] == wants[8] == "finish_string" and wants[7] is None
    guard.feed(99, '"')
    assert guard.wants == "finish"  # outside any string: close the containers


def test_the_default_reserve_is_an_eighth_of_the_budget_and_at_least_32_tokens():
    assert AnswerGuard(cut_fields=True, budget=128)._reserve() == 32
    assert AnswerGuard(cut_fields=True, budget=600)._reserve() == 75
    assert AnswerGuard(cut_fields=True, budget=16)._reserve() == 8
