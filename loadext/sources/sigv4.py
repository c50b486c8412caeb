"""AWS Signature Version 4 for the Prometheus queries (`prometheus.sigv4`: Amazon Managed
Service for Prometheus), through botocore, the AWS SDK's own signer and credential chain. So
loadext finds credentials where every AWS tool finds them (the environment, the web identity
token IRSA mounts, EKS Pod Identity, an instance profile), refreshes temporary ones before they
expire, and with `roleArn` assumes that role through STS in the configured region.

botocore signs the query string exactly as written, while AWS decodes it and re-encodes it
(RFC 3986, a space as %20) before it checks: connection.py therefore sends the query already
in that form (`canonical_query`), or a space written '+' would fail the signature.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote, urlencode

from loadext.config import SigV4
from loadext.sources.query_error import QueryError

SERVICE = "aps"  # Amazon Managed Service for Prometheus' signing name


def canonical_query(params: dict[str, str]) -> str:
    """The query string as SigV4 canonicalises it: every byte but A-Z a-z 0-9 - _ . ~ escaped."""
    return urlencode(sorted(params.items()), quote_via=quote, safe="")


class Signer:
    """Signs one request at a time; thread-safe (the refresh queries from worker threads)."""

    def __init__(self, sigv4: SigV4) -> None:
        import botocore.session  # the aws extra: imported only when sigv4 is configured

        self._sigv4 = sigv4
        self._session = botocore.session.get_session()
        self._session.set_config_variable("region", sigv4.region)  # STS in the same region
        self._lock = threading.Lock()
        self._credentials: Any = None

    def describe(self) -> str:
        """Who signs, as a 401 or 403 should say it (an access key ID is not a secret)."""
        role = f", assuming {self._sigv4.role_arn}" if self._sigv4.role_arn else ""
        try:
            key = self._frozen().access_key
        except QueryError:
            key = "no credentials"
        return f"sigv4 as {key} in {self._sigv4.region}{role}"

    def headers(self, url: str, secrets: list[str]) -> dict[str, str]:
        """Authorization, X-Amz-Date (and X-Amz-Security-Token) for a GET of `url`, which must
        carry its query string in canonical form."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        credentials = self._frozen()
        secrets.append(credentials.secret_key)
        if credentials.token:
            secrets.append(credentials.token)
        request = AWSRequest(method="GET", url=url)
        SigV4Auth(credentials, SERVICE, self._sigv4.region).add_auth(request)
        return {name: str(value) for name, value in request.headers.items()}

    def _frozen(self) -> Any:
        """The credentials now (a refresh, or the first STS call, happens here, not at start:
        an STS outage is a failed query, not a crash)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            with self._lock:
                if self._credentials is None:
                    self._credentials = self._resolve()
            return self._credentials.get_frozen_credentials()
        except ClientError as exc:  # STS said no: AccessDenied, ExpiredToken, ...
            error = exc.response.get("Error", {})
            cause = f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
            role = self._sigv4.role_arn
            raise QueryError("auth", f"prometheus.sigv4: STS refused to assume {role}: {cause}") from None
        except BotoCoreError as exc:
            raise QueryError("credentials", f"prometheus.sigv4: {exc}") from None

    def _resolve(self) -> Any:
        from botocore.credentials import AssumeRoleCredentialFetcher, DeferredRefreshableCredentials

        base = self._session.get_credentials()
        if base is None:
            raise QueryError(
                "credentials",
                "prometheus.sigv4: no AWS credentials found (environment, web identity token, "
                "pod identity or instance profile)",
            )
        if not self._sigv4.role_arn:
            return base
        fetcher = AssumeRoleCredentialFetcher(
            client_creator=self._session.create_client,
            source_credentials=base,
            role_arn=self._sigv4.role_arn,
            extra_args={"RoleSessionName": "loadext"},
        )
        return DeferredRefreshableCredentials(refresh_using=fetcher.fetch_credentials, method="assume-role")
