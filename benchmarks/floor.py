"""The HTTP floor: a bare aiohttp extender, run the same way as loadext (same event loop policy),
so the ratio says how much of loadext's cost is its own work rather than the HTTP stack's.

    python3 benchmarks/floor.py PORT           # reads the body, returns a constant (run.py)
    python3 benchmarks/floor.py PORT --echo    # the least a correct extender does (scheduler/run.py)

--echo answers as a real extender must for the scheduler to go on: filter passes every node it
was sent, prioritize scores each 0; orjson decodes the body and encodes the reply, nothing else.
"""

from __future__ import annotations

import sys

import orjson
from aiohttp import web

from loadext.config.serving import Limits
from loadext.http.server import install_event_loop

REPLY = b'{"Nodes":null,"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'
JSON = "application/json"


async def constant(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=REPLY, content_type=JSON)


async def echo_filter(request: web.Request) -> web.Response:
    names = orjson.loads(await request.read()).get("NodeNames") or []
    reply = {"Nodes": None, "NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    return web.Response(body=orjson.dumps(reply), content_type=JSON)


async def echo_prioritize(request: web.Request) -> web.Response:
    names = orjson.loads(await request.read()).get("NodeNames") or []
    return web.Response(body=orjson.dumps([{"Host": name, "Score": 0} for name in names]), content_type=JSON)


def main() -> None:
    install_event_loop()
    echo = "--echo" in sys.argv[2:]
    app = web.Application(client_max_size=Limits().max_body_size)
    app.router.add_post("/filter", echo_filter if echo else constant)
    app.router.add_post("/prioritize", echo_prioritize if echo else constant)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
