from django.contrib import admin
from django.urls import path

from notes import views

urlpatterns = [
    path("", views.index),
    path("healthz", views.healthz),
    path("admin/", admin.site.urls),
]
