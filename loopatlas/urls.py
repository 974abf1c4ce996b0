"""Root URL configuration: the atlas at /, the playground, the API and the admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("loopatlas.api.urls")),
    path("", include("atlas.urls")),
    path("", include("playground.urls")),
]
