"""Root URL configuration: the atlas at /, the playground, the API and the admin.

Django's error answers are JSON under ``/api/`` (``loopatlas.api.errors``).
"""

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

handler400 = "loopatlas.api.errors.bad_request"
handler403 = "loopatlas.api.errors.permission_denied"
handler404 = "loopatlas.api.errors.page_not_found"
handler500 = "loopatlas.api.errors.server_error"
