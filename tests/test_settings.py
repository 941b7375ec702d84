"""One settings mechanism for both services: declarations, parsing, checks, the docs tables, flags."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from extractor.cli import build_parser, main
from extractor.config import DEFAULT_FORMATS, LabelingSettings, Settings, SettingsError
from extractor.config.docs import SHARED, TABLES, declared_here, fill_tables, settings_table
from extractor.config.fields import SettingsBase, setting, settings_from_flags
from extractor.labeling.outbound import OutboundSettings
from extractor.replies.formats import DEFAULT_CHOICES

SETTINGS_PAGE = Path(__file__).parent.parent / "docs" / "settings.md"


def test_the_settings_page_tables_are_the_generated_ones() -> None:
    text = SETTINGS_PAGE.read_text()
    for name in TABLES:
        assert text.count(f"<!-- settings-table: {name} -->") == 1, name
    assert fill_tables(text) == text, "run `make settings-table` and commit docs/settings.md"


def test_every_setting_is_in_one_table_with_its_unit() -> None:
    tabled = [
        variable
        for settings, _ in TABLES.values()
        for declared in declared_here(settings)
        for variable in (
            declared.variable,
            *([SHARED[settings].variable(declared.name)] if settings in SHARED else []),
        )
    ]
    every = [d.variable for service in (Settings, LabelingSettings) for d in service.declared()]
    assert sorted(tabled) == sorted(every)
    for settings, flags in TABLES.values():
        table = settings_table(settings, flags)
        for declared in declared_here(settings):
            (row,) = [line for line in table.splitlines() if f"`{declared.variable}`" in line]
            assert f"| {declared.rule.unit} |" in row
            if declared.kind in {"int", "float"}:
                assert declared.rule.unit, f"{declared.variable} has no unit"


def test_both_services_read_the_environment_the_same_way() -> None:
    env = {
        "EXTRACTOR_MAX_PAGES": " 7 ",
        "EXTRACTOR_ASR_VAD": "off",
        "EXTRACTOR_SECRET": "",  # empty is unset, for both services
        "EXTRACTOR_LABELING_JOB_LEASE_SECONDS": "2.5",
        "EXTRACTOR_LABELING_AUTO_MIGRATE": "no",
        "EXTRACTOR_LABELING_DATA_DIR": "/srv/labeling",
        "EXTRACTOR_LABELING_MAX_QUERY_DEPTH": "",
    }
    extractor = Settings.load(env)
    assert (extractor.max_pages, extractor.asr_vad, extractor.secret) == (7, False, None)
    labeling = LabelingSettings.load(env)
    assert (labeling.job_lease_seconds, labeling.auto_migrate) == (2.5, False)
    assert labeling.data_dir == Path("/srv/labeling") and labeling.max_query_depth == 8
    assert LabelingSettings.load({}, {"max_query_depth": 3}).max_query_depth == 3


@pytest.mark.parametrize(
    ("settings", "env", "needle"),
    [
        (
            Settings,
            {"EXTRACTOR_MAX_PAGES": "many"},
            "EXTRACTOR_MAX_PAGES='many' is not a valid int",
        ),
        (Settings, {"EXTRACTOR_THREADS": "0"}, "EXTRACTOR_THREADS=0 must be at least 1"),
        (Settings, {"EXTRACTOR_REQUEST_TIMEOUT": "nan"}, "EXTRACTOR_REQUEST_TIMEOUT=nan must be"),
        (Settings, {"EXTRACTOR_SPEAKERS_MERGE_SIMILARITY": "1.5"}, "must be at most 1"),
        (Settings, {"EXTRACTOR_ASR_ENGINE": "vosk"}, "expected one of faster-whisper"),
        (LabelingSettings, {"EXTRACTOR_LABELING_JOB_LEASE_SECONDS": "soon"}, "JOB_LEASE_SECONDS"),
        (LabelingSettings, {"EXTRACTOR_LABELING_MAX_JSON_DEPTH": "0"}, "MAX_JSON_DEPTH=0 must"),
        (LabelingSettings, {"EXTRACTOR_LABELING_JOB_TENANT_SHARE": "2"}, "must be at most 1"),
    ],
)
def test_a_bad_value_names_its_variable(
    settings: type[SettingsBase], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(SettingsError, match=needle.replace("(", r"\(")):
        settings.load(env)


def test_values_given_in_code_are_checked_too() -> None:
    with pytest.raises(SettingsError, match="EXTRACTOR_LABELING_EMBEDDED_WORKERS"):
        LabelingSettings(embedded_workers=-1)
    with pytest.raises(SettingsError, match="unknown settings: nope"):
        Settings.load({}, {"nope": 1})


def test_a_field_declared_without_setting_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Careless(SettingsBase):
        env_prefix: ClassVar[str] = "CARELESS_"
        documented: int = setting(1, "things", "A setting.")
        forgotten: int = 2

    with pytest.raises(TypeError, match=r"Careless\.forgotten is not declared with setting"):
        Careless()


def test_secrets_stay_out_of_the_repr() -> None:
    assert "hunter2" not in repr(Settings(secret="hunter2"))
    assert "hunter2" not in repr(LabelingSettings(secret_keys="hunter2"))


def test_the_default_formats_are_those_that_fit_every_document() -> None:
    assert DEFAULT_FORMATS == DEFAULT_CHOICES


def test_the_outbound_client_defaults_are_the_settings() -> None:
    client, settings = OutboundSettings(), LabelingSettings()
    assert (
        client.connect_timeout,
        client.read_timeout,
        client.total_timeout,
        client.max_reply_bytes,
        client.retries,
        client.backoff_base,
    ) == (
        settings.outbound_connect_timeout,
        settings.outbound_read_timeout,
        settings.outbound_total_timeout,
        settings.outbound_max_reply_bytes,
        settings.outbound_retries,
        settings.outbound_backoff_seconds,
    )


def test_serve_offers_every_setting_as_a_flag_over_the_environment() -> None:
    args = build_parser().parse_args(
        ["serve", "--max-pages", "9", "--no-asr-vad", "--asr-engine", "openai-whisper"]
    )
    settings = settings_from_flags(
        Settings, args, {"EXTRACTOR_MAX_PAGES": "7", "EXTRACTOR_PDF_DPI": "150"}
    )
    assert (settings.max_pages, settings.asr_vad, settings.pdf_dpi) == (9, False, 150)
    assert settings.asr_engine == "openai-whisper"
    serve_help = build_parser().parse_args(["serve"])
    assert all(hasattr(serve_help, declared.name) for declared in Settings.declared())
    with pytest.raises(SettingsError, match="EXTRACTOR_MAX_PAGES=0 must be at least 1"):
        settings_from_flags(Settings, build_parser().parse_args(["serve", "--max-pages", "0"]))


def test_the_settings_import_nothing_above_them() -> None:
    """The base layer: importing the settings loads no other module of the project."""
    code = (
        "import json, sys; import extractor.config, extractor.config.docs; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('extractor'))))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    assert [m for m in loaded if m != "extractor" and not m.startswith("extractor.config")] == []


def test_the_settings_command_rewrites_stale_tables(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text(
        "# Doc\n\n<!-- settings-table: labeling-limits -->\nstale\n<!-- /settings-table -->\n"
    )
    assert main(["settings", "--write", str(page)]) == 0
    text = page.read_text()
    assert "stale" not in text and "`EXTRACTOR_LABELING_MAX_QUERY_DEPTH` | `8` | levels |" in text
    assert "`EXTRACTOR_LABELING_DATA_DIR`" not in text  # that one is in the "labeling" table
    assert fill_tables(text) == text


@pytest.mark.parametrize("command", ["serve", "extract"])
def test_help_lists_the_setting_flags(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "--max-upload-bytes" in shown
    if command == "serve":  # extract has not this server setting (malloc_huge_pages)
        assert "~25%" in shown  # a % in a description (argparse's help would choke on a bare one)
