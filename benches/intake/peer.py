"""The Python peer receiver of the intake benchmark (benches/intake.rs).

What a minimal gidgethub webhook receiver does, and nothing more: verify the
X-Hub-Signature-256 HMAC and parse the JSON (gidgethub.sansio.Event.from_http),
then answer 202. Nothing is stored. One process, one event loop, no access log.

    python peer.py PORT SECRET_FILE
"""

import sys

from aiohttp import web
from gidgethub import BadRequest, ValidationFailure, sansio


def main() -> None:
    port = int(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        secret = f.read().strip()

    async def webhook(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            event = sansio.Event.from_http(request.headers, body, secret=secret)
        except ValidationFailure:
            return web.Response(status=401, text="bad signature")
        except BadRequest as e:
            return web.Response(status=400, text=str(e))
        if not isinstance(event.data, dict):
            return web.Response(status=400, text="not a JSON object")
        return web.Response(status=202, text="accepted")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=25 * 1024 * 1024)
    app.router.add_post("/webhook", webhook)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
