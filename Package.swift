// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "CancellablePromiseKit",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "PromiseCore", targets: ["PromiseCore"]),
        .library(name: "CancellablePromiseKit", targets: ["CancellablePromiseKit"]),
        .library(name: "PromiseFoundation", targets: ["PromiseFoundation"]),
        // Virtual time for tests of time-based code (`TestScheduler`); no XCTest dependency.
        .library(name: "PromiseTesting", targets: ["PromiseTesting"]),
        // Promises as Combine publishers and back; empty where Combine is not available.
        .library(name: "PromiseCombine", targets: ["PromiseCombine"]),
        .executable(name: "Example", targets: ["Example"]),
    ],
    targets: [
        // The lock word of promises on Linux (a futex lock; see its header).
        .target(name: "CPromiseLock"),
        .target(name: "PromiseCore", dependencies: ["CPromiseLock"]),
        .target(name: "CancellablePromiseKit", dependencies: ["PromiseCore", "CPromiseLock"]),
        .target(name: "PromiseFoundation", dependencies: ["CancellablePromiseKit"]),
        .target(name: "PromiseTesting", dependencies: ["PromiseCore"]),
        // Imports Apple's Combine (no package dependency). CombineCheck/ compiles the same files
        // against OpenCombine to test them on Linux.
        .target(name: "PromiseCombine", dependencies: ["CancellablePromiseKit"]),
        .target(
            name: "ExampleSupport",
            dependencies: ["CancellablePromiseKit", "PromiseFoundation"],
            path: "Example/ExampleSupport"
        ),
        .executableTarget(
            name: "Example", dependencies: ["CancellablePromiseKit", "ExampleSupport"], path: "Example/CLI"),
        // Helpers the test targets share: thread-safe boxes, waiting (not a product).
        .target(name: "TestSupport", dependencies: ["PromiseCore", "PromiseTesting"], path: "Tests/TestSupport"),
        .testTarget(name: "ExampleTests", dependencies: ["ExampleSupport", "TestSupport"]),
        .testTarget(name: "PromiseCoreTests", dependencies: ["PromiseCore", "TestSupport"]),
        .testTarget(name: "CancellablePromiseKitTests", dependencies: ["CancellablePromiseKit", "TestSupport"]),
        .testTarget(name: "PromiseTestingTests", dependencies: ["PromiseTesting", "PromiseCore", "TestSupport"]),
        .testTarget(name: "PromiseCombineTests", dependencies: ["PromiseCombine", "TestSupport"]),
        .testTarget(
            name: "PromiseFoundationTests",
            dependencies: ["PromiseFoundation", "TestSupport"],
            resources: [.copy("Server")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
