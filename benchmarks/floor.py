"""The HTTP floor: a bare aiohttp handler that reads the body and returns a constant.

Run the same way as loadext (same event loop policy), so the ratio says how much of loadext's
cost is its own work rather than the HTTP stack's.
"""

from __future__ import annotations

import sys

from aiohttp import web

from loadext.http.limits import Limits
from loadext.http.server import install_event_loop

REPLY = b'{"Nodes":null,"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


async def handle(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=REPLY, content_type="application/json")


def main() -> None:
    install_event_loop()
    app = web.Application(client_max_size=Limits().max_body_size)
    app.router.add_post("/filter", handle)
    app.router.add_post("/prioritize", handle)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
