"""The extraction a job runs: its upload out of the database into a private folder, then the
same checks and engine call as ``POST /extract`` (``pipeline``), with progress and a deadline
of its own and outside the synchronous engine gate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from extractor.async_jobs.documents import packed_document
from extractor.async_jobs.store import save_pdf
from extractor.jobs import JobQueue
from extractor.pipeline.extraction import Extractor, Timings
from extractor.pipeline.reply import check_upload, reply_name, workspace
from extractor.pipeline.request import ExtractionRequest, Limits
from extractor.pipeline.scans import write_pdf_reply
from extractor.replies.formats import FORMATS

ProgressReport = Callable[[float, float], None]


class ExtractionWork:
    """One process's engines, as jobs use them."""

    def __init__(self, extractor: Extractor) -> None:
        self.extractor = extractor
        self.settings = extractor.settings

    def limits(self) -> Limits:
        """What a job's options are checked against (as ``/extract`` checks its own)."""
        return Limits.of(self.settings, self.extractor.ocr.installed_languages)

    def extract(
        self,
        queue: JobQueue,
        job_id: str,
        filename: str,
        options: ExtractionRequest,
        progress: ProgressReport,
        seconds: float,
        check: Callable[[], None],
        cancel: threading.Event,
        reply_format: str | None = None,
    ) -> bytes:
        """The job's Document as stored (``packed_document``): the upload's chunks joined in a
        workspace (``check`` between chunks stops a cancelled job), checked, extracted within
        ``seconds``; ``cancel`` set stops the speech engine at its next segment. A job asked
        for in a format drawn over the upload's pages (``format=pdf``) has it drawn now and
        stored beside it (``store.save_pdf``): the upload is gone once the job ends."""
        deadline = time.monotonic() + seconds
        with workspace(self.settings) as workdir:
            path = workdir / "upload"
            with path.open("wb") as out:
                for position in range(queue.upload_count(job_id)):
                    out.write(queue.upload(job_id, position).content)
                    check()
            sniffed = check_upload(path, self.settings, {})
            document = self.extractor.extract(
                path, reply_name(filename), sniffed, workdir, options, Timings(),
                progress=progress, timeout=seconds, gated=False, cancel=cancel,
            )  # fmt: skip
            drawn = FORMATS.get((reply_format or "").lower())
            if drawn is not None and drawn.scanned:
                pdf = workdir / "reply.pdf"
                write_pdf_reply(document, path, sniffed, workdir, self.settings, pdf, deadline)
                save_pdf(queue.db, job_id, pdf)
            # A long document's lines are spooled in the workspace: stored from there, a line
            # at a time, before the workspace goes.
            return packed_document(document)
