"""Who is calling: bearer tokens issued by the CLI, stored only as hashes, and their owner."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select

from extractor.labeling.db import Database
from extractor.labeling.errors import AuthenticationError, UserInputError
from extractor.labeling.models import AccessToken, Team, User, team_members

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


def add_user(db: Database, email: str, team_name: str | None = None) -> dict[str, str | None]:
    """Create the user (or reuse it), issue a new token, and join ``team_name`` (created if new).

    Returns ``{"userId", "token", "teamId"}``; the token is shown this once and never again.
    """
    email = normalize_email(email)
    if "@" not in email or len(email) > 320:
        raise UserInputError(f"not an email address: {email!r}")
    token = secrets.token_urlsafe(TOKEN_BYTES)
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


def authenticate(db: Database, authorization: str | None) -> Caller:
    """The caller behind an ``Authorization: Bearer <token>`` header, else AuthenticationError."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError()
    with db.session() as session:
        user = session.scalar(
            select(User).join(AccessToken).where(AccessToken.token_hash == hash_token(token))
        )
        if user is None:
            raise AuthenticationError()
        team_ids = session.scalars(
            select(team_members.c.team_id).where(team_members.c.user_id == user.id)
        ).all()
        return Caller(user_id=user.id, email=user.email, team_ids=frozenset(team_ids))
