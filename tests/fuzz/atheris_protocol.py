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
    from loadext.core.cluster import Cluster
    from loadext.core.extender import Extender
    from loadext.core.snapshot import SignalValues
    from loadext.http.protocol import (
        Codec,
        ProtocolError,
        decode_binding_args,
        encode_binding_result,
        encode_filter_result,
        encode_preemption_result,
    )

CONFIG = """prometheus: {url: "http://127.0.0.1:9"}
signals:
  - {name: cpu, query: up, threshold: 0.8}
  - {name: memory, query: up, threshold: 0.9}
"""
cluster, codec = Cluster(parse_config(CONFIG)), Codec()
extender = Extender(cluster.verbs)
now = time.time()
cluster.refreshed(
    [
        SignalValues("cpu", {"machine1": 0.95, "machine2": 0.2, "10.0.0.3": 0.5}, now),
        SignalValues("memory", {"machine1": 0.3, "machine2": 0.95}, now),
    ]
)


def filtered(body: bytes, node_details: bool) -> bytes:
    request = codec.decode_extender_args(body, node_details=node_details)
    return encode_filter_result(extender.filter(request.args), request.full_nodes)


def one_input(data: bytes) -> None:
    if not data:
        return
    selector, body = data[0], data[1:]
    try:
        match selector % 5:
            case 0:
                reply = filtered(body, node_details=False)
            case 1:
                reply = codec.encode_host_priority_list(
                    extender.prioritize(codec.decode_extender_args(body, True).args)
                )
            case 2:
                reply = filtered(body, node_details=True)
            case 3:
                reply = encode_preemption_result(extender.preempt(codec.decode_preemption_args(body)))
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
