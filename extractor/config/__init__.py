"""Settings of both services, declared one way: the base layer every other module may read.

- :mod:`.fields`: the mechanism -- ``setting(default, unit, help, ...)`` declares a field of a
  frozen dataclass deriving from ``SettingsBase``, which reads, parses and checks it.
- :mod:`.extraction`: the extractor's ``Settings`` (``EXTRACTOR_*``, also flags of
  ``extractor serve`` and ``extractor extract``).
- :mod:`.labeling`: the labeling service's ``LabelingSettings`` (``EXTRACTOR_LABELING_*``),
  deriving from :mod:`.labeling_limits`' ``LabelingLimits`` (what one tenant may cost).
- :mod:`.docs`: the README's tables, generated from the declarations (``make settings-table``).

Adding a setting is one field in one of these dataclasses; nothing here imports anything of
the project but these modules.
"""

from .engines import ENGINES, SPEAKER_MODES
from .extraction import DEFAULT_FORMATS, Settings
from .fields import SettingsError
from .labeling import LabelingSettings

__all__ = [
    "DEFAULT_FORMATS",
    "ENGINES",
    "SPEAKER_MODES",
    "LabelingSettings",
    "Settings",
    "SettingsError",
]
