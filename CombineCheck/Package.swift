// swift-tools-version:6.0
// Tests PromiseCombine (and the Combine bridges of PromiseCore and CancellablePromiseKit) on
// Linux, against OpenCombine: a separate package, so the root package and its library products
// keep no dependency. Its targets are symbolic links to the root package's source directories,
// so the very files the root package ships are compiled here, with `import OpenCombine` chosen
// by their `#if canImport(Combine) … #elseif canImport(OpenCombine)` pair.
//
//   swift test --package-path CombineCheck
//   swift run -c release --package-path CombineCheck CombineCost
import PackageDescription

let openCombine = Target.Dependency.product(name: "OpenCombine", package: "OpenCombine")

let package = Package(
    name: "CombineCheck",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    dependencies: [
        .package(url: "https://github.com/OpenCombine/OpenCombine.git", from: "0.14.0")
    ],
    targets: [
        .target(name: "CPromiseLock"),
        .target(name: "PromiseCore", dependencies: ["CPromiseLock", openCombine]),
        .target(name: "CancellablePromiseKit", dependencies: ["PromiseCore", "CPromiseLock", openCombine]),
        .target(name: "PromiseCombine", dependencies: ["CancellablePromiseKit", openCombine]),
        .target(name: "PromiseTesting", dependencies: ["PromiseCore"]),
        .target(name: "TestSupport", dependencies: ["PromiseCore", "PromiseTesting"], path: "Tests/TestSupport"),
        // Round trips through the bridge, timed beside a plain `Future` + `sink`.
        .executableTarget(name: "CombineCost", dependencies: ["PromiseCombine", openCombine]),
        .testTarget(name: "PromiseCombineTests", dependencies: ["PromiseCombine", "TestSupport", openCombine]),
    ],
    swiftLanguageModes: [.v6]
)
