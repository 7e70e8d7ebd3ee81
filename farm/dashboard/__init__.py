"""The live dashboard: a stdlib HTTP server on 127.0.0.1 serving one static page that polls `/api/stats`.

`/api/stats` is `farm.aggregate.album_stats` as JSON; `/metrics` the same figures as Prometheus text. The page draws
with plain SVG (no CDN, nothing fetched from outside), so it works on a machine with no network.
"""
