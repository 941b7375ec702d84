"""How many tags and custom APIs one owner may keep, checked when one more is created.

Their lists are not paged, so their count is a reply's size: 100,000 tags of one user (one
request each) would make every ``getPersonalTags`` load 100,000 rows, about 100 MB, for every
request that asks. Counting at creation keeps each list, and so each reply, bounded.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from extractor.config import LabelingSettings
from extractor.labeling.errors import LimitExceededError
from extractor.labeling.models import CustomAPI, Tag


def _refuse_at(
    session: Session,
    settings: LabelingSettings,
    name: str,
    model: type[Tag] | type[CustomAPI],
    owner: ColumnElement[bool],
    what: str,
) -> None:
    """LIMIT_EXCEEDED (setting ``name``) when ``owner`` already has the most rows allowed.

    Two requests at the very same time may both pass: the count can end a request's worth
    over, never more (each creates one row).
    """
    count = session.scalar(select(func.count()).select_from(model).where(owner)) or 0
    if count >= getattr(settings, name):
        raise LimitExceededError.of_setting(settings, name, f"{what} already has {count}")


def reserve_tag(
    session: Session, settings: LabelingSettings, *, user_id: str | None, team_id: str | None
) -> None:
    """Refuse a new tag past ``max_tags_per_owner`` (a team's, or a user's personal tags)."""
    if team_id is not None:
        owner, what = Tag.team_id == team_id, "This team"
    else:
        owner, what = Tag.user_id == user_id, "You"
    _refuse_at(session, settings, "max_tags_per_owner", Tag, owner, f"{what} (tags)")


def reserve_custom_api(session: Session, settings: LabelingSettings, team_id: str) -> None:
    """Refuse a new custom API past ``max_custom_apis_per_team``."""
    owner = CustomAPI.team_id == team_id
    _refuse_at(
        session, settings, "max_custom_apis_per_team", CustomAPI, owner, "This team (custom APIs)"
    )
