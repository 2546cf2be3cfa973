"""moto's standalone S3 server, as the object store outage test runs it.

moto keeps objects in memory. Run with MOTO_ENABLE_RECORDING=True, its
recorder appends every request to MOTO_RECORDER_FILEPATH before handling
it, and POST /moto-api/recorder/replay-recording applies a recording to a
fresh server: a server SIGKILLed and restarted comes back with its objects.

Two things make a recording replayable after a kill, and this wrapper adds
them: requests are recorded and handled one at a time, under one lock, so
the recording's order is the order the server applied them (concurrent
appends of large bodies would otherwise interleave, and a conditional put's
winner could change); /moto-api/ requests are not locked, because a replay
sends its requests to this same server.

Usage: python durable_server.py -H 127.0.0.1 -p PORT (moto_server's flags).
"""

import sys
import threading

from flask import request as flask_request
from moto.core.utils import convert_to_flask_response
from moto.server import main

_lock = threading.Lock()
_handle = convert_to_flask_response.__call__


def _one_at_a_time(self, args=None, **kwargs):
    if flask_request.path.startswith("/moto-api/"):
        return _handle(self, args, **kwargs)
    with _lock:
        return _handle(self, args, **kwargs)


convert_to_flask_response.__call__ = _one_at_a_time

if __name__ == "__main__":
    sys.exit(main())
