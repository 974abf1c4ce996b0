"""The API: every v1 endpoint is registered on one router; the schema and its docs page.

New endpoints (the playground's runs, say) register on ``router`` under their own prefix
and follow ``loopatlas.api.conventions``.
"""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from atlas.api import views as atlas_api
from playground import api as playground_api

app_name = "api"

router = DefaultRouter()
router.register("works", atlas_api.WorkViewSet, basename="work")
router.register("authors", atlas_api.AuthorViewSet, basename="author")
router.register("facets", atlas_api.FacetViewSet, basename="facet")
router.register("timeline", atlas_api.TimelineViewSet, basename="timeline")
router.register("compare", atlas_api.CompareViewSet, basename="compare")
router.register("export", atlas_api.ExportViewSet, basename="export")
router.register("export/versions", atlas_api.PinnedExportViewSet, basename="export-version")
router.register("changes", atlas_api.ChangeViewSet, basename="change")
router.register("suggestions", atlas_api.SuggestionViewSet, basename="suggestion")
router.register("proposals", atlas_api.ProposalViewSet, basename="proposal")
router.register("runs/compare", playground_api.RunCompareViewSet, basename="run-compare")
router.register("runs", playground_api.RunViewSet, basename="run")

urlpatterns = [
    path("v1/", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its init script from a URL: the CSP allows no inline script.
    # A page, so GET and HEAD only: DRF's OPTIONS would render its metadata with the
    # page's template, which cannot hold it (a 500).
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api:schema",
            template_name="api/swagger_ui.html",
            http_method_names=["get", "head"],
        ),
        name="docs",
    ),
]
