from django.urls import path

from playground import events, views

app_name = "playground"
urlpatterns = [
    path("playground/", views.index, name="index"),
    path("playground/runs/", views.run_list, name="runs"),
    path("playground/frontier/", views.frontier, name="frontier"),
    path("playground/frontier/<str:name>.csv", views.frontier_csv, name="frontier-csv"),
    path("playground/runs/<uuid:run_id>/", views.run_detail, name="run"),
    path("playground/runs/<uuid:run_id>/stop/", views.run_stop, name="run-stop"),
    path(
        "playground/runs/<uuid:run_id>/compare/",
        views.run_compare_start,
        name="run-compare-start",
    ),
    path(
        "playground/runs/<uuid:run_id>/full-depth/",
        views.run_full_depth_start,
        name="run-full-depth",
    ),
    path("playground/runs/<uuid:run_id>/branch/", views.run_branch_start, name="run-branch"),
    path("playground/compare/", views.run_compare, name="compare"),
    path("runs/<uuid:run_id>/events", events.run_events, name="run-events"),
]
