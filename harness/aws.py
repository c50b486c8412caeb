"""A stand-in for the two AWS endpoints `prometheus.sigv4` talks to, on loopback: an Amazon
Managed Prometheus workspace (`/workspaces/<id>/api/v1/...`, proxied to a real Prometheus) and
STS (`AssumeRole`). It checks every request's SigV4 signature the way AWS does, by recomputing
it from the request it received, with requests-aws4auth: an implementation independent of the
botocore signer loadext uses. A request whose signature does not match gets AWS' 403.

loadext reaches STS here through AWS_ENDPOINT_URL_STS (botocore's per-service endpoint).
"""

from __future__ import annotations

import datetime
import hmac
import re
import secrets
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import requests
from requests_aws4auth import AWS4Auth

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<day>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})$"
)
_WORKSPACE = re.compile(r"^/workspaces/[^/]+(?P<rest>/api/v1/.*)$")


@dataclass(frozen=True)
class Key:
    secret: str
    token: str | None = None  # temporary credentials (from AssumeRole) carry a session token


@dataclass
class AwsStandIn:
    upstream: str  # the real Prometheus behind the workspace
    region: str
    keys: dict[str, Key] = field(default_factory=dict)
    roles: dict[str, set[str]] = field(default_factory=dict)  # role ARN -> access keys allowed to assume it
    verified: list[tuple[str, str]] = field(default_factory=list)  # (service, access key) per good signature
    rejected: list[str] = field(default_factory=list)  # why, per refused request

    def __post_init__(self) -> None:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                found = _WORKSPACE.match(self.path)
                if found is None:
                    return self._reply(404, b'{"message":"no such workspace path"}')
                problem = stand_in.check(self, "aps", b"")
                if problem:
                    return self._reply(403, b'{"message":"%s"}' % problem.encode())
                try:
                    with urllib.request.urlopen(stand_in.upstream + found["rest"], timeout=30) as reply:
                        self._reply(reply.status, reply.read())
                except urllib.error.HTTPError as exc:
                    self._reply(exc.code, exc.read())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                problem = stand_in.check(self, "sts", body)
                if problem:
                    return self._reply(403, _sts_error("SignatureDoesNotMatch", problem), "text/xml")
                code, reply = stand_in.assume_role(self.headers["Authorization"], parse_qs(body.decode()))
                self._reply(code, reply, "text/xml")

            def _reply(self, code: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def check(self, request: BaseHTTPRequestHandler, service: str, body: bytes) -> str | None:
        """Why the request's signature is not good (None: it is), recomputed with aws4auth."""
        problem = self._problem(request, service, body)
        if problem:
            self.rejected.append(problem)
        return problem

    def _problem(self, request: BaseHTTPRequestHandler, service: str, body: bytes) -> str | None:
        found = _AUTHORIZATION.match(request.headers.get("Authorization", ""))
        if found is None:
            return "no SigV4 Authorization header"
        if (found["region"], found["service"]) != (self.region, service):
            return f"credential scope {found['region']}/{found['service']}, expected {self.region}/{service}"
        key = self.keys.get(found["key"])
        if key is None:
            return f"unknown access key {found['key']}"
        if key.token is not None and request.headers.get("X-Amz-Security-Token") != key.token:
            return "the session token does not belong to the access key"
        sent = datetime.datetime.strptime(request.headers.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ")
        skew = abs((datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - sent).total_seconds())
        if skew > 300:
            return f"signed {skew:.0f}s away from now"
        signed = found["signed"].split(";")
        headers = {name: request.headers[name] for name in signed if name != "host"}
        headers["host"] = request.headers["Host"]
        again = requests.Request(
            request.command, f"http://{request.headers['Host']}{request.path}", headers=headers, data=body or None
        ).prepare()
        AWS4Auth(found["key"], key.secret, self.region, service, session_token=key.token, include_hdrs=signed)(again)
        expected = again.headers["Authorization"].rpartition("Signature=")[2]
        if not hmac.compare_digest(expected, found["signature"]):
            return "The request signature we calculated does not match the signature you provided"
        self.verified.append((service, found["key"]))
        return None

    def assume_role(self, authorization: str, form: dict[str, list[str]]) -> tuple[int, bytes]:
        caller = authorization.split("Credential=")[1].split("/")[0]
        role = form.get("RoleArn", [""])[0]
        if form.get("Action") != ["AssumeRole"] or caller not in self.roles.get(role, set()):
            return 403, _sts_error("AccessDenied", f"{caller} is not authorized to perform: sts:AssumeRole on {role}")
        access_key = "ASIA" + secrets.token_hex(8).upper()
        temporary = Key(secrets.token_urlsafe(30), secrets.token_urlsafe(60))
        self.keys[access_key] = temporary
        expires = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        session = form.get("RoleSessionName", ["session"])[0]
        assumed = role.replace(":iam:", ":sts:").replace(":role/", ":assumed-role/")
        return 200, (
            '<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>'
            f"<Credentials><AccessKeyId>{access_key}</AccessKeyId><SecretAccessKey>{temporary.secret}</SecretAccessKey>"
            f"<SessionToken>{temporary.token}</SessionToken><Expiration>{expires}</Expiration></Credentials>"
            f"<AssumedRoleUser><Arn>{assumed}/{session}</Arn>"
            f"<AssumedRoleId>AROA{secrets.token_hex(6).upper()}:{session}</AssumedRoleId></AssumedRoleUser>"
            "</AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>"
        ).encode()


def _sts_error(code: str, message: str) -> bytes:
    return (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
        f"<Code>{code}</Code><Message>{message}</Message></Error><RequestId>1</RequestId></ErrorResponse>"
    ).encode()
