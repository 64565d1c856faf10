"""A real uvicorn server on a loopback port, on a thread: shared by the HTTP, remote-engine and
cluster tests."""

from __future__ import annotations

import threading
import time

from redraft.server.http.app import listen, make_server


class Running:
    """uvicorn serving `app` on a loopback port (a free one by default), on a thread."""

    def __init__(self, app, port: int = 0):
        self.sock = listen("127.0.0.1", port)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = make_server(app)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.01)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
