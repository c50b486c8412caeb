"""Coverage-guided fuzzing (atheris, libFuzzer) of the protocol decoders and the verbs behind
them: every input must end as a reply that is valid JSON (UTF-8, the JSON grammar; Python's json
module, which like Go's accepts lone surrogate escapes) or as a ProtocolError (the server's
400); any other exception is a crash and stops the run with the input saved.

    python3 tests/fuzz/atheris_protocol.py -runs=500000 [-max_len=4096] [corpus_dir]

The first byte picks the verb and the decoding mode; the rest is the body. The seed corpus is
the wire fixtures in tests/fixtures (pass the directory), so mutations start from real shapes.
"""

from __future__ import annotations

import json
import sys
import time

import atheris

with atheris.instrument_imports():
    from loadext.config import parse_config
    from loadext.extender import Extender
    from loadext.protocol import (
        ProtocolError,
        decode_binding_args,
        decode_extender_args,
        decode_preemption_args,
        encode_binding_result,
    )
    from loadext.telemetry import Telemetry

CONFIG = """prometheus: {url: "http://127.0.0.1:9"}
signals:
  - {name: cpu, query: up, threshold: 0.8}
  - {name: memory, query: up, threshold: 0.9}
"""
extender = Extender(parse_config(CONFIG), Telemetry())
now = time.time()
extender.cache.store("cpu", {"machine1": 0.95, "machine2": 0.2, "10.0.0.3": 0.5}, now)
extender.cache.store("memory", {"machine1": 0.3, "machine2": 0.95}, now)
extender.cache.rebuild()
extender.refreshed_once = True


def one_input(data: bytes) -> None:
    if not data:
        return
    selector, body = data[0], data[1:]
    try:
        match selector % 5:
            case 0:
                reply = extender.filter(decode_extender_args(body, node_details=False)).body
            case 1:
                reply = extender.prioritize(decode_extender_args(body, node_details=True)).body
            case 2:
                reply = extender.filter(decode_extender_args(body, node_details=True)).body
            case 3:
                reply = extender.preempt(decode_preemption_args(body)).body
            case _:
                reply = encode_binding_result("" if decode_binding_args(body).node else "no node")
    except ProtocolError:
        return
    json.loads(reply)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
