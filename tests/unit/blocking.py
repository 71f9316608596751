"""A call that may block on a FIFO, run so that a test fails instead of hanging (shared by the share-data tests)."""

import os
import threading

import pytest


def within(seconds, call, fifo=None):
    """call() in a thread, failing the test (not hanging it) when it is still blocked after `seconds`; a reader
    blocked on `fifo` is released by opening it for writing once."""
    result = {}

    def target():
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"still blocked after {seconds}s")
    return result
