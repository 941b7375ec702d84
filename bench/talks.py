"""Seeded generated talks for measuring speaker labels: a tuning set and a held-out test set.

Each talk has 2-4 espeak-ng voices (an English accent, a voice variant, a pitch and a speed
each) taking turns of 1-15 s with pauses of 0.2-1 s, some turns back to back (under 0.1 s),
each voice 5 s or more in all, 20 s to 5 min long (log-uniform, so short talks, where clustering has few embeddings to go
on, are well represented). Voices are drawn for the two sets from **disjoint** variant pools,
so a figure on the test set is on voices the tuning never heard. The same seed always gives
the same talk, sample for sample, so tuning and reports are reproducible without committing
any audio.

``python -m bench.talks --set test --count 3`` lists what the talks hold.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from extractor.samples import decode_wav
from extractor.samples.conversations import SENTENCES as CONVERSATION_SENTENCES
from extractor.samples.conversations import SILENT, Conversation, Turn

# "en" is espeak-ng's British English: "en-gb" would resolve to an mbrola voice that is not
# installed and fall back to one voice that ignores the variant, so every "en-gb" speaker in
# a talk (VERSION 2 and before) differed only in pitch and speed.
ACCENTS = (
    "en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd",
    "en-029", "en-us-nyc",
)  # fmt: skip
# espeak-ng voice variants: the bulk of what tells its voices apart. Three disjoint pools, and
# variants that share formant settings (a family: steph/steph2, Hugo/Diogo, max/paul, ...)
# always sit in the same pool, so no pool hears a near-copy of another's voice:
# - tuning: every threshold of the clustering was chosen on talks of these, and nothing else.
#   It also holds every voice tuned on or tested with before (m3/f3/m7 of
#   extractor.samples.conversations, the tests' talks; the earlier held-out pool m5/f5/Mike/...).
# - test: the held-out talks (bench.speakers_heldout), reported once after tuning.
# - accuracy: the talks of the accuracy harness and its CI gate (bench.accuracy).
TUNING_VARIANTS = (
    "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "Andy",
    "AnxiousAndy", "Annie", "Alex", "benjamin", "Mike", "linda", "john", "steph", "steph2",
    "steph3", "robert",
)  # fmt: skip
TEST_VARIANTS = (
    "m8", "Alicia", "Andrea", "Denis", "victor", "shelby", "grandma", "grandpa", "Gene",
    "Gene2", "Jacky", "Lee", "Michael", "Mario", "gustave", "paul", "max", "boris", "quincy",
    "belinda", "aunty", "travis", "zac", "Hugo", "Henrique", "Diogo", "michel", "anika",
)  # fmt: skip
ACCURACY_VARIANTS = (
    "iven", "iven2", "iven3", "iven4", "Marco", "norbert", "pablo", "rob", "david", "edward",
    "edward2", "adam",
)  # fmt: skip
SETS = {"tuning": TUNING_VARIANTS, "test": TEST_VARIANTS}  # accuracy: bench.accuracy
SHORTEST, LONGEST = 20.0, 300.0  # seconds of talk
TURN_SECONDS = (1.0, 15.0)
PAUSE_SECONDS = (0.2, 1.0)
BACK_TO_BACK = 0.15  # share of speaker changes with (almost) no pause
BACK_TO_BACK_PAUSE = (0.0, 0.1)  # seconds
WORDS_PER_MINUTE = (135, 185)
# Every voice speaks at least this long in all (the talk runs on until each has): a person
# heard for one "Yes." is not a speaker anyone could count.
LEAST_SPEECH = 5.0  # seconds
VERSION = 3  # of the generator: bump when a talk changes, so cached embeddings are redone
REPLIES = (
    "Yes.", "No.", "Right.", "Okay, sure.", "I see.", "Exactly.", "Not really.", "Go on.",
    "Really?", "Hmm, maybe.", "That makes sense.", "Fair enough.", "Good point.", "Why not?",
)  # fmt: skip
MORE_SENTENCES = (
    "I read somewhere that the old bridge will be closed for repairs until March.",
    "We could ask the neighbours whether they want to share the cost of a new fence.",
    "The meeting ran over by an hour because nobody agreed on the schedule.",
    "If the parcel does not arrive by Thursday I will call the shop again.",
    "My brother is learning to play the violin and practises every evening.",
    "There is a small bookshop near the station that sells maps of the mountains.",
    "The soup needs more salt, but otherwise it tastes wonderful.",
    "Last winter the lake froze so hard that people walked across it.",
    "I would rather take the early flight and have the whole afternoon free.",
    "Somebody left a bicycle in the hallway again and I nearly tripped over it.",
    "The new manager wants a weekly report on every open project.",
    "Our dog refuses to go outside when it rains, even for a minute.",
    "Have you tried the noodle place that opened across from the cinema?",
    "The tickets were sold out within ten minutes of going on sale.",
    "I have been meaning to fix that dripping tap for weeks.",
    "The forecast says the storm will reach the coast by tomorrow night.",
    "We need three more chairs if everyone from the office comes.",
    "The garden looks much bigger now that the old shed is gone.",
    "My phone keeps losing signal whenever I go down to the basement.",
    "They painted the kitchen a pale green and it feels much calmer.",
)


@dataclass(frozen=True)
class Voice:
    """One speaker's espeak-ng voice: accent, variant, pitch (0-99) and speed (words/min)."""

    accent: str
    variant: str
    pitch: int
    speed: int

    @property
    def name(self) -> str:
        return f"{self.accent}+{self.variant} p{self.pitch} s{self.speed}"

    def say(self, text: str) -> tuple[np.ndarray, int]:
        """``text`` in this voice, as float samples (1, n) trimmed of silence, and the rate."""
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "turn.wav"
            subprocess.run(
                ["espeak-ng", "-v", f"{self.accent}+{self.variant}", "-p", str(self.pitch),
                 "-s", str(self.speed), "-w", str(target), text],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            samples, rate = decode_wav(target.read_bytes())
        loud = np.flatnonzero(np.abs(samples[0]) > SILENT)
        return samples[:, loud[0] : loud[-1] + 1], rate


@dataclass(frozen=True)
class Talk:
    """A generated talk: its name (set and number), voices and the conversation itself."""

    name: str
    voices: tuple[Voice, ...]
    conversation: Conversation

    @property
    def speakers(self) -> int:
        return len({turn.speaker for turn in self.conversation.turns})

    @property
    def duration(self) -> float:
        return self.conversation.duration


def _voices(rng: random.Random, variants: tuple[str, ...], count: int) -> tuple[Voice, ...]:
    chosen = rng.sample(variants, count)  # distinct variants within a talk
    return tuple(
        Voice(rng.choice(ACCENTS), variant, rng.randint(25, 75), rng.randint(*WORDS_PER_MINUTE))
        for variant in chosen
    )


def _text(rng: random.Random, words: float) -> str:
    """About ``words`` words of talk: a short reply, or whole sentences, the last one cut."""
    if words < 4:
        return rng.choice(REPLIES)
    pool = CONVERSATION_SENTENCES + MORE_SENTENCES
    said: list[str] = []
    while len(said) < words:
        said += rng.choice(pool).split()
    said = said[: max(4, round(words))]
    return " ".join(said).rstrip(",.?") + "."


def talk(set_name: str, number: int) -> Talk:
    """Talk ``number`` of set ``set_name`` (``tuning`` or ``test``); the same every time."""
    rng = random.Random(f"{set_name}-{number}")
    count = rng.choice((2, 2, 3, 3, 4))
    voices = _voices(rng, SETS[set_name], count)
    length = math.exp(rng.uniform(math.log(SHORTEST), math.log(LONGEST)))
    weights = [rng.uniform(0.5, 1.5) for _ in voices]  # some voices talk more than others
    parts: list[np.ndarray] = []
    turns: list[Turn] = []
    rate = 0
    clock = 0.0
    spoken_by = [0.0] * count
    while len(turns) < count or clock < length or min(spoken_by) < LEAST_SPEECH:
        if len(turns) < count:
            speaker = len(turns)
            wanted = rng.uniform(TURN_SECONDS[0], min(TURN_SECONDS[1], max(2.0, length / count)))
        else:
            others = [v for v in range(count) if v != turns[-1].speaker]
            short = [v for v in others if spoken_by[v] < LEAST_SPEECH]
            if clock >= length and short:  # the talk is long enough, but not everyone spoke
                others = short
            speaker = rng.choices(others, [weights[v] for v in others])[0]
            wanted = rng.uniform(*TURN_SECONDS)
        voice = voices[speaker]
        text = _text(rng, wanted * voice.speed / 60)
        spoken, rate = voice.say(text)
        turns.append(Turn(speaker, clock, clock + spoken.shape[1] / rate, text))
        spoken_by[speaker] += spoken.shape[1] / rate
        back_to_back = rng.random() < BACK_TO_BACK
        pause = rng.uniform(*(BACK_TO_BACK_PAUSE if back_to_back else PAUSE_SECONDS))
        gap = np.zeros((1, int(pause * rate)), np.float32)
        parts += [spoken, gap]
        clock += (spoken.shape[1] + gap.shape[1]) / rate
    conversation = Conversation(np.concatenate(parts, axis=1), rate, tuple(turns))
    return Talk(f"{set_name} {number}", voices, conversation)


def talks(set_name: str, count: int, first: int = 0) -> list[Talk]:
    """Talks ``first`` .. ``first + count - 1`` of a set."""
    return [talk(set_name, number) for number in range(first, first + count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.talks", description=__doc__)
    parser.add_argument("--set", choices=sorted(SETS), default="tuning")
    parser.add_argument("--count", type=int, default=5)
    parser.add_argument("--save", type=Path, help="also write each talk as a WAV in this folder")
    args = parser.parse_args(argv)
    for made in talks(args.set, args.count):
        turns = made.conversation.turns
        print(
            f"{made.name}: {made.duration:.0f} s, {made.speakers} voices"
            f" ({', '.join(v.name for v in made.voices)}), {len(turns)} turns"
        )
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            path = args.save / f"{made.name.replace(' ', '-')}.wav"
            path.write_bytes(made.conversation.wav())
    return 0


if __name__ == "__main__":
    sys.exit(main())
