"""Root conftest: pytester for the plugin's own tests. The perfsuite plugin itself loads via its entry point."""

pytest_plugins = ["pytester"]
