// swift-tools-version:6.1
// Benchmarks for CancellablePromiseKit: a separate package so library users never resolve
// ordo-one/benchmark. Run `Benchmarks/run` (or `Benchmarks/run --smoke`) from anywhere.
import PackageDescription

let package = Package(
    name: "CancellablePromiseKitBenchmarks",
    // macOS 15: `Synchronization` (`Atomic`, `Mutex`) for the state that `@Sendable` bodies share
    // with a workload. A Swift 6.1 toolchain (Xcode 16.3) needs macOS 15 to run anyway.
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "CancellablePromiseKit", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "PromiseBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CancellablePromiseKit", package: "CancellablePromiseKit"),
                "SharedWorkloads",
            ],
            path: "Benchmarks/PromiseBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // A plain driver of the hot paths, for `valgrind --tool=callgrind` (see Benchmarks/README.md).
        .executableTarget(
            name: "PromiseProfile",
            dependencies: [
                .product(name: "CancellablePromiseKit", package: "CancellablePromiseKit"),
                "SharedWorkloads",
            ],
            path: "Sources/PromiseProfile"
        ),
        // The workloads both of the above run: queue hops, race and when over two inputs.
        .target(
            name: "SharedWorkloads",
            dependencies: [.product(name: "CancellablePromiseKit", package: "CancellablePromiseKit")],
            path: "Sources/SharedWorkloads"
        ),
    ],
    swiftLanguageModes: [.v6]
)
