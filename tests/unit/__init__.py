"""Fast tests: pure logic and local files, no server and no subprocess (`make test-fast` runs them). One
folder per package of etl (client/, pipeline/, sinks/...) and emulator/ for etl_emulator; here, the
vocabulary modules (config, errors, timeutil), the public API and what crosses packages (properties)."""
