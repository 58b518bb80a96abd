"""Boots the project as a framework app does, then serves it.

At every start: Django loads its settings and apps, runs the migrations of
every app (auth, admin, contenttypes, sessions and notes) on a new SQLite
database, runs the system checks, and adds a few rows; only then does it
listen on $PORT (8080), with the standard library's threaded WSGI server.
"""
import os
import socketserver
import sys
import time
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

start = time.monotonic()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shoalsite.settings")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import django  # noqa: E402
from django.core.management import call_command  # noqa: E402

django.setup()
os.makedirs(os.path.dirname(os.environ.get("DJANGO_DB", "/tmp/shoalsite/db.sqlite3")), exist_ok=True)
call_command("migrate", interactive=False, verbosity=0)
call_command("check", verbosity=0)

from notes.models import Note  # noqa: E402

if not Note.objects.exists():
    Note.objects.bulk_create(Note(text="note %d" % i) for i in range(20))

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()


class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Handler(WSGIRequestHandler):
    def log_message(self, format, *args):
        sys.stderr.write("%s\n" % (format % args))


port = int(os.environ.get("PORT", "8080"))
httpd = make_server("", port, application, server_class=Server, handler_class=Handler)
print("django %s booted in %.0f ms, listening on :%d" % (django.get_version(), (time.monotonic() - start) * 1000, port), file=sys.stderr)
httpd.serve_forever()
