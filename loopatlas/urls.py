"""Root URL configuration: the atlas at /, the playground, the API and the admin."""

from django.contrib import admin
from django.urls import include, path

from loopatlas.throttling import admin_login

urlpatterns = [
    path("admin/login/", admin_login, name="admin-login"),  # before the admin's own
    path("admin/", admin.site.urls),
    path("api/", include("loopatlas.api.urls")),
    path("", include("atlas.urls")),
    path("", include("playground.urls")),
]
