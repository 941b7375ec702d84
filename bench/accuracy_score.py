"""How right a transcript, a page's text or a set of speaker labels is: the scorers of the
accuracy harness (``bench/accuracy.py``) and its gate (``tests/accuracy``).

- **Speech**: word and character error rates from jiwer 4 (edits over reference length, summed
  over a set's files before dividing, so long files weigh more), after openai-whisper's
  ``EnglishTextNormalizer`` on both sides: lower case, no punctuation, "Mr." as "mister",
  numbers as digits, British spellings as American. It is the normaliser the Whisper paper's
  figures use, so ours compare with the published ones.
- **OCR**: character error rate on the text as printed, case and punctuation kept, after
  Unicode NFKC (ligatures apart), typographic quotes and dashes as ASCII, and all runs of
  whitespace as one space (line breaks carry no meaning across renders).
- **Speakers**: the labeller names speakers its own way, so its labels are mapped one-to-one
  onto the true speakers in the way that gets the most right (an assignment problem), as
  diarization error rates are scored; a label left over counts as wrong.
"""

from __future__ import annotations

import importlib.util
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import permutations
from pathlib import Path
from types import ModuleType

import jiwer
import numpy as np

FRAME = 0.01  # seconds per frame when speech time is compared


@cache
def _whisper_normalizers() -> ModuleType:
    """openai-whisper's ``normalizers`` package, loaded without ``whisper/__init__`` (which
    imports torch: seconds and hundreds of MB for a few regular expressions)."""
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("openai-whisper is not installed (make install-dev installs it)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "normalizers"
    name = "_accuracy_whisper_normalizers"
    package = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert package is not None and package.loader is not None
    module = importlib.util.module_from_spec(package)
    sys.modules[name] = module  # the package's relative imports look it up there
    package.loader.exec_module(module)
    return module


@cache
def speech_normalizer() -> Callable[[str], str]:
    """The one text normaliser for speech, the same for the service and the bare engine."""
    normalizer: Callable[[str], str] = _whisper_normalizers().EnglishTextNormalizer()
    return normalizer


@cache
def basic_normalizer() -> Callable[[str], str]:
    """Whisper's normaliser for languages other than English: lower case, punctuation and
    symbols out, accents kept (what its paper scores them with)."""
    normalizer: Callable[[str], str] = _whisper_normalizers().BasicTextNormalizer()
    return normalizer


def normalize_speech(text: str) -> str:
    return " ".join(speech_normalizer()(text).split())


# Typographic quotes and dashes (written as escapes: they look like their ASCII twins).
ASCII_PUNCTUATION = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"',
        "\u201e": '"', "\u2010": "-", "\u2013": "-", "\u2014": "-",
    }
)  # fmt: skip


def normalize_page(text: str) -> str:
    """Page text as printed, with only what a render cannot show taken out (see the top)."""
    text = unicodedata.normalize("NFKC", text).translate(ASCII_PUNCTUATION)
    return " ".join(text.split())


@dataclass(frozen=True)
class ErrorRates:
    """Word and character error rates of a set of files (fractions; 0.042 is 4.2%)."""

    wer: float
    cer: float
    words: int  # reference words over the set


def speech_errors(references: Sequence[str], hypotheses: Sequence[str]) -> ErrorRates:
    refs = [normalize_speech(r) for r in references]
    hyps = [normalize_speech(h) for h in hypotheses]
    return ErrorRates(
        jiwer.wer(refs, hyps), jiwer.cer(refs, hyps), sum(len(r.split()) for r in refs)
    )


def page_cer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Character error rate over pages (edits summed, over reference characters summed)."""
    refs = [normalize_page(r) for r in references]
    hyps = [normalize_page(h) for h in hypotheses]
    return float(jiwer.cer(refs, hyps))


# -- speakers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """Someone (a true speaker, or a label a labeller gave) speaking from ``start`` to ``end``."""

    start: float
    end: float
    who: str


def best_assignment(agree: np.ndarray) -> int:
    """The most agreement a one-to-one mapping of rows (labels) onto columns (speakers) gets."""
    rows, cols = _mapping(agree)
    return int(sum(agree[r, c] for r, c in zip(rows, cols, strict=True)))


def speaker_at(reference: Sequence[Span], seconds: float) -> str:
    """Who spoke at ``seconds``: the span holding it, else the nearest one (a pause)."""
    return min(reference, key=lambda s: max(s.start - seconds, seconds - s.end, 0)).who


def words_right(reference: Sequence[Span], words: Sequence[Span]) -> tuple[float, int]:
    """Share of ``words`` (each with its label) on the right speaker under the best mapping,
    judged at each word's middle, and how many labels there were."""
    if not words:
        return 0.0, 0
    labels = sorted({w.who for w in words})
    speakers = sorted({s.who for s in reference})
    agree = np.zeros((len(labels), len(speakers)), np.int64)
    for word in words:
        truth = speaker_at(reference, (word.start + word.end) / 2)
        agree[labels.index(word.who), speakers.index(truth)] += 1
    return best_assignment(agree) / len(words), len(labels)


@dataclass(frozen=True)
class SpeechTime:
    """Speaker labels against a reference of who spoke when (an RTTM), frame by frame."""

    right: float  # share of reference speech time whose label maps to a speaker speaking then
    der: float  # diarization error rate: (missed + false alarm + confusion) / reference speech
    missed: float  # share of reference speech time with no label at all
    labels: int


def speech_time(
    reference: Sequence[Span], labelled: Sequence[Span], *, collar: float = 0.0
) -> SpeechTime:
    """Speech time on the right person, and DER (overlapping speech counts once per speaker in
    the reference, where a labeller that gives one label per moment loses one). ``collar``:
    seconds either side of each reference turn's start and end left unscored, as NIST's
    md-eval does (0.25 s is the usual choice; 0 scores every frame)."""
    end = max([s.end for s in reference] + [s.end for s in labelled] + [0.0])
    frames = int(np.ceil(end / FRAME)) + 1
    speakers = sorted({s.who for s in reference})
    labels = sorted({s.who for s in labelled})
    truth = np.zeros((len(speakers), frames), bool)
    for span in reference:
        truth[speakers.index(span.who), _frame(span.start) : _frame(span.end)] = True
    said = np.zeros((len(labels), frames), bool)
    for span in labelled:
        said[labels.index(span.who), _frame(span.start) : _frame(span.end)] = True
    if collar > 0:
        scored = np.ones(frames, bool)
        for span in reference:
            for edge in (span.start, span.end):
                scored[_frame(edge - collar) : _frame(edge + collar)] = False
        truth, said = truth[:, scored], said[:, scored]
    agree = said.astype(np.int64) @ truth.T.astype(np.int64)  # frames per (label, speaker)
    rows, cols = _mapping(agree)
    mapped = np.zeros_like(truth)  # frames where a label mapped to speaker s is given
    for row, col in zip(rows, cols, strict=True):
        mapped[col] = said[row]
    correct = (mapped & truth).sum(axis=0)  # per frame: speakers both say and mean
    n_ref, n_hyp = truth.sum(axis=0), said.sum(axis=0)
    reference_time = max(int(n_ref.sum()), 1)
    speaking = n_ref > 0
    return SpeechTime(
        right=float((correct[speaking] > 0).sum() / max(int(speaking.sum()), 1)),
        der=float((np.maximum(n_ref, n_hyp) - correct).sum() / reference_time),
        missed=float(((n_hyp == 0) & speaking).sum() / max(int(speaking.sum()), 1)),
        labels=len(labels),
    )


def _frame(seconds: float) -> int:
    return max(round(seconds / FRAME), 0)


def _mapping(agree: np.ndarray) -> tuple[list[int], list[int]]:
    """The (row, column) pairs of the one-to-one mapping with the most agreement."""
    if agree.size == 0:
        return [], []
    try:
        from scipy.optimize import linear_sum_assignment  # with the speakers extra
    except ImportError:  # few labels: trying every mapping is quick enough
        n_rows, n_cols = agree.shape
        if n_rows <= n_cols:
            options = [list(enumerate(chosen)) for chosen in permutations(range(n_cols), n_rows)]
        else:
            options = [
                [(r, c) for c, r in enumerate(chosen)]
                for chosen in permutations(range(n_rows), n_cols)
            ]
        pairs = max(options, key=lambda chosen: sum(agree[r, c] for r, c in chosen))
        return [r for r, _ in pairs], [c for _, c in pairs]
    rows, cols = linear_sum_assignment(agree, maximize=True)
    return [int(r) for r in rows], [int(c) for c in cols]
