// Every file of this module imports Combine where it exists (Apple platforms) and OpenCombine
// otherwise: the package's Linux check (CombineCheck/) compiles these same files against
// OpenCombine, whose names are Combine's. In the root package on Linux the module is empty.
@_exported import CancellablePromiseKit

#if canImport(Combine)
import Combine

/// Combine's `Cancellable` protocol (this module's files also see CancellablePromiseKit's).
typealias CombineCancellable = Combine.Cancellable
#elseif canImport(OpenCombine)
import OpenCombine

/// OpenCombine's `Cancellable` protocol (this module's files also see CancellablePromiseKit's).
typealias CombineCancellable = OpenCombine.Cancellable
#endif
