"""The methods a path is served with: those of the most concrete route
template that matches it, as OpenAPI matches a URL ("concrete paths before
their templated counterparts").

werkzeug tries a path's static segments before its variables, but when the
static route lacks the request's method it falls through to a route with a
variable there: ``DELETE /api/agents/bootstrap`` reached
``DELETE /api/agents/<agent_id>`` (with the id ``bootstrap``), and the
automatic ``OPTIONS`` listed ``PATCH`` and ``DELETE`` beside ``POST``
(schemathesis ST205: the ``Allow`` header lists methods the document does
not give the path). Here a path belongs to one template, the one werkzeug
tries first whatever the method; the app (:class:`quart_mesh.app.MeshApp`)
answers a method of another template with 405, and both ``OPTIONS`` and 405
say ``Allow:`` that template's methods.

Which templates another one can take paths from is worked out once, so
that a request for any other template costs nothing more; and once per
process for a set of routes (:meth:`PathMethods.of`): every app of one
release has the same, and a program (the suite) may make hundreds.
"""

from __future__ import annotations

import threading

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule

__all__ = ["PathMethods"]


class PathMethods:
    """The owner template of a path, and its methods, for one URL map.

    Build it once every route is registered (routes added later are not seen).
    """

    def __init__(self, url_map: Map) -> None:
        methods: dict[str, set[str]] = {}
        for rule in url_map.iter_rules():
            if not rule.websocket:
                methods.setdefault(rule.rule, set()).update(rule.methods or ())
        #: each template's methods, in a stable order
        self._methods = {template: sorted(found) for template, found in methods.items()}
        # one rule per template, for every method: what it matches is whose the path is
        owners = Map(
            [Rule(template, endpoint=template) for template in methods],
            converters=url_map.converters,
            strict_slashes=url_map.strict_slashes,
            merge_slashes=url_map.merge_slashes,
        )
        self._owners = owners.bind("")
        #: templates some of whose paths another template owns
        self._shadowed = frozenset(_shadowed(list(methods)))

    def owner(self, path: str) -> str | None:
        """The template that serves *path*, or ``None`` if none matches."""
        try:
            template, _ = self._owners.match(path)
        except HTTPException:  # no template, or a redirect to add a slash
            return None
        return str(template)

    def allowed(self, path: str) -> list[str] | None:
        """The methods *path* is served with (``None``: no template matches)."""
        template = self.owner(path)
        return None if template is None else self._methods[template]

    def elsewhere(self, rule: Rule, path: str) -> list[str] | None:
        """When *rule*, which werkzeug matched to *path*, is not its owner:
        the methods *path* is served with; otherwise ``None``."""
        if rule.rule not in self._shadowed:
            return None
        template = self.owner(path)
        if template is None or template == rule.rule:
            return None
        return self._methods[template]

    @classmethod
    def of(cls, url_map: Map) -> PathMethods:
        """The :class:`PathMethods` of *url_map*: one for every map with the
        same routes, converters and slash rules, built the first time (it
        keeps nothing that changes after)."""
        key = (
            tuple(
                sorted(
                    (rule.rule, tuple(sorted(rule.methods or ())))
                    for rule in url_map.iter_rules()
                    if not rule.websocket
                )
            ),
            tuple(sorted(url_map.converters.items())),
            url_map.strict_slashes,
            url_map.merge_slashes,
        )
        with _LOCK:
            found = _BUILT.get(key)
            if found is None:
                found = _BUILT[key] = cls(url_map)
                while len(_BUILT) > _KEEP:  # (a program serving many route sets)
                    del _BUILT[next(iter(_BUILT))]
            return found


#: :meth:`PathMethods.of`'s, by route set (at most :data:`_KEEP`)
_BUILT: dict[tuple[object, ...], PathMethods] = {}
_KEEP = 8
_LOCK = threading.Lock()


def _segments(template: str) -> list[str | None]:
    """*template*'s segments, ``None`` for each variable one."""
    return [None if "<" in part else part for part in template.split("/")]


def _shadowed(templates: list[str]) -> set[str]:
    """The templates that another one may take a path from: one that has a
    static segment where this one has a variable, after segments that can
    match the same text. Over-inclusive (a template with a ``path``
    variable, which spans segments, is always in), never under."""
    found = set()
    for template in templates:
        mine = _segments(template)
        if "<path:" in template:
            found.add(template)
            continue
        for other in templates:
            theirs = _segments(other)
            if other == template or (len(theirs) != len(mine) and "<path:" not in other):
                continue
            for a, b in zip(mine, theirs, strict=False):
                if a is None and b is not None:
                    found.add(template)  # theirs is tried first here
                    break
                if a is not None and (b is None or a != b):
                    break  # mine is tried first here, or no path matches both
            if template in found:
                break
    return found
