"""`loadext serve`: the parsed flags as ServeOptions, and the server run until SIGTERM."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    # The server's modules load here, not when the CLI starts: check-config needs none of them.
    from loadext.app import ServeOptions, serve
    from loadext.http.limits import Limits
    from loadext.sources.watches import ConfigMapRef

    configmap = ConfigMapRef(args.configmap[0], args.configmap[1], args.configmap_key) if args.configmap else None
    options = ServeOptions(
        config=args.config,
        configmap=configmap,
        kubeconfig=args.kubeconfig,
        watch_nodes=args.watch_nodes,
        requeue_stranded=args.requeue_stranded,
        reload_interval=args.reload_interval,
        listen=args.listen,
        path_prefix=args.path_prefix,
        metrics_listen=args.metrics_listen,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        limits=Limits(
            max_body_size=args.max_body_size,
            header_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
            max_concurrent=args.max_concurrent_requests,
            max_inflight_bytes=args.max_inflight_bytes,
            body_memory=args.body_memory,
        ),
        shutdown_delay=args.shutdown_delay,
        shutdown_timeout=args.shutdown_timeout,
    )
    return serve(options)
