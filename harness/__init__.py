"""Real components for loadext's tests and demo: Prometheus, an exporter, a fault proxy.

Not part of the installed package. Tests and the demo start a real Prometheus server (Debian
package `prometheus`) on loopback, scraping an exporter whose values they control.
"""
