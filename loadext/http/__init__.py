"""How core is served to kube-scheduler: the wire protocol (decode and encode, only here), the
aiohttp routes and verb handler, client limits, listeners and drain, TLS.
"""
