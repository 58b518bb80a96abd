import os
import platform

import django
from django.http import HttpResponse
from django.shortcuts import render

from .models import Note


def index(request):
    return render(request, "notes/index.html", {
        "notes": Note.objects.order_by("id")[:5],
        "count": Note.objects.count(),
        "django": django.get_version(),
        "python": platform.python_version(),
        "pid": os.getpid(),
    })


def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")
