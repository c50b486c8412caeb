"""Node addresses as Prometheus labels carry them and Node objects list them, in one canonical form."""

from __future__ import annotations

import ipaddress


def normalise_address(value: str) -> str | None:
    """'10.0.0.7:9100' -> '10.0.0.7'; '[fd00::7]:9100' -> 'fd00::7'; not an IP -> None."""
    text = value.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        text = text[1:end]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None
