"""DRF renderers for the export formats; the formats themselves live in ``atlas.exports``."""

from rest_framework.renderers import BaseRenderer

from atlas.exports import EXPORT_FORMATS, ExportFormat


class ExportRenderer(BaseRenderer):
    """Renders ``{"version": str, "rows": [serialized works]}`` in one export format."""

    export: ExportFormat
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        text = self.export.render(data["rows"], data["version"])
        # DRF drops the Content-Type of an empty body; an empty export is still a file of
        # its format (RIS of no works, say), so it is one line break.
        return (text or "\n").encode(self.charset)


def _renderer(name: str) -> type[ExportRenderer]:
    fmt = EXPORT_FORMATS[name]
    attributes = {"export": fmt, "media_type": fmt.media_type, "format": fmt.name}
    return type(f"{fmt.label}ExportRenderer", (ExportRenderer,), attributes)


# JSON first: it answers requests that accept anything.
EXPORT_RENDERERS = [_renderer(name) for name in ("json", "csv", "bibtex", "ris")]
