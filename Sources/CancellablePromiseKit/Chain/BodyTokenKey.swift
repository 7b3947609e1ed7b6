/// A member of a chain by the table it is listed in (its storage's identity) and its slot
/// there: what a running body knows its step by.
struct BodyTokenKey: Hashable {
    let storage: ObjectIdentifier
    let slot: UInt32
}

/// The tokens of a chain's pending members that a running body read.
typealias BodyTokens = [BodyTokenKey: CancellationToken]
