"""Layer 0: what every other layer uses — the error hierarchy (:mod:`sgtune.core.errors`),
input validation (``_validation``) and the citation registry (``_refs``). Imports nothing from sgtune."""
