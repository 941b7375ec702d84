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


def test_a_margin_holds_a_word_that_touches_the_end_of_the_audio() -> None:
    # Each word's slack: the audio its decode heard after the word's end.
    agreement = LocalAgreement(margin=0.3)
    assert agreement.update(["the", "quick", "bro"], [1.0, 0.5, 0.0]) == []
    # "brown" agrees but ended 0.1 s before the end of what the newest decode heard.
    assert agreement.update(["the", "quick", "brown"], [1.4, 0.9, 0.1]) == ["the", "quick"]
    assert agreement.update(["brown", "fox"], [0.5, 0.0]) == ["brown"]


def test_a_margin_on_every_agreeing_hypothesis() -> None:
    agreement = LocalAgreement(margin=0.3, margin_all=True)
    assert agreement.update(["the", "quick"], [0.5, 0.1]) == []
    # "quick" touched the end of the older decode: it waits for one more.
    assert agreement.update(["the", "quick"], [0.9, 0.5]) == ["the"]
    assert agreement.update(["quick"], [0.9]) == ["quick"]


def test_the_policy_defaults_are_the_settings_defaults() -> None:
    from extractor.config import Settings

    settings, policy = Settings(), DecodePolicy()
    assert policy == DecodePolicy.from_settings(settings)
    # the partial decodes' beam is its own setting; EXTRACTOR_REALTIME_BEAM_SIZE the ends'
    tuned = DecodePolicy.from_settings(Settings(realtime_partial_beam_size=3, realtime_beam_size=4))
    assert (tuned.partial_beam, tuned.final_beam) == (3, 4)


def test_patience_lets_two_hypotheses_confirm_past_a_word_heard_differently() -> None:
    # "dry" / "try": three hypotheses in a row never agree on it, which under LocalAgreement-3
    # holds back every word after it for as long as Whisper keeps wavering.
    wavering = [
        ["stay", "dry", "until"],
        ["stay", "try", "until", "noon"],
        ["stay", "dry", "until", "noon", "let"],
        ["stay", "dry", "until", "noon", "let", "us"],
        ["stay", "try", "until", "noon", "let", "us", "take"],
        ["stay", "try", "until", "noon", "let", "us", "take", "the"],
    ]
    patient = confirmed(LocalAgreement(hypotheses=3, patience=2), wavering)
    strict = confirmed(LocalAgreement(hypotheses=3), wavering)
    assert strict == [[], [], ["stay"], [], [], []]
    # Two updates confirmed nothing after "stay": the newest two agree on "try until noon ...".
    assert patient == [[], [], ["stay"], [], [], ["try", "until", "noon", "let", "us", "take"]]
    assert [w for words in patient for w in words] == wavering[-1][:-1]  # one hypothesis


def test_patience_never_counts_a_window_start() -> None:
    # The first hypotheses of a window guess from a second of audio ("how do you marry" for
    # "had he married"): patience runs only once three hypotheses could be compared.
    agreement = LocalAgreement(hypotheses=3, patience=1)
    assert agreement.update(["how", "do"]) == []
    assert agreement.update(["had", "he"]) == []
    assert agreement.blocked == 0
    assert agreement.update(["had", "he", "mar"]) == []  # three compared, no agreement
    assert agreement.blocked == 1
    # patience spent: the newest two agree on "had he"
    assert agreement.update(["had", "he", "married"]) == ["had", "he"]
    assert agreement.blocked == 0
    agreement.reset()
    assert (agreement.blocked, agreement.updates) == (0, 0)
