"""The engine gate: a bounded number of extractions at once per worker, the rest queue or get 503;
and pages rendered ahead of the engine, bounded too."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from extractor import metrics
from extractor.errors import EngineTimeout, ServiceBusy
from extractor.heap import keep_idle_memory_in_small_pages, trim_heap
from extractor.media.images import PageImage

T = TypeVar("T")


class EngineGate:
    """Runs extractions on a fixed number of engine threads with a bounded queue.

    A request past the bound is refused at once with 503 and Retry-After instead of waiting
    forever; a request that outlives its deadline gets a 504 while the engine thread finishes
    (or, for faster-whisper, stops at the next segment) on its own.
    """

    def __init__(self, slots: int, queue_size: int) -> None:
        self._executor = ThreadPoolExecutor(slots, thread_name_prefix="engine")
        self._limit = slots + queue_size
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    def run(self, job: Callable[[], T], deadline: float, cancel: threading.Event) -> T:
        with self._lock:
            if self._pending >= self._limit:
                metrics.BUSY_REFUSALS.inc()
                raise ServiceBusy(
                    "every engine slot and queue place is taken; retry shortly",
                    headers={"Retry-After": "5"},
                )
            self._pending += 1
            metrics.QUEUE_DEPTH.inc()
        future = self._executor.submit(_then_trim_heap, job)
        future.add_done_callback(self._release)
        try:
            return future.result(timeout=max(deadline - time.monotonic(), 0))
        except FutureTimeout:
            cancel.set()
            future.cancel()
            raise EngineTimeout("the extraction took longer than the request timeout") from None

    def _release(self, _future: Future[T]) -> None:
        with self._lock:
            self._pending -= 1
            metrics.QUEUE_DEPTH.dec()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _then_trim_heap(job: Callable[[], T]) -> T:
    """Run ``job``, then hand the heap's free pages back to the system.

    An extraction's buffers (decoded audio, CTranslate2's working memory, page images) are
    freed afterwards but glibc keeps the pages: measured ~30 MB of a worker's RSS per
    transcription that ``malloc_trim`` returns in a millisecond or two.
    """
    try:
        return job()
    finally:
        trim_heap()
        keep_idle_memory_in_small_pages()


class PagesAhead:
    """Pages produced in order on a thread of their own, at most ``ahead`` + 1 of them waiting
    for a reader at once (rendered PDF pages on disk: 9 MB each at 300 dpi).

    ``get(i)`` waits for page ``i``. A page that fails fails every later one with it, so no
    reader waits for a page that will never come.
    """

    def __init__(self, count: int, produce: Callable[[int], PageImage], ahead: int) -> None:
        self._produce = produce
        self._pages: list[Future[PageImage]] = [Future() for _ in range(count)]
        self._room = threading.Semaphore(ahead + 1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pages-ahead", daemon=True)

    def __enter__(self) -> PagesAhead:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._room.release()  # in case it waits for room nobody will make
        self._thread.join()

    def get(self, index: int) -> PageImage:
        page = self._pages[index].result()
        self._room.release()
        return page

    def _run(self) -> None:
        for index, page in enumerate(self._pages):
            self._room.acquire()
            if self._stop.is_set():
                failure: BaseException = EngineTimeout("the document's reading stopped")
            else:
                try:
                    page.set_result(self._produce(index))
                    continue
                except BaseException as exc:  # handed to the page's reader
                    failure = exc
            for left in self._pages[index:]:
                if not left.done():
                    left.set_exception(failure)
            return


def in_page_order(count: int, work: Callable[[int], T], parallelism: int) -> Iterator[T]:
    """Pages run concurrently (one Tesseract instance each), results yielded in page order,
    each let go of once taken (a finished future would otherwise hold its page's lines)."""
    if count == 1:
        yield work(0)
        return
    with ThreadPoolExecutor(min(count, parallelism)) as pool:
        futures: list[Future[T] | None] = [pool.submit(work, i) for i in range(count)]
        try:
            for index, future in enumerate(futures):
                assert future is not None
                futures[index] = None
                result = future.result()
                del future
                yield result
                del result
        except BaseException:
            # One page failed (a 504, a bad page): the rest would only be thrown away.
            for left in futures:
                if left is not None:
                    left.cancel()
            raise
