"""A worker's speech engines, one per model name, at most ``EXTRACTOR_ASR_MAX_MODELS`` loaded.

The deployment's model loads at worker start (``Extractor.load``); another a request names
loads on its first use, and the least recently used idle one is unloaded to make room. An
engine in use is never unloaded under its transcription: the count may pass the limit while
every loaded engine is busy, and falls back as they finish.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import InvalidParameter
from ..heap import loading_without_huge_pages
from .base import SpeechEngine
from .languages import check_spoken_language, model_languages
from .models import OPENAI_DEFAULT

log = logging.getLogger(__name__)


class LoadedModels:
    """Engines by model name (built unloaded), the first name the default."""

    def __init__(
        self, build: Callable[[str], SpeechEngine], names: tuple[str, ...], most: int
    ) -> None:
        self.names = names
        self.default = names[0]
        self.most = most
        self._engines = {name: build(name) for name in names}
        self._recent: OrderedDict[str, None] = OrderedDict((name, None) for name in names)
        self._users = dict.fromkeys(names, 0)
        self._lock = threading.Lock()
        self._loading = {name: threading.Lock() for name in names}  # one load per engine

    def engine(self, name: str | None = None) -> SpeechEngine:
        """The engine of ``name`` (None or ``whisper-1``: the default), loaded or not."""
        return self._engines[self._key(name)]

    def _key(self, name: str | None) -> str:
        if name is None or name == OPENAI_DEFAULT:
            return self.default
        if name not in self._engines:  # a job stored on a server that has other models
            raise InvalidParameter(
                f"model must be one of {', '.join(self.names)} (installed here), not {name!r}",
                param="model",
            )
        return name

    def check_language(self, language: str, name: str | None = None) -> None:
        """Refuse (400 naming ``language``) a language the model ``name`` does not transcribe,
        without loading it: the loaded engine's languages, else what its name says (a name
        that says nothing is checked once the model is loaded)."""
        key = self._key(name)
        engine = self._engines[key]
        known = engine.languages() if engine.loaded else model_languages(key)
        if known is not None:
            check_spoken_language(language, known)

    def loaded(self) -> list[str]:
        return [name for name, engine in self._engines.items() if engine.loaded]

    @contextmanager
    def use(self, name: str | None = None) -> Iterator[SpeechEngine]:
        """The loaded engine of ``name``, not unloaded until the block ends."""
        key = self._key(name)
        engine = self._engines[key]
        with self._lock:
            self._users[key] += 1
            self._recent.move_to_end(key)
        try:
            if not engine.loaded:
                # Room first, so the two models never stand in memory together; loaded as at
                # worker start, out of huge pages: in them the load's sparse blocks stayed
                # resident (a server worker switching from base to tiny.en held 346 MB).
                self._unload_beyond_limit(coming=key)
                with self._loading[key], loading_without_huge_pages():
                    engine.load()
            yield engine
        finally:
            with self._lock:
                self._users[key] -= 1
            self._unload_beyond_limit()

    def _unload_beyond_limit(self, coming: str | None = None) -> None:
        """Unload idle engines, least recently used first, while more than ``most`` are loaded
        (``coming`` counted as loaded: it is about to be)."""
        with self._lock:
            loaded = [n for n in self._recent if self._engines[n].loaded or n == coming]
            idle = [name for name in loaded if not self._users[name]]
            doomed = idle[: max(0, len(loaded) - self.most)]
        for name in doomed:
            with self._loading[name]:
                with self._lock:
                    if self._users[name]:  # taken again meanwhile
                        continue
                self._engines[name].unload()
            log.info("speech model unloaded", extra={"model": name, "most": self.most})


__all__ = ["LoadedModels"]
