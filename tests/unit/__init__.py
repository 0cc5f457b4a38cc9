"""Fast tests: pure logic and local files, no server and no subprocess (`make test-fast` runs them)."""
