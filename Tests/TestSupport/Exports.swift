// Every test target that imports TestSupport sees the test scheduler too.
@_exported import PromiseTesting
