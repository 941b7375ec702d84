"""LocalAgreement-n: which words of successive hypotheses are confirmed, and never again."""

from __future__ import annotations

from extractor.realtime.agreement import LocalAgreement
from extractor.realtime.items import DecodePolicy


def confirmed(agreement: LocalAgreement, hypotheses: list[list[str]]) -> list[list[str]]:
    """What each hypothesis confirms; each later hypothesis continues the confirmed words, as
    the decoder's forced prefix makes it."""
    out, sent = [], 0
    for hypothesis in hypotheses:
        words = agreement.update(hypothesis[sent:])
        sent += len(words)
        out.append(words)
    return out


def test_two_agreeing_hypotheses_confirm_their_common_prefix() -> None:
    steps = confirmed(
        LocalAgreement(),
        [["the", "quick"], ["The", "quick,", "brow"], ["the", "quick", "brown", "fox"]],
    )
    assert steps == [[], ["The", "quick,"], []]


def test_three_hypotheses_must_agree_under_local_agreement_3() -> None:
    hypotheses = [["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"], ["a", "b", "c", "d"]]
    assert confirmed(LocalAgreement(hypotheses=3), hypotheses) == [[], [], ["a", "b"], ["c"]]


def test_a_word_still_being_spoken_is_not_confirmed() -> None:
    # "ill-" is the start of a word Whisper has not heard the end of.
    assert confirmed(LocalAgreement(), [["not", "ill-"], ["not", "ill-"]]) == [[], ["not"]]


def test_hold_back_keeps_the_newest_words_pending() -> None:
    steps = confirmed(LocalAgreement(hold_back=1), [["a", "b", "c"], ["a", "b", "c"]])
    assert steps == [[], ["a", "b"]]


def test_the_policy_builds_its_agreement() -> None:
    agreement = DecodePolicy(agreement=3, hold_back=1).new_agreement()
    assert (agreement.hypotheses, agreement.hold_back) == (3, 1)
