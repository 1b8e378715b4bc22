"""The GitHub Actions adapter: HTTP with ETags and rate limits (``http``), credentials
(``auth``), strict JSON parsing (``parse``) and the ``JobSource`` itself (``source``)."""
