"""What both edges use, sources/ and http/ alike, so that neither imports the other: the
Kubernetes objects as decoded from the wire (msgspec structs of the fields loadext reads), and a
wait that ends early when told.
"""
