"""ngshare as a hub service on one machine: loopback only, and its records saved under SQLAlchemy 2.

Two fixes for ngshare 0.6 (its last release, written for SQLAlchemy 1.x), applied here before its
own ``main`` runs with the same arguments:

- it binds its port on every interface (it expects a Kubernetes proxy in front of it); on one
  machine the hub's proxy and the users' servers reach it on the loopback, so it listens there;
- it creates a released assignment as ``Assignment(name, course)`` and a submission as
  ``Submission(student, assignment)`` and relies on SQLAlchemy 1.x's "cascade backrefs" to put the
  new object into the session of the course it points to. SQLAlchemy 2 dropped that, so the
  release and the submission were silently not saved ("Object of type <Assignment> not in
  session"). Setting such a many-to-one link now adds the new object to its target's session.
"""
import sys

from sqlalchemy import event
from sqlalchemy.orm import configure_mappers, object_session
from tornado.httpserver import HTTPServer

_listen = HTTPServer.listen


def _loopback_only(self, port, address="", **kwargs):
    return _listen(self, port, "127.0.0.1", **kwargs)


def _join_target_session(target, value, oldvalue, initiator):
    session = object_session(value) if value is not None else None
    if session is not None and object_session(target) is None:
        session.add(target)
    return value


def patch_database() -> None:
    from ngshare.database.database import Assignment, Submission
    configure_mappers()                       # creates the backref attribute Assignment.course
    for link in (Assignment.course, Submission.assignment, Submission.student):
        event.listen(link, "set", _join_target_session, retval=True)


if __name__ == "__main__":
    HTTPServer.listen = _loopback_only
    patch_database()
    from ngshare.ngshare import main
    main(sys.argv[1:])
