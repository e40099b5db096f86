"""Core-library test configuration: the `slow` marker (deselect with -m "not slow")."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long property runs (>= 10,000 sequences)")
