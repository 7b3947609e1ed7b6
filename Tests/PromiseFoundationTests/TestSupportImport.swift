// Every test file of this target sees the shared test helpers.
@_exported import TestSupport
