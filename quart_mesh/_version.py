"""The one place the version is written (semantic versioning, decision 0068).

``pyproject.toml`` reads it for the package's metadata; ``/api/health``, the
mesh manifest, the agent cards, the OpenAPI document, backups' manifests and
``quart-mesh --version`` import it. ``CHANGELOG.md``'s newest released heading
names the same version (``tests/test_release.py`` checks that they agree).
"""

__version__ = "0.2.0"
