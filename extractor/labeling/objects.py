"""The GraphQL objects the resolvers return, built from database rows: what a client may see
of a job, tag, custom API or project (never a payload or a secret)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from extractor.jobs import JobRecord
from extractor.labeling.credentials import shown_url
from extractor.labeling.models import CustomAPI, Project, Tag


def iso(moment: datetime) -> str:
    """A stored naive-UTC timestamp as ISO-8601 with its zone spelled out."""
    return moment.isoformat(timespec="milliseconds") + "Z"


def job_view(job: JobRecord) -> dict[str, Any]:
    """The GraphQL ``Job``: never its payload (which may hold a secret)."""
    return {
        "id": job.id,
        "status": job.status,
        "progress": job.progress,
        "errors": list(job.errors),
        "resultId": job.result_id,
        "createdAt": iso(job.created_at),
        "updatedAt": iso(job.updated_at),
    }


def tag_view(tag: Tag) -> dict[str, Any]:
    """The GraphQL ``Tag``; no tag here is global (those would be the operator's)."""
    return {"id": tag.id, "name": tag.name, "globalTag": False}


def custom_api_view(api: CustomAPI) -> dict[str, Any]:
    """The GraphQL ``CustomAPI``: everything but the secret."""
    return {
        "id": api.id,
        "name": api.name,
        "endpointURL": shown_url(api.endpoint_url),
        "purpose": api.purpose,
        "teamId": api.team_id,
    }


def project_view(project: Project) -> dict[str, Any]:
    """The GraphQL ``Project`` with its tags; its documents are paged by their own resolver."""
    return {
        "id": project.id,
        "name": project.name,
        "kind": project.kind,
        "teamId": project.team_id,
        "tags": [tag_view(tag) for tag in project.tags],
    }
