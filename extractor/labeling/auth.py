"""Who is calling: bearer tokens issued by the CLI, stored only as hashes, and their owner."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select, update

from extractor.config import SettingsError
from extractor.labeling.db import Database
from extractor.labeling.errors import AuthenticationError, UserInputError
from extractor.labeling.models import AccessToken, Team, User, team_members, utcnow

TOKEN_BYTES = 32  # 256 random bits: a fast hash is enough, nobody can brute-force the preimage


@dataclass(frozen=True)
class Caller:
    """The authenticated user of one request and the teams they belong to."""

    user_id: str
    email: str
    team_ids: frozenset[str]

    def is_member(self, team_id: str | None) -> bool:
        """Whether ``team_id`` is one of the caller's teams."""
        return team_id is not None and team_id in self.team_ids


def hash_token(token: str) -> str:
    """The only form in which a token is stored (hex SHA-256)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def normalize_email(email: str) -> str:
    """Emails compare case-insensitively and without surrounding blanks."""
    return email.strip().lower()


def new_token() -> str:
    """A new access token: ``TOKEN_BYTES`` random bytes, URL-safe base64, never starting with
    "-" (one in 64 would, and a command line then reads it as an option: ``extractor labeling
    revoke-token -Wm...`` failed with "unrecognized arguments")."""
    while (token := secrets.token_urlsafe(TOKEN_BYTES)).startswith("-"):
        pass
    return token


def add_user(db: Database, email: str, team_name: str | None = None) -> dict[str, str | None]:
    """Create the user (or reuse it), issue a new token, and join ``team_name`` (created if new).

    Returns ``{"userId", "token", "teamId"}``; the token is shown this once and never again.
    """
    email = normalize_email(email)
    if "@" not in email or len(email) > 320:
        raise UserInputError(f"not an email address: {email!r}")
    token = new_token()
    with db.session() as session:
        user = session.scalar(select(User).where(User.email == email))
        if user is None:
            user = User(email=email)
            session.add(user)
            session.flush()
        session.add(AccessToken(user_id=user.id, token_hash=hash_token(token)))
        team_id: str | None = None
        if team_name is not None:
            team_name = team_name.strip()
            if not team_name:
                raise UserInputError("a team needs a name")
            team = session.scalar(select(Team).where(Team.name == team_name))
            if team is None:
                team = Team(name=team_name)
                session.add(team)
                session.flush()
            if user not in team.members:
                team.members.append(user)
            team_id = team.id
        return {"userId": user.id, "token": token, "teamId": team_id}


def authenticate(
    db: Database, authorization: str | None, lifetime: timedelta | None = None
) -> Caller:
    """The caller behind an ``Authorization: Bearer <token>`` header, else AuthenticationError.

    A revoked token, or one issued more than ``lifetime`` ago, is refused exactly like one that
    never existed: the caller learns nothing about which tokens once worked.
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError()
    with db.session() as session:
        query = (
            select(User)
            .join(AccessToken)
            .where(AccessToken.token_hash == hash_token(token), AccessToken.revoked_at.is_(None))
        )
        if lifetime is not None:
            query = query.where(AccessToken.created_at > utcnow() - lifetime)
        user = session.scalar(query)
        if user is None:
            raise AuthenticationError()
        team_ids = session.scalars(
            select(team_members.c.team_id).where(team_members.c.user_id == user.id)
        ).all()
        return Caller(user_id=user.id, email=user.email, team_ids=frozenset(team_ids))


def token_lifetime(days: float) -> timedelta | None:
    """The ``token_lifetime_days`` setting as a duration; None (never expire) for 0."""
    if not days >= 0:  # also refuses NaN
        raise SettingsError(
            "EXTRACTOR_LABELING_TOKEN_LIFETIME_DAYS must be 0 (no expiry) or more days"
        )
    return timedelta(days=days) if days > 0 else None


def revoke_tokens(db: Database, *, token: str | None = None, email: str | None = None) -> int:
    """Revoke one token (given by its value), or every token of the user ``email``.

    Returns how many were revoked now (0 when already revoked or unknown, so a repeated command
    is harmless). A revoked token stops working at the next request.
    """
    if (token is None) == (email is None):
        raise UserInputError("give either a token or a user's email")
    with db.session() as session:
        query = update(AccessToken).where(AccessToken.revoked_at.is_(None))
        if token is not None:
            query = query.where(AccessToken.token_hash == hash_token(token.strip()))
        else:
            user_ids = select(User.id).where(User.email == normalize_email(email or ""))
            query = query.where(AccessToken.user_id.in_(user_ids))
        result = session.execute(query.values(revoked_at=utcnow()))
        return int(getattr(result, "rowcount", 0) or 0)
