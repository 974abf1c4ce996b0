from django.urls import path

from atlas import feeds, views

app_name = "atlas"
urlpatterns = [
    path("", views.explore, name="explore"),
    path("works/propose/", views.work_propose, name="propose"),  # before the slugs
    path("works/<slug:slug>/", views.work_detail, name="work"),
    path("works/<slug:slug>/suggest/", views.work_suggest, name="suggest"),
    path("map/", views.atlas_map, name="map"),
    path("authors/<slug:slug>/", views.author_detail, name="author"),
    path("compare/", views.compare, name="compare"),
    path("compare/pick/", views.compare_pick, name="compare-pick"),
    path("intake/", views.intake, name="intake"),
    path("feeds/works.atom", feeds.works_feed, name="feed-works"),
    path("feeds/changes.atom", feeds.changes_feed, name="feed-changes"),
]
