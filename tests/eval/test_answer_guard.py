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
