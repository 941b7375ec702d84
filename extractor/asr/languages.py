"""The languages Whisper transcribes, and every spelling of one a client may send.

Whisper names a language by its ISO 639-1 code (three languages without one by their 639-3
code: ``haw``, ``yue``; Javanese by the retired ``jw``). Clients send other spellings: a 639-2
or 639-3 code (``deu``, ``ger``), an English name (``German``), a BCP-47 tag (``de-DE``,
``pt_BR``, ``zh-Hans-CN``). ``whisper_language`` turns each into Whisper's code, so that the
engine, the check against the model's languages and the reply all see one code.
"""

from __future__ import annotations

import re

from ..errors import InvalidParameter

# Whisper's code | its English names | its ISO 639-2/T, 639-2/B and 639-3 codes (and older or
# individual-language codes clients send for it).
_TABLE = """
en  | english                           | eng
zh  | chinese,mandarin                  | zho chi cmn
de  | german                            | deu ger
es  | spanish,castilian                 | spa
ru  | russian                           | rus
ko  | korean                            | kor
fr  | french                            | fra fre
ja  | japanese                          | jpn
pt  | portuguese                        | por
tr  | turkish                           | tur
pl  | polish                            | pol
ca  | catalan,valencian                 | cat
nl  | dutch,flemish                     | nld dut
ar  | arabic                            | ara arb
sv  | swedish                           | swe
it  | italian                           | ita
id  | indonesian                        | ind in
hi  | hindi                             | hin
fi  | finnish                           | fin
vi  | vietnamese                        | vie
he  | hebrew                            | heb iw
uk  | ukrainian                         | ukr
el  | greek                             | ell gre
ms  | malay                             | msa may zsm
cs  | czech                             | ces cze
ro  | romanian,moldavian,moldovan       | ron rum mo
da  | danish                            | dan
hu  | hungarian                         | hun
ta  | tamil                             | tam
no  | norwegian,bokmal,norwegian bokmal | nor nob nb
th  | thai                              | tha
ur  | urdu                              | urd
hr  | croatian                          | hrv
bg  | bulgarian                         | bul
lt  | lithuanian                        | lit
la  | latin                             | lat
mi  | maori                             | mri mao
ml  | malayalam                         | mal
cy  | welsh                             | cym wel
sk  | slovak                            | slk slo
te  | telugu                            | tel
fa  | persian,farsi                     | fas per pes
lv  | latvian                           | lav lvs
bn  | bengali,bangla                    | ben
sr  | serbian                           | srp
az  | azerbaijani                       | aze azj
sl  | slovenian,slovene                 | slv
kn  | kannada                           | kan
et  | estonian                          | est ekk
mk  | macedonian                        | mkd mac
br  | breton                            | bre
eu  | basque                            | eus baq
is  | icelandic                         | isl ice
hy  | armenian                          | hye arm
ne  | nepali                            | nep npi
mn  | mongolian                         | mon khk
bs  | bosnian                           | bos
kk  | kazakh                            | kaz
sq  | albanian                          | sqi alb
sw  | swahili                           | swa swh
gl  | galician                          | glg
mr  | marathi                           | mar
pa  | punjabi,panjabi                   | pan
si  | sinhala,sinhalese                 | sin
km  | khmer                             | khm
sn  | shona                             | sna
yo  | yoruba                            | yor
so  | somali                            | som
af  | afrikaans                         | afr
oc  | occitan                           | oci
ka  | georgian                          | kat geo
be  | belarusian                        | bel
tg  | tajik                             | tgk
sd  | sindhi                            | snd
gu  | gujarati                          | guj
am  | amharic                           | amh
yi  | yiddish                           | yid ji
lo  | lao                               | lao
uz  | uzbek                             | uzb uzn
fo  | faroese                           | fao
ht  | haitian creole,haitian            | hat
ps  | pashto,pushto                     | pus pbt
tk  | turkmen                           | tuk
nn  | nynorsk,norwegian nynorsk         | nno
mt  | maltese                           | mlt
sa  | sanskrit                          | san
lb  | luxembourgish,letzeburgesch       | ltz
my  | myanmar,burmese                   | mya bur
bo  | tibetan                           | bod tib
tl  | tagalog,filipino                  | tgl fil
mg  | malagasy                          | mlg plt
as  | assamese                          | asm
tt  | tatar                             | tat
haw | hawaiian                          | haw
ln  | lingala                           | lin
ha  | hausa                             | hau
ba  | bashkir                           | bak
jw  | javanese                          | jav jv
su  | sundanese                         | sun
yue | cantonese                         | yue
"""


def _spellings() -> dict[str, str]:
    """Every accepted spelling, in lower case, to Whisper's code."""
    spellings: dict[str, str] = {}
    for row in _TABLE.strip().splitlines():
        code, names, codes = (column.strip() for column in row.split("|"))
        for spelling in (code, *names.split(","), *codes.split()):
            spellings.setdefault(spelling, code)
    return spellings


SPELLINGS = _spellings()
LANGUAGES = frozenset(SPELLINGS.values())  # Whisper's codes
_TAG = re.compile(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8})*")


def whisper_language(raw: str) -> str | None:
    """Whisper's code for ``raw`` (a code, an English name, a BCP-47 tag), or None."""
    text = " ".join(raw.strip().lower().split())
    if text in SPELLINGS:
        return SPELLINGS[text]
    if not _TAG.fullmatch(text):
        return None
    subtags = re.split("[-_]", text)
    if subtags[0] == "zh" and "yue" in subtags[1:]:  # zh-yue: Cantonese
        return "yue"
    return SPELLINGS.get(subtags[0])


def check_spoken_language(language: str, known: frozenset[str]) -> None:
    """Refuse (400 naming ``language``) a language the speech model does not transcribe:
    ``known``, the model's languages (``en`` alone for an English-only one)."""
    if language not in known:
        listed = ", ".join(sorted(known)[:12]) + (", ..." if len(known) > 12 else "")
        raise InvalidParameter(
            f"language {language!r} is not one this model transcribes ({listed})",
            param="language",
        )


def model_languages(model: str) -> frozenset[str] | None:
    """The languages of a speech model known by its name before it is loaded: Whisper's
    English-only models are named ``*.en`` (the bundled ``tiny.en``), ``base`` is
    multilingual; None for any other name (a directory, a hub name: only the loaded model
    says)."""
    if model.endswith(".en"):
        return frozenset({"en"})
    return LANGUAGES if model == "base" else None


__all__ = [
    "LANGUAGES",
    "SPELLINGS",
    "check_spoken_language",
    "model_languages",
    "whisper_language",
]
